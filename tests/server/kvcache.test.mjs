// Disk KV cache of ds4-server (--kv-disk-dir).  Every test starts its own
// servers on a fresh directory (tests/t_server_kv.sh runs this file; it
// needs no shared server) with small knobs, so that prompts of a few
// hundred tokens of the tiny model are checkpointed:
//   min 32 tokens, checkpoints on multiples of 32, cold trim 8, a continued
//   checkpoint every 64 tokens.
// What is asserted is behaviour a client or an operator can see: usage
// fields (cached tokens), answers compared with an uncached server at
// temperature 0 (the restored state must be the state), /metrics, the
// server log, the files in the directory and `ds4-kv verify`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { openai, anthropic, out, dsmlBlock, metrics, startServer, MODEL } from './helpers.mjs';

const KNOBS = ['--ctx', '4096', '--test-mode', '--kv-cache-min-tokens', '32',
  '--kv-cache-boundary-align-tokens', '32', '--kv-cache-boundary-trim-tokens', '8',
  '--kv-cache-continued-interval-tokens', '64'];
const KV_TOOL = process.env.DS4_KV_TOOL || '../../ds4-kv';
const SYNTH = process.env.DS4_SYNTH || '../../ds4-synth';
const VOCAB = process.env.DS4_VOCAB || '../../../shared/vocab/mini-vocab.gguf';
const BOS = '<｜begin▁of▁sentence｜>';

const dirs = [];
function tmpdir() {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'ds4-kv-test-'));
  dirs.push(d);
  return d;
}
process.on('exit', () => { for (const d of dirs) fs.rmSync(d, { recursive: true, force: true }); });

const kvServer = (dir, extra = [], env = {}) => startServer(['--kv-disk-dir', dir, ...KNOBS, ...extra], env);

// A clean exit is part of every test: status 0 and no sanitizer report
// (t_server_kv.sh can run an ASan build through DS4_SERVER_BIN).
async function stop(srv, signal = 'SIGTERM') {
  if (srv.proc.exitCode === null) srv.proc.kill(signal);
  const { code } = await srv.exited;
  assert.equal(code, 0, `server exit status\n${srv.log}`);
  assert.doesNotMatch(srv.log, /AddressSanitizer|LeakSanitizer|runtime error:/);
}

// Deterministic filler text: ~2.5 tokens a word with the tiny model's vocabulary.
const WORDS = ('river stone garden window silver morning quiet market bridge letter harbor ' +
  'mountain pencil orange thunder candle meadow violin lantern compass').split(' ');
function text(seed, words) {
  let x = seed * 2654435761 % 4294967296 || 1;
  const w = [];
  for (let i = 0; i < words; i++) {
    x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0;
    w.push(WORDS[x % WORDS.length]);
  }
  return w.join(' ');
}

function kvFiles(dir) {
  return fs.readdirSync(dir).filter((f) => f.endsWith('.ds4kv')).map((f) => path.join(dir, f));
}
const dirBytes = (dir) => kvFiles(dir).reduce((a, f) => a + fs.statSync(f).size, 0);
// The rendered text a cache file stands for (docs/kvcache.md, file format: u64
// text length at offset 48, the text at 128).
function fileText(f) {
  const b = fs.readFileSync(f);
  const n = Number(b.readBigUInt64LE(48));
  return b.subarray(128, 128 + n).toString('utf8');
}
const delta = (a, b, k) => (b[k] ?? 0) - (a[k] ?? 0);
const saves = (m, reason) => m[`ds4_kv_disk_saves_total{reason="${reason}"}`] ?? 0;
const DISK = 'ds4_prompt_tokens_cached_by_source_total{source="disk"}';
const LIVE = 'ds4_prompt_tokens_cached_by_source_total{source="live"}';

// One request per API family at temperature 0 (real sampling, not the test
// output): the answer text (reasoning included) and the cached tokens.
const FAMILIES = {
  async chat(url, p) {
    const r = await openai({ baseURL: `${url}/v1` }).chat.completions.create({ model: 'ds4', temperature: 0,
      max_tokens: 8, messages: [{ role: 'user', content: p }] });
    const m = r.choices[0].message;
    return { text: `${m.reasoning_content ?? ''}|${m.content ?? ''}`, cached: r.usage.prompt_tokens_details.cached_tokens,
      prompt: r.usage.prompt_tokens };
  },
  async completions(url, p) {
    const r = await openai({ baseURL: `${url}/v1` }).completions.create({ model: 'ds4', temperature: 0,
      max_tokens: 8, prompt: p });
    return { text: r.choices[0].text, cached: r.usage.prompt_tokens_details.cached_tokens, prompt: r.usage.prompt_tokens };
  },
  async responses(url, p) {
    const r = await openai({ baseURL: `${url}/v1` }).responses.create({ model: 'ds4', temperature: 0,
      max_output_tokens: 8, input: p });
    const t = r.output.map((i) => (i.content || []).map((c) => c.text).join('')).join('|');
    return { text: t, cached: r.usage.input_tokens_details.cached_tokens, prompt: r.usage.input_tokens };
  },
  async anthropic(url, p) {
    const r = await anthropic({ baseURL: url }).messages.create({ model: 'ds4', temperature: 0,
      max_tokens: 8, messages: [{ role: 'user', content: p }] });
    const t = r.content.map((b) => b.thinking ?? b.text ?? '').join('|');
    return { text: t, cached: r.usage.cache_read_input_tokens,
      prompt: r.usage.input_tokens + r.usage.cache_read_input_tokens };
  },
};
const ask = (url, p) => FAMILIES.completions(url, p);

test('restart: cold and shutdown saves are restored by a new server, for every API family, with the same answers', async () => {
  const dir = tmpdir();
  const prompts = Object.fromEntries(Object.keys(FAMILIES).map((f, i) => [f, text(101 + i, 120)]));
  const a = await kvServer(dir);
  const ref = {};
  try {
    for (const [f, fn] of Object.entries(FAMILIES)) {
      ref[f] = await fn(a.url, prompts[f]);
      assert.equal(ref[f].cached, 0, `${f}: a fresh directory has nothing`);
      assert.ok(ref[f].prompt > 250, `${f}: a long prompt (${ref[f].prompt} tokens)`);
    }
    const m = await metrics(a.url);
    assert.equal(saves(m, 'cold'), 4, 'one cold checkpoint per prompt');
    assert.equal(saves(m, 'evict'), 3, 'each new conversation saved the previous one first');
    assert.ok(saves(m, 'continued') >= 12, 'continued checkpoints every 64 tokens');
    assert.equal(m.ds4_kv_disk_hits_total, 0);
    assert.equal(m.ds4_kv_disk_files, kvFiles(dir).length);
  } finally {
    await stop(a);
  }
  assert.match(a.log, /disk KV cache: saved \d+ tokens \(shutdown/);

  const b = await kvServer(dir);
  try {
    let cached = 0;
    for (const [f, fn] of Object.entries(FAMILIES)) {
      const r = await fn(b.url, prompts[f]);
      // the longest checkpoint inside the prompt: its cold point (the
      // prompt minus 8 tokens, aligned down to 32) or a later frontier
      assert.ok(r.cached >= r.prompt - 40 && r.cached <= r.prompt, `${f}: cached ${r.cached} of ${r.prompt}`);
      assert.equal(r.text, ref[f].text, `${f}: the answer of an uncached server`);
      assert.equal(r.prompt, ref[f].prompt);
      cached += r.cached;
    }
    // streaming: Anthropic announces the cached tokens in message_start,
    // before the prefill (the chat prompt renders the same text)
    const st = await anthropic({ baseURL: b.url }).messages.create({ model: 'ds4', temperature: 0, max_tokens: 4,
      stream: true, messages: [{ role: 'user', content: prompts.chat }] });
    let start = null, end = null;
    for await (const ev of st) {
      if (ev.type === 'message_start') start = ev.message.usage;
      if (ev.type === 'message_delta') end = ev.usage;
    }
    assert.ok(start.cache_read_input_tokens > 0);
    assert.equal(end.cache_read_input_tokens, start.cache_read_input_tokens);
    cached += start.cache_read_input_tokens;
    const m = await metrics(b.url);
    assert.equal(m.ds4_kv_disk_hits_total, 5);
    assert.equal(m[DISK], cached, 'cached tokens counted by source');
    assert.equal(m[LIVE], 0);
    assert.equal(m.ds4_prompt_tokens_cached_total, cached);
    assert.match(b.log, /disk KV cache: restored \d+ tokens/);
  } finally {
    await stop(b);
  }
});

test('SIGTERM in the middle of a long prefill: the partial state is saved and resumed by the next server', async () => {
  const dir = tmpdir();
  // ~3600 tokens: about two seconds of prefill in the optimized build; ~1300
  // under ASan/UBSan, where a chunk of 64 still takes long enough to be
  // caught in the middle (and three prefills of 3600 took two minutes)
  const p = text(151, process.env.DS4_DEBUG_BUILD === '1' ? 500 : 1400);
  const plain = await startServer(['--ctx', '4096']);
  let ref;
  try { ref = await ask(plain.url, p); } finally { await stop(plain); }
  // no cold or continued checkpoints: only the shutdown save can hold it
  const knobs = ['--chunk', '64', '--kv-cache-continued-interval-tokens', '0', '--kv-cache-cold-max-tokens', '0'];
  const a = await kvServer(dir, knobs);
  const pending = ask(a.url, p).then(() => null, (e) => e);
  for (let i = 0; i < 200 && !(await metrics(a.url)).ds4_worker_busy; i++) await new Promise((r) => setTimeout(r, 10));
  await new Promise((r) => setTimeout(r, 150));
  await stop(a);
  assert.ok(await pending, 'the interrupted request got an error');
  const saved = Number((a.log.match(/saved (\d+) tokens \(shutdown\)/) || [])[1]);
  assert.ok(saved > 32 && saved < ref.prompt, `a partial prefill was saved (${saved} of ${ref.prompt})`);
  const b = await kvServer(dir, knobs);
  try {
    const r = await ask(b.url, p);
    assert.equal(r.cached, saved);
    assert.equal(r.text, ref.text, 'the answer of an uncached server');
  } finally {
    await stop(b);
  }
});

test('a client switch: conversation A, unrelated B (A is evicted to disk), A continued hits the disk', async () => {
  const dir = tmpdir();
  const s = await kvServer(dir);
  try {
    const c = openai({ baseURL: `${s.url}/v1` });
    const A = [{ role: 'system', content: text(201, 100) }, { role: 'user', content: 'question A' }];
    const a1 = await c.chat.completions.create({ model: 'deepseek-chat', messages: A }, { headers: out('Answer A is here.') });
    const m0 = await metrics(s.url);
    await c.chat.completions.create({ model: 'deepseek-chat', messages: [{ role: 'user', content: text(202, 100) }] },
      { headers: out('B.') });
    const m1 = await metrics(s.url);
    assert.equal(delta(m0, m1, 'ds4_kv_disk_saves_total{reason="evict"}'), 1, 'A saved before B replaced it');
    const a2 = await c.chat.completions.create({ model: 'deepseek-chat', messages: [...A,
      { role: 'assistant', content: 'Answer A is here.' }, { role: 'user', content: 'and then?' }] }, { headers: out('ok') });
    const m2 = await metrics(s.url);
    // all of A's first turn: it ended with EOS, so every answer token was evaluated
    const want = a1.usage.prompt_tokens + a1.usage.completion_tokens;
    assert.equal(a2.usage.prompt_tokens_details.cached_tokens, want);
    assert.equal(delta(m1, m2, 'ds4_kv_disk_hits_total'), 1);
    assert.equal(delta(m1, m2, DISK), want);
    assert.equal(delta(m1, m2, 'ds4_prompt_tokens_evaluated_total'), a2.usage.prompt_tokens - want);
    assert.equal(delta(m1, m2, 'ds4_kv_disk_saves_total{reason="evict"}'), 1, 'and B was saved in turn');
    assert.equal(a2.choices[0].message.content, 'ok');
  } finally {
    await stop(s);
  }
});

test('a longer conversation resent with a different BPE split of the earlier answer still hits the disk', async () => {
  const dir = tmpdir();
  const s = await kvServer(dir);
  try {
    const c = openai({ baseURL: `${s.url}/v1` });
    const A = [{ role: 'system', content: text(301, 100) }, { role: 'user', content: 'Tell me about cats' }];
    // \x01 forces token boundaries: "cats" comes out as c|a|t|s, which a
    // tokenization of the next prompt does not choose
    const a1 = await c.chat.completions.create({ model: 'deepseek-chat', messages: A },
      { headers: out('c\x01a\x01t\x01s are\x01 nice an\x01im\x01als') });
    assert.equal(a1.choices[0].message.content, 'cats are nice animals');
    await c.chat.completions.create({ model: 'deepseek-chat', messages: [{ role: 'user', content: text(302, 100) }] },
      { headers: out('B.') });
    const m0 = await metrics(s.url);
    const a2 = await c.chat.completions.create({ model: 'deepseek-chat', messages: [...A,
      { role: 'assistant', content: 'cats are nice animals' }, { role: 'user', content: 'more' }] }, { headers: out('ok') });
    const m1 = await metrics(s.url);
    const want = a1.usage.prompt_tokens + a1.usage.completion_tokens;
    assert.equal(a2.usage.prompt_tokens_details.cached_tokens, want);
    assert.equal(delta(m0, m1, 'ds4_kv_disk_hits_total'), 1);
    assert.equal(delta(m0, m1, 'ds4_kv_disk_retokenized_total'), 1, 'the split really differed');
    assert.equal(delta(m0, m1, 'ds4_prompt_tokens_evaluated_total'), a2.usage.prompt_tokens - want);
  } finally {
    await stop(s);
  }
});

test('a saved state that spells a marker as plain text is never continued (the answer of an uncached server)', async () => {
  // The model "writes" the EOS marker as two plain-text pieces; when the
  // client sends the answer back, the prompt's own tokens hold the real
  // marker there.  The saved state matches the prompt byte for byte, but
  // the model would continue another history: it must not be used, and
  // the live session (a shorter prefix) must not be given up for it.
  const U = [{ role: 'user', content: `marker ${text(351, 60)}` }];
  const final = { model: 'deepseek-chat', temperature: 0, max_tokens: 8,
    messages: [...U, { role: 'assistant', content: 'Hi <｜end▁of▁sentence｜>' }, { role: 'user', content: 'again' }] };
  const plain = await startServer(['--ctx', '4096']);
  let ref;
  try {
    ref = (await openai({ baseURL: `${plain.url}/v1` }).chat.completions.create(final)).choices[0].message.content;
  } finally {
    await stop(plain);
  }
  const s = await kvServer(tmpdir());
  try {
    const c = openai({ baseURL: `${s.url}/v1` });
    const a = await c.chat.completions.create({ model: 'deepseek-chat', messages: U },
      { headers: out('Hi <｜end▁of▁sentence\x01｜>') });
    assert.equal(a.choices[0].message.content, 'Hi <｜end▁of▁sentence｜>');
    // another conversation evicts that state to disk
    await c.chat.completions.create({ model: 'deepseek-chat', messages: [{ role: 'user', content: text(352, 60) }] },
      { headers: out('B.') });
    // the live session becomes U's prompt alone (the one answer token is never evaluated)
    const live = await c.chat.completions.create({ model: 'deepseek-chat', messages: U, max_tokens: 1 },
      { headers: out('Hi') });
    const m0 = await metrics(s.url);
    const r = await c.chat.completions.create(final);
    const m1 = await metrics(s.url);
    assert.equal(r.choices[0].message.content, ref, 'the answer of an uncached server');
    // the vetoed disk state is skipped before the session is touched, so
    // the live prefix (U's prompt) is still reused
    assert.equal(r.usage.prompt_tokens_details.cached_tokens, live.usage.prompt_tokens);
    assert.equal(delta(m0, m1, DISK), 0);
    assert.match(s.log, /cannot continue it \(a marker cut or spelled as text\); skipped/);
  } finally {
    await stop(s);
  }
});

test('tool-call ids after a restart: the exact DSML (and reasoning) come from the cache files', async () => {
  const dir = tmpdir();
  const tools = [{ type: 'function', function: { name: 'run_shell', description: 'Run a command',
    parameters: { type: 'object', properties: { cmd: { type: 'string' }, env: { type: 'object' } }, required: ['cmd'] } } }];
  // compact JSON the canonical renderer would space out: only the exact
  // bytes keep the saved state a prefix of the next prompt
  const CALL = 'Listing.</think>' + dsmlBlock([{ name: 'run_shell', params: [['cmd', 'ls -la', true], ['env', '{"LANG":"C"}', false]] },
    { name: 'run_shell', params: [['cmd', 'pwd', true]] }]);
  const msgs = [{ role: 'system', content: `You run commands. ${text(401, 30)}` }, { role: 'user', content: 'list files' }];
  const a = await kvServer(dir);
  let t1;
  try {
    t1 = await openai({ baseURL: `${a.url}/v1` }).chat.completions.create({ model: 'ds4', messages: msgs, tools },
      { headers: out(CALL) });
  } finally {
    await stop(a, 'SIGINT');
  }
  // both ids and the reasoning before the block are stored with the state
  assert.match(a.log, /saved \d+ tokens \(shutdown, 4 tool entries\)/);
  const calls = t1.choices[0].message.tool_calls;
  assert.equal(calls.length, 2);

  const b = await kvServer(dir);
  try {
    const c = openai({ baseURL: `${b.url}/v1` });
    const m0 = await metrics(b.url);
    // the client drops reasoning_content, as most do
    const r = await c.chat.completions.create({ model: 'ds4', tools, messages: [...msgs,
      { role: 'assistant', content: null, tool_calls: calls },
      { role: 'tool', tool_call_id: calls[0].id, content: 'a.txt b.txt' },
      { role: 'tool', tool_call_id: calls[1].id, content: '/home' }] },
    { headers: out('Two files.</think>There are two files.') });
    const m1 = await metrics(b.url);
    assert.equal(delta(m0, m1, 'ds4_tool_replay_exact_total'), 1);
    assert.equal(delta(m0, m1, 'ds4_tool_replay_canonical_total'), 0);
    // everything of turn 1 but its last token (never evaluated)
    assert.equal(r.usage.prompt_tokens_details.cached_tokens, t1.usage.prompt_tokens + t1.usage.completion_tokens - 1);
    assert.equal(delta(m0, m1, 'ds4_kv_disk_hits_total'), 1);
    assert.equal(r.choices[0].message.content, 'There are two files.');
    assert.match(b.log, /exact DSML of 1 tool-call turn found in the cache files/);
    // the same id with changed arguments never gets the stale bytes
    const changed = calls.map((x, i) => (i ? x : { ...x, function: { ...x.function, arguments: '{"cmd": "rm -rf /"}' } }));
    const m2 = await metrics(b.url);
    await c.chat.completions.create({ model: 'ds4', tools, messages: [...msgs,
      { role: 'assistant', content: null, tool_calls: changed },
      { role: 'tool', tool_call_id: changed[0].id, content: 'x' },
      { role: 'tool', tool_call_id: changed[1].id, content: 'y' }] }, { headers: out('ok') });
    const m3 = await metrics(b.url);
    assert.equal(delta(m2, m3, 'ds4_tool_replay_canonical_total'), 1);
    assert.equal(delta(m2, m3, 'ds4_tool_replay_exact_total'), 0);
  } finally {
    await stop(b);
  }
});

test('damaged files (truncated, a flipped byte) are ignored with a warning and never restored', async () => {
  const dir = tmpdir();
  const p1 = `MARK1 ${text(501, 120)}`, p2 = `MARK2 ${text(502, 120)}`;
  const a = await kvServer(dir);
  let ref1, ref2;
  try {
    ref1 = await ask(a.url, p1);
    ref2 = await ask(a.url, p2);
  } finally {
    await stop(a);
  }
  // the files a resend of p1 could restore: their text is a prefix of its
  // rendered prompt (completions: BOS + the prompt as is)
  const cands = kvFiles(dir).filter((f) => (BOS + p1).startsWith(fileText(f)));
  assert.ok(cands.length >= 4, `checkpoints of p1: ${cands.length}`);
  cands.forEach((f, i) => {
    if (i % 2 === 0) {
      fs.truncateSync(f, Math.floor(fs.statSync(f).size / 2));
    } else {
      const b = fs.readFileSync(f);
      const at = 128 + Number(b.readBigUInt64LE(48)) + 1000;   // inside the session snapshot
      b[at] ^= 0x20;
      fs.writeFileSync(f, b);
    }
  });
  const b = await kvServer(dir);
  try {
    const r1 = await ask(b.url, p1);
    assert.equal(r1.cached, 0, 'no damaged state is restored');
    assert.equal(r1.text, ref1.text);
    const m = await metrics(b.url);
    assert.equal(m.ds4_kv_disk_rejected_total, cands.length);
    const warned = b.log.split('\n').filter((l) => /kv cache .*\.ds4kv: .*moved aside/.test(l));
    assert.equal(warned.length, cands.length, 'one warning line per damaged file');
    assert.ok(warned.some((l) => /truncated|does not match its header/.test(l)));
    assert.ok(warned.some((l) => /checksum mismatch/.test(l)));
    // moved aside (*.ds4kv.bad, deleted by the next save's eviction pass);
    // the names hold good checkpoints again, saved by this evaluation
    const v = spawnSync(KV_TOOL, ['verify', dir, '-m', MODEL], { encoding: 'utf8' });
    assert.equal(v.status, 0, `ds4-kv verify:\n${v.stdout}${v.stderr}`);
    // the intact files still serve
    const r2 = await ask(b.url, p2);
    assert.ok(r2.cached > 0);
    assert.equal(r2.text, ref2.text);
  } finally {
    await stop(b);
  }
});

test('the space cap holds under many sessions', async () => {
  const dir = tmpdir();
  const cap = 3 << 20;
  const s = await kvServer(dir, ['--kv-disk-space-mb', '3', '--kv-cache-continued-interval-tokens', '0']);
  try {
    const first = text(601, 120);
    let firstAnswer;
    for (let i = 0; i < 8; i++) {
      const r = await ask(s.url, text(601 + i, 120));
      if (i === 0) firstAnswer = r;
      const used = dirBytes(dir);
      assert.ok(used <= cap, `after session ${i}: ${used} bytes > ${cap}`);
    }
    const m = await metrics(s.url);
    assert.ok(m.ds4_kv_disk_evictions_total > 0, 'files were evicted');
    assert.ok(saves(m, 'cold') + saves(m, 'evict') >= 15);
    assert.equal(m.ds4_kv_disk_bytes, dirBytes(dir));
    assert.ok(m.ds4_kv_disk_files >= 1);
    // still correct after all those evictions
    const again = await ask(s.url, first);
    assert.equal(again.text, firstAnswer.text);
  } finally {
    await stop(s);
  }
});

test('DS4_KV_FAULT=write: every save fails, logged once, and the answers are unchanged', async () => {
  const dir = tmpdir();
  const p1 = text(801, 120), p2 = text(802, 120);
  const plain = await startServer(['--ctx', '4096']);
  let ref1, ref2;
  try {
    ref1 = await ask(plain.url, p1);
    ref2 = await ask(plain.url, p2);
  } finally {
    await stop(plain);
  }
  const s = await kvServer(dir, [], { DS4_KV_FAULT: 'write' });
  try {
    const r = [await ask(s.url, p1), await ask(s.url, p2), await ask(s.url, p1)];
    assert.deepEqual(r.map((x) => x.text), [ref1.text, ref2.text, ref1.text]);
    assert.deepEqual(r.map((x) => x.cached), [0, 0, 0]);
    const m = await metrics(s.url);
    assert.ok(m.ds4_kv_disk_write_errors_total >= 6, `write errors: ${m.ds4_kv_disk_write_errors_total}`);
    for (const reason of ['cold', 'continued', 'evict']) assert.equal(saves(m, reason), 0);
    assert.equal(fs.readdirSync(dir).filter((f) => f !== '.lock').length, 0, 'no file, no temp file left');
  } finally {
    await stop(s);
  }
  const lines = s.log.split('\n').filter((l) => /cannot save/.test(l));
  assert.equal(lines.length, 1, `logged once:\n${lines.join('\n')}`);
});

test('two servers sharing one directory: same answers, and ds4-kv verify passes afterwards', async () => {
  const dir = tmpdir();
  const P = [0, 1, 2, 3].map((i) => text(901 + i, 110));
  const x = await kvServer(dir);
  const y = await kvServer(dir);
  const answers = P.map(() => new Set());
  try {
    // both write checkpoints of the same prompts at the same time
    const run = async (srv, order) => {
      for (const i of order) answers[i].add((await ask(srv.url, P[i])).text);
    };
    await Promise.all([run(x, [0, 1, 2, 3, 0, 2]), run(y, [0, 2, 1, 3, 1, 0])]);
  } finally {
    await Promise.all([stop(x), stop(y)]);
  }
  const v = spawnSync(KV_TOOL, ['verify', dir, '-m', MODEL], { encoding: 'utf8' });
  assert.equal(v.status, 0, `ds4-kv verify:\n${v.stdout}${v.stderr}`);
  assert.ok(!fs.readdirSync(dir).some((f) => f.startsWith('.tmp-')), 'no temp file left');
  const z = await kvServer(dir);
  try {
    for (let i = 0; i < P.length; i++) {
      const r = await ask(z.url, P[i]);
      assert.ok(r.cached > 0);
      answers[i].add(r.text);
      assert.equal(answers[i].size, 1, `prompt ${i}: one answer whatever served it`);
    }
  } finally {
    await stop(z);
  }
});

test('another quantization of the same model: ignored with a warning, reused with --kv-cache-allow-quant-variants',
  { skip: !(fs.existsSync(SYNTH) && fs.existsSync(VOCAB)) && 'ds4-synth or the vocabulary is missing' }, async () => {
    const dir = tmpdir(), models = tmpdir();
    // the same random checkpoint (seed 1) with 2-bit and 4-bit routed experts
    for (const q of ['q2', 'q4']) {
      const r = spawnSync(SYNTH, ['--preset', 'tiny', '--recipe', q, '--vocab', VOCAB, '-o', path.join(models, `${q}.gguf`)],
        { encoding: 'utf8' });
      assert.equal(r.status, 0, r.stderr);
    }
    const p = text(1001, 120);
    const a = await kvServer(dir, ['-m', path.join(models, 'q2.gguf')]);
    try { await ask(a.url, p); } finally { await stop(a); }
    const b = await kvServer(dir, ['-m', path.join(models, 'q4.gguf')]);
    try {
      assert.equal((await ask(b.url, p)).cached, 0);
    } finally { await stop(b); }
    assert.match(b.log, /saved by another model or quantization; ignored/);
    const c = await kvServer(dir, ['-m', path.join(models, 'q4.gguf'), '--kv-cache-allow-quant-variants']);
    try {
      const r = await ask(c.url, p);
      assert.ok(r.cached > 0);
      assert.equal((await metrics(c.url)).ds4_kv_disk_hits_total, 1);
    } finally { await stop(c); }
  });
