// ds4-server --parallel N (tests/t_server_parallel.sh starts the server
// with --parallel 4 --step-tokens 32 --chunk 64): concurrent requests are
// stepped together, each with exactly the output it has alone; streams
// overlap; a long prefill does not stop the other streams; a client that
// leaves frees its session; more clients than sessions are all served;
// OpenAI, Anthropic and Responses requests share one batch; a request goes
// to the session holding its prefix.  Orderings are asserted with wide
// margins (forced outputs of hundreds of tokens), never with timings.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { BASE, openai, anthropic, out, dsmlBlock, metrics, sleep, runServer, startServer, MODEL } from './helpers.mjs';

const N = 4;
// answer lengths (tokens, about): shorter in the ASan/UBSan suite, where a
// token costs ~20x more; the orderings asserted keep their margins
const SAN = process.env.DS4_DEBUG_BUILD === '1';
const LEN = (n) => (SAN ? Math.ceil(n / 3) : n);

// A streaming chat request; resolves with its text and the arrival time
// (Date.now()) of every content chunk.
async function streamChat(content, headers = {}, extra = {}, signal) {
  const times = [];
  let text = '';
  const s = await openai().chat.completions.create(
    { model: 'deepseek-chat', messages: [{ role: 'user', content }], stream: true, ...extra },
    { headers, signal });
  for await (const ch of s) {
    const d = ch.choices[0]?.delta?.content;
    if (d) { text += d; times.push(Date.now()); }
  }
  return { text, times };
}

async function waitFor(fn, ms = 20000) {
  const t0 = Date.now();
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() - t0 > ms) return v;
    await sleep(50);
  }
}

test('--parallel: /metrics shows the sessions and the batches', async () => {
  const m = await metrics();
  assert.equal(m.ds4_sessions, N);
  for (const k of ['ds4_sessions_live', 'ds4_sessions_busy', 'ds4_batch_steps_total', 'ds4_batch_size_last',
                   'ds4_batch_size_mean', 'ds4_batch_size_bucket{le="1"}', 'ds4_batch_size_bucket{le="+Inf"}'])
    assert.ok(k in m, `${k} in /metrics`);
});

// Sampled (not forced) answers: what the model computes is compared.
const prompts = ['the first prompt', 'a second, longer prompt about something else entirely',
  'third', 'the fourth one, with its own words and a different length again'];

async function sampled(i, sp) {
  const c = await openai().chat.completions.create({
    model: 'deepseek-chat', messages: [{ role: 'user', content: prompts[i] }], max_tokens: 24, ...sp,
  });
  return c.choices[0].message.content + '|' + c.choices[0].finish_reason + '|' + c.usage.completion_tokens;
}

for (const [name, sp] of [['temperature 0', { temperature: 0 }],
                          ['fixed seeds', { temperature: 1, top_p: 0.95, seed: 1234 }]]) {
  test(`--parallel: four concurrent requests (${name}) give exactly their outputs one at a time`, async () => {
    const alone = [];
    for (let i = 0; i < 4; i++) alone.push(await sampled(i, sp));
    const m0 = await metrics();
    const together = await Promise.all([0, 1, 2, 3].map((i) => sampled(i, sp)));
    assert.deepEqual(together, alone);
    // and again, each prompt now landing on the session that holds its last turn
    const again = await Promise.all([3, 2, 1, 0].map((i) => sampled(i, sp)));
    assert.deepEqual(again.reverse(), alone);
    const m1 = await metrics();
    assert.ok(m1.ds4_batch_steps_total > m0.ds4_batch_steps_total);
  });
}

test('--parallel: four streams overlap in time, in steps of several sessions', async () => {
  const m0 = await metrics();
  const answers = [0, 1, 2, 3].map((i) => `s${i} ` + 'w '.repeat(LEN(300)));
  const rs = await Promise.all(answers.map((a, i) => streamChat(`overlap ${i}`, out(a))));
  rs.forEach((r, i) => assert.equal(r.text, answers[i]));
  // every stream's first chunk came before every other stream's last one
  for (const a of rs) for (const b of rs) if (a !== b) assert.ok(a.times[0] < b.times[b.times.length - 1]);
  const m1 = await metrics();
  const steps = m1.ds4_batch_steps_total - m0.ds4_batch_steps_total;
  const single = m1['ds4_batch_size_bucket{le="1"}'] - m0['ds4_batch_size_bucket{le="1"}'];
  assert.ok(steps - single >= LEN(300) / 3, `steps of several sessions: ${steps - single} of ${steps}`);
});

test('--parallel: a long prefill does not stop another session\'s stream', async () => {
  const longAnswer = 'y '.repeat(LEN(1500));
  let sent = 0, firstOfLong = 0;
  const s = streamChat('a stream', out(longAnswer));
  // wait until the stream is flowing
  const seen = [];
  const streamP = s.then((r) => r);
  await waitFor(async () => (await metrics()).ds4_sessions_busy >= 1);
  await sleep(100);
  // a prompt of ~3000 tokens: about 90 steps of 32-token chunks
  sent = Date.now();
  const long = await openai().chat.completions.create({
    model: 'deepseek-chat', stream: true,
    messages: [{ role: 'user', content: 'lorem ipsum dolor '.repeat(300) }],
  }, { headers: out('done') });
  let longText = '';
  for await (const ch of long) {
    const d = ch.choices[0]?.delta?.content;
    if (d) { if (!firstOfLong) firstOfLong = Date.now(); longText += d; }
  }
  const r = await streamP;
  seen.push(...r.times);
  assert.equal(longText, 'done');
  assert.equal(r.text, longAnswer);
  const during = seen.filter((t) => t > sent && t < firstOfLong).length;
  assert.ok(during >= 20, `stream tokens that arrived during the long prefill: ${during}`);
  // the stream was not over before the long prompt's answer came
  assert.ok(seen[seen.length - 1] > firstOfLong, 'the stream outlasted the prefill');
});

test('--parallel: a client that disconnects mid-stream frees its session', async () => {
  const m0 = await metrics();
  const ac = new AbortController();
  const keep = 'k '.repeat(LEN(400));
  const other = streamChat('stays', out(keep));
  let got = 0;
  const gone = (async () => {
    try {
      const s = await openai().chat.completions.create(
        { model: 'deepseek-chat', messages: [{ role: 'user', content: 'leaves' }], stream: true },
        { headers: out('z '.repeat(5000)), signal: ac.signal });
      for await (const ch of s) {
        if (ch.choices[0]?.delta?.content && ++got === 20) ac.abort();
      }
    } catch { /* aborted */ }
  })();
  await gone;
  assert.ok(got >= 20);
  const r = await other;
  assert.equal(r.text, keep);
  const key = 'ds4_cancelled_total{reason="client_disconnect"}';
  const m1 = await waitFor(async () => {
    const m = await metrics();
    return m[key] > m0[key] && m.ds4_sessions_busy === 0 ? m : null;
  });
  assert.ok(m1, 'the cancel was counted and every session is idle again');
  // the freed session serves again
  const c = await openai().chat.completions.create({ model: 'deepseek-chat', messages: [{ role: 'user', content: 'after' }] },
    { headers: out('served') });
  assert.equal(c.choices[0].message.content, 'served');
});

test('--parallel: more clients than sessions are all served', async () => {
  const n = 3 * N;
  const answers = [...Array(n).keys()].map((i) => `answer ${i} ` + 'q '.repeat(LEN(150)));
  const res = await Promise.all(answers.map((a, i) =>
    openai().chat.completions.create({ model: 'deepseek-chat', messages: [{ role: 'user', content: `client ${i}` }] },
      { headers: out(a) })));
  res.forEach((r, i) => assert.equal(r.choices[0].message.content, answers[i]));
  const m = await metrics();
  assert.ok(m.ds4_queue_depth_peak >= 1, 'some requests waited for a session');
  assert.equal(m.ds4_queue_depth, 0);
  assert.equal(m.ds4_sessions_live, N);
});

test('--parallel: OpenAI, Anthropic and Responses requests in one batch', async () => {
  const a1 = 'chat ' + 'c '.repeat(LEN(200)), a2 = 'messages ' + 'm '.repeat(LEN(200)),
    a3 = 'responses ' + 'r '.repeat(LEN(200));
  const chat = streamChat('mixed chat', out(a1));
  const msg = (async () => {
    const times = [];
    let text = '';
    const s = anthropic().messages.stream({ model: 'deepseek-chat', max_tokens: 1000,
      messages: [{ role: 'user', content: 'mixed messages' }] }, { headers: out(a2) });
    s.on('text', (d) => { text += d; times.push(Date.now()); });
    const fin = await s.finalMessage();
    return { text, times, stop: fin.stop_reason };
  })();
  const resp = (async () => {
    const times = [];
    let text = '';
    const s = await openai().responses.create({ model: 'deepseek-chat', input: 'mixed responses', stream: true },
      { headers: out(a3) });
    for await (const ev of s) {
      if (ev.type === 'response.output_text.delta') { text += ev.delta; times.push(Date.now()); }
    }
    return { text, times };
  })();
  const plain = openai().completions.create({ model: 'deepseek-chat', prompt: 'mixed completion', max_tokens: 50 },
    { headers: out('legacy ' + 'l '.repeat(40)) });
  // a tool call (DSML parsed per job) in the same batch
  const tool = { type: 'function', function: { name: 'get_weather', description: 'weather',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } };
  const call = openai().chat.completions.create({ model: 'deepseek-reasoner', tools: [tool],
    messages: [{ role: 'user', content: 'weather?' }] },
    { headers: out('Looking it up.</think>' + dsmlBlock([{ name: 'get_weather', params: [['city', 'Milano', true]] }])) });
  const [r1, r2, r3, r4, r5] = await Promise.all([chat, msg, resp, plain, call]);
  assert.equal(r5.choices[0].finish_reason, 'tool_calls');
  assert.equal(r5.choices[0].message.tool_calls[0].function.name, 'get_weather');
  assert.deepEqual(JSON.parse(r5.choices[0].message.tool_calls[0].function.arguments), { city: 'Milano' });
  assert.equal(r1.text, a1);
  assert.equal(r2.text, a2);
  assert.equal(r2.stop, 'end_turn');
  assert.equal(r3.text, a3);
  assert.equal(r4.choices[0].text, 'legacy ' + 'l '.repeat(40));
  const rs = [r1, r2, r3];
  for (const a of rs) for (const b of rs) if (a !== b) assert.ok(a.times[0] < b.times[b.times.length - 1]);
});

test('--parallel: a conversation\'s next turn lands on the session holding it', async () => {
  // N conversations, each a first turn then a second one, interleaved:
  // every second turn reuses its whole first prompt and answer
  const firsts = [...Array(N).keys()].map((i) => [{ role: 'user', content: `conversation ${i}: ` + 'text '.repeat(40 + 10 * i) }]);
  const answers = [...Array(N).keys()].map((i) => `first answer of ${i}`);
  const r1 = await Promise.all(firsts.map((m, i) => openai().chat.completions.create(
    { model: 'deepseek-chat', messages: m }, { headers: out(answers[i]) })));
  const seconds = firsts.map((m, i) => [...m, { role: 'assistant', content: answers[i] },
    { role: 'user', content: 'and then?' }]);
  const r2 = await Promise.all(seconds.map((m, i) => openai().chat.completions.create(
    { model: 'deepseek-chat', messages: m }, { headers: out(`second ${i}`) })));
  r2.forEach((r, i) => {
    const cached = r.usage.prompt_tokens_details?.cached_tokens || 0;
    assert.ok(cached >= r1[i].usage.prompt_tokens,
      `conversation ${i}: cached ${cached} of its first prompt's ${r1[i].usage.prompt_tokens}`);
  });
  // a new conversation when every session is taken evicts the least
  // recently used one; the others keep their state
  await openai().chat.completions.create({ model: 'deepseek-chat', messages: [{ role: 'user', content: 'new one' }] },
    { headers: out('new') });
  const m = await metrics();
  assert.equal(m.ds4_sessions_live, N);
});

test('--parallel: an unrelated request replaces the least recently used session, not the conversation it shares template tokens with', async () => {
  // a fresh pair of sessions is wanted: fill all N with other conversations first
  const A = [{ role: 'user', content: 'conversation alpha ' + 'lorem '.repeat(60) }];
  const fill = [...Array(N).keys()].map((i) => openai().chat.completions.create(
    { model: 'deepseek-chat', messages: [{ role: 'user', content: `filler ${i} ` + 'ipsum '.repeat(30) }] },
    { headers: out('f') }));
  await Promise.all(fill);
  const a1 = await openai().chat.completions.create({ model: 'deepseek-chat', messages: A }, { headers: out('alpha answer') });
  // B shares only the template's first tokens with A: it must take another session
  await openai().chat.completions.create({ model: 'deepseek-chat',
    messages: [{ role: 'user', content: 'conversation beta' }] }, { headers: out('beta') });
  const a2 = await openai().chat.completions.create({ model: 'deepseek-chat', messages: [...A,
    { role: 'assistant', content: 'alpha answer' }, { role: 'user', content: 'more' }] }, { headers: out('ok') });
  assert.ok(a2.usage.prompt_tokens_details.cached_tokens >= a1.usage.prompt_tokens,
    `A's state survived B: cached ${a2.usage.prompt_tokens_details.cached_tokens}`);
});

test('--parallel: with the disk KV cache, the least recently used session is saved before it is replaced', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds4-par-kv-'));
  const s = await startServer(['--parallel', '2', '--kv-disk-dir', dir, '--ctx', '4096', '--test-mode',
    '--kv-cache-min-tokens', '32', '--kv-cache-boundary-align-tokens', '32',
    '--kv-cache-boundary-trim-tokens', '8', '--step-tokens', '32', '--chunk', '64']);
  try {
    const c = openai({ baseURL: `${s.url}/v1` });
    const conv = (k) => [{ role: 'user', content: `conversation ${k}: ` + `${k} words `.repeat(40) }];
    const first = {};
    for (const k of ['a', 'b', 'c']) {
      first[k] = await c.chat.completions.create({ model: 'deepseek-chat', messages: conv(k) }, { headers: out(`answer ${k}`) });
    }
    let m = await metrics(s.url);
    // c found no empty session: a (the least recently used) was saved, then replaced
    assert.equal(m['ds4_kv_disk_saves_total{reason="evict"}'], 1);
    assert.equal(m.ds4_sessions_live, 2);
    // a comes back: restored from the disk into the least recently used session (b's, saved first)
    const a2 = await c.chat.completions.create({ model: 'deepseek-chat', messages: [...conv('a'),
      { role: 'assistant', content: 'answer a' }, { role: 'user', content: 'next' }] }, { headers: out('a again') });
    m = await metrics(s.url);
    assert.equal(m['ds4_kv_disk_saves_total{reason="evict"}'], 2);
    assert.equal(m.ds4_kv_disk_hits_total, 1);
    assert.ok(a2.usage.prompt_tokens_details.cached_tokens >= first.a.usage.prompt_tokens);
    // c is still live in its session
    const c2 = await c.chat.completions.create({ model: 'deepseek-chat', messages: [...conv('c'),
      { role: 'assistant', content: 'answer c' }, { role: 'user', content: 'next' }] }, { headers: out('c again') });
    assert.ok(c2.usage.prompt_tokens_details.cached_tokens >= first.c.usage.prompt_tokens);
    assert.equal((await metrics(s.url)).ds4_kv_disk_hits_total, 1, 'c came from RAM');
  } finally {
    s.proc.kill('SIGTERM');
    const { code } = await s.exited;
    assert.equal(code, 0, s.log);
    assert.doesNotMatch(s.log, /AddressSanitizer|LeakSanitizer|runtime error:/);
    // the shutdown kept both live conversations
    assert.match(s.log, /saved \d+ tokens \(shutdown/);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('--parallel: sessions that do not fit in memory are refused at start', async () => {
  const r = await runServer(['-m', MODEL, '--port', '0', '--ctx', '16777216', '--parallel', '256', '-t', '1']);
  assert.equal(r.code, 1, r.log);
  assert.match(r.log, /--parallel 256 needs .* GiB for its sessions .* lower --parallel or --ctx/);
});
