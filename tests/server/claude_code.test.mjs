// Claude Code against ds4-server: its real requests (recorded from
// `claude -p` 2.1.197, tests/server/fixtures/claude-code-*.json) replayed
// as sent -- the HEAD / probe, POST /v1/messages?beta=true with a system
// message inside `messages`, adaptive thinking, context_management,
// output_config, cache_control everywhere -- and where a system message
// inside `messages` lands in the prompt (just before the user turn it
// follows: PROMPT_FORMAT.md 3 has no marker for system text, so only a
// turn boundary can hold it).
//
// With DS4_CLAUDE_BIN naming a `claude` binary (npm @anthropic-ai/claude-code;
// not a dependency of these tests: its native binary is ~245 MB), one more
// test runs `claude -p` end to end against a server on the tiny model.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, mkdtempSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { out, sse, startServer, sleep } from './helpers.mjs';

const fixture = (name) => JSON.parse(readFileSync(fileURLToPath(new URL(`fixtures/${name}`, import.meta.url)), 'utf8'));
const hello = fixture('claude-code-hello.json');
const toolResult = fixture('claude-code-tool-result.json');
const USER = '<｜User｜>';
const ASSISTANT = '<｜Assistant｜>';
const EOS = '<｜end▁of▁sentence｜>';

// The sanitizer build prefills the recorded ~30000-token prompt ~10x
// slower (minutes): there the generation request cuts every string of the
// body past 300 characters (every field and block is kept); count_tokens
// still takes the whole body.
const SLOW = process.env.DS4_DEBUG_BUILD === '1';
function cut(v) {
  if (typeof v === 'string') return v.length > 300 ? v.slice(0, 300) : v;
  if (Array.isArray(v)) return v.map(cut);
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, cut(x)]));
  return v;
}

async function replay(url, r, extra = {}, body = r.body) {
  return fetch(url + r.url, { method: r.method, headers: { ...r.headers, ...extra }, body: body ? JSON.stringify(body) : undefined });
}

let srv, tracePath, dir;
test.before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'ds4-claude-'));
  tracePath = join(dir, 'trace.jsonl');
  // Claude Code asks for max_tokens 64000: the context must hold that and
  // the ~30000-token prompt
  srv = await startServer(['--ctx', '131072', '--test-mode', '--trace', tracePath]);
});
test.after(async () => {
  await srv?.stop();
  rmSync(dir, { recursive: true, force: true });
});

function lastPrompt() {
  const lines = readFileSync(tracePath, 'utf8').trim().split('\n');
  return JSON.parse(lines.at(-1)).prompt;
}

test('claude -p hello, replayed: HEAD / then a streamed Anthropic answer', async () => {
  const [probe, first] = hello.requests;
  assert.equal(probe.method, 'HEAD');
  const h = await replay(srv.url, probe);
  assert.equal(h.status, 200);
  assert.match(h.headers.get('content-type'), /^text\/html/);
  assert.equal(await h.text(), '');
  assert.equal(first.body.messages[1].role, 'system', 'the recorded request has a system message inside messages');
  const r = await replay(srv.url, first, out('Planning.</think>Hello!'), SLOW ? cut(first.body) : first.body);
  assert.equal(r.status, 200, await r.clone().text());
  assert.match(r.headers.get('content-type'), /^text\/event-stream/);
  const ev = await sse(r);
  const types = ev.map((e) => e.event);
  assert.equal(types[0], 'message_start');
  assert.equal(types.at(-1), 'message_stop');
  const start = ev[0].data.message;
  assert.equal(start.model, first.body.model);
  assert.ok(start.usage.input_tokens > (SLOW ? 1000 : 20000), `prompt tokens ${start.usage.input_tokens}`);
  const text = ev.filter((e) => e.data?.delta?.type === 'text_delta').map((e) => e.data.delta.text).join('');
  const thinking = ev.filter((e) => e.data?.delta?.type === 'thinking_delta').map((e) => e.data.delta.thinking).join('');
  assert.equal(text, 'Hello!');
  assert.equal(thinking, 'Planning.');
  const delta = ev.find((e) => e.event === 'message_delta');
  assert.equal(delta.data.delta.stop_reason, 'end_turn');
  // the system message sits right before the user turn it followed
  const p = lastPrompt();
  const sys = first.body.messages[1].content.slice(0, 40);
  const at = p.indexOf(sys);
  assert.ok(at > 0, 'the system message is in the prompt');
  assert.equal(p.indexOf(USER), p.indexOf(USER, at), 'no user turn before it');
  assert.ok(p.endsWith(`hello${ASSISTANT}<think>`), JSON.stringify(p.slice(-80)));
});

test('the recorded requests are accepted whole by count_tokens (the first turn and a tool-result turn)', async () => {
  for (const r of [hello.requests[1], toolResult.requests[0]]) {
    const res = await fetch(`${srv.url}/v1/messages/count_tokens?beta=true`, {
      method: 'POST', headers: { ...r.headers }, body: JSON.stringify({ ...r.body, stream: undefined, max_tokens: undefined }) });
    const j = await res.json();
    assert.equal(res.status, 200, JSON.stringify(j));
    assert.ok(j.input_tokens > 20000, `${j.input_tokens}`);
  }
});

async function messages(body, text = 'ok') {
  const r = await fetch(`${srv.url}/v1/messages`, {
    method: 'POST', headers: { 'content-type': 'application/json', ...out(text) },
    body: JSON.stringify({ model: 'x', max_tokens: 16, thinking: { type: 'disabled' }, ...body }) });
  return { status: r.status, json: await r.json() };
}

test('a system message inside messages: rendered before the user turn it follows', async () => {
  // after the first user turn: joined to the top-level system text
  let r = await messages({ system: 'TOP', messages: [{ role: 'user', content: 'q1' }, { role: 'system', content: 'MID' }] });
  assert.equal(r.status, 200, JSON.stringify(r.json));
  assert.equal(r.json.content[0].text, 'ok');
  let p = lastPrompt();
  assert.ok(p.endsWith(`TOP\n\nMID${USER}q1${ASSISTANT}</think>`), JSON.stringify(p));
  // without a top-level system: the system text opens the prompt
  r = await messages({ messages: [{ role: 'user', content: 'q1' }, { role: 'system', content: [{ type: 'text', text: 'A' }, { type: 'text', text: 'B' }] }] });
  assert.equal(r.status, 200, JSON.stringify(r.json));
  p = lastPrompt();
  assert.ok(p.endsWith(`A\n\nB${USER}q1${ASSISTANT}</think>`), JSON.stringify(p));
  // later: after the previous assistant turn, before the user turn (its
  // tool results included); the earlier prompt is unchanged, and the
  // assistant turn that follows it is a prefill as usual
  r = await messages({ system: 'TOP', messages: [
    { role: 'user', content: 'q1' },
    { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'Read', input: { file_path: 'a' } }] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'data' }, { type: 'text', text: 'q2' }] },
    { role: 'system', content: 'MID2' },
    { role: 'assistant', content: 'Sure' }],
  tools: [{ name: 'Read', input_schema: { type: 'object', properties: { file_path: { type: 'string' } } } }] });
  assert.equal(r.status, 200, JSON.stringify(r.json));
  p = lastPrompt();
  const mid = p.indexOf('MID2');
  assert.ok(p.slice(0, mid).endsWith(EOS), JSON.stringify(p.slice(mid - 60, mid + 60)));
  assert.ok(p.slice(mid).startsWith(`MID2${USER}<tool_result>data</tool_result>`), JSON.stringify(p.slice(mid, mid + 80)));
  assert.ok(p.endsWith('Sure'), JSON.stringify(p.slice(-40)));
});

test('a system message inside messages must follow a user message (Anthropic\'s rule)', async () => {
  const cases = [
    [[{ role: 'system', content: 'S' }, { role: 'user', content: 'q' }], /first message/],
    [[{ role: 'user', content: 'q' }, { role: 'assistant', content: 'a' }, { role: 'system', content: 'S' }], /another role/],
    [[{ role: 'user', content: 'q' }, { role: 'system', content: 'S' }, { role: 'system', content: 'T' }], /another role/],
    [[{ role: 'user', content: 'q' }, { role: 'system' }], /content: field required/],
    [[{ role: 'user', content: 'q' }, { role: 'system', content: [{ type: 'hologram' }] }], /hologram/],
    [[{ role: 'user', content: 'q' }, { role: 'wizard', content: 'x' }], /unexpected role 'wizard'/],
  ];
  for (const [msgs, why] of cases) {
    const r = await messages({ messages: msgs });
    assert.equal(r.status, 400, JSON.stringify(msgs));
    assert.equal(r.json.type, 'error');
    assert.equal(r.json.error.type, 'invalid_request_error');
    assert.match(r.json.error.message, why);
  }
});

const CLAUDE = process.env.DS4_CLAUDE_BIN;
test('claude -p end to end (DS4_CLAUDE_BIN)', { skip: !CLAUDE ? 'set DS4_CLAUDE_BIN to a claude binary to run it' : (!existsSync(CLAUDE) && `${CLAUDE} not found`) }, async () => {
  const home = mkdtempSync(join(tmpdir(), 'ds4-claude-home-'));
  const logFrom = srv.log.length;
  try {
    // (spawn, not spawnSync: the server's log must keep flowing meanwhile)
    const p = spawn(CLAUDE, ['-p', 'hello'], {
      cwd: home, stdio: ['ignore', 'pipe', 'pipe'],
      env: {
        PATH: process.env.PATH, HOME: home, ANTHROPIC_BASE_URL: srv.url, ANTHROPIC_API_KEY: 'unused',
        ANTHROPIC_MODEL: 'ds4', ANTHROPIC_SMALL_FAST_MODEL: 'ds4', CLAUDE_CODE_MAX_OUTPUT_TOKENS: '4096',
        // every request it sends carries the --test-mode answer
        ANTHROPIC_CUSTOM_HEADERS: `X-DS4-Test-Output: ${out('Greeting.</think>Hello from ds4.')['X-DS4-Test-Output']}`,
        DISABLE_TELEMETRY: '1', DISABLE_ERROR_REPORTING: '1', DISABLE_AUTOUPDATER: '1',
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
      },
    });
    let stdout = '', stderr = '';
    p.stdout.on('data', (d) => { stdout += d; });
    p.stderr.on('data', (d) => { stderr += d; });
    const timer = setTimeout(() => p.kill('SIGKILL'), 300000);
    const code = await new Promise((res) => p.on('close', res));
    clearTimeout(timer);
    await sleep(200);
    const log = srv.log.slice(logFrom);
    assert.equal(code, 0, `claude: ${stderr}\n${stdout}\n${log}`);
    assert.equal(stdout.trim(), 'Hello from ds4.');
    assert.match(log, /job \d+ messages: prompt \d+/, 'the request reached the model');
    assert.doesNotMatch(log, /refused/, log);
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
});
