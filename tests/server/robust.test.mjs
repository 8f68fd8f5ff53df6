// Malformed requests (exact status and error shape), raw-socket garbage,
// the queue (16 concurrent clients answered in order), cancellation on
// disconnect (during decode and during prefill), auth, CORS, startup
// refusal on a non-loopback address, clean shutdown.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { openai, out, post, metrics, sse, BASE, startServer, runServer, MODEL, sleep } from './helpers.mjs';

const msgs = [{ role: 'user', content: 'hi' }];
const long = 'word '.repeat(5000);   // > 4096 tokens

// [name, path, body (object or raw string), extra headers, status, family, param]
const cases = [
  ['bad JSON', '/v1/chat/completions', '{"messages": [', {}, 400, 'openai'],
  ['empty body', '/v1/chat/completions', '', {}, 400, 'openai'],
  ['body is an array', '/v1/chat/completions', '[]', {}, 400, 'openai'],
  ['deeply nested JSON', '/v1/chat/completions', '['.repeat(100000), {}, 400, 'openai'],
  ['missing messages', '/v1/chat/completions', { model: 'x' }, {}, 400, 'openai', 'messages'],
  ['messages not an array', '/v1/chat/completions', { messages: 'hi' }, {}, 400, 'openai', 'messages'],
  ['empty messages', '/v1/chat/completions', { messages: [] }, {}, 400, 'openai', 'messages'],
  ['unknown role', '/v1/chat/completions', { messages: [{ role: 'wizard', content: 'x' }] }, {}, 400, 'openai', 'messages'],
  ['message not an object', '/v1/chat/completions', { messages: [42] }, {}, 400, 'openai', 'messages'],
  ['content of a wrong type', '/v1/chat/completions', { messages: [{ role: 'user', content: 42 }] }, {}, 400, 'openai'],
  ['temperature a string', '/v1/chat/completions', { messages: msgs, temperature: 'hot' }, {}, 400, 'openai', 'temperature'],
  ['temperature out of range', '/v1/chat/completions', { messages: msgs, temperature: 9 }, {}, 400, 'openai', 'temperature'],
  ['stream not a boolean', '/v1/chat/completions', { messages: msgs, stream: 'yes' }, {}, 400, 'openai', 'stream'],
  ['negative max_tokens', '/v1/chat/completions', { messages: msgs, max_tokens: -5 }, {}, 400, 'openai', 'max_tokens'],
  ['huge max_tokens', '/v1/chat/completions', { messages: msgs, max_tokens: 1e9 }, {}, 400, 'openai', 'max_tokens'],
  ['fractional max_tokens', '/v1/chat/completions', { messages: msgs, max_tokens: 2.5 }, {}, 400, 'openai', 'max_tokens'],
  ['n > 1', '/v1/chat/completions', { messages: msgs, n: 2 }, {}, 400, 'openai', 'n'],
  ['stop of a wrong type', '/v1/chat/completions', { messages: msgs, stop: 5 }, {}, 400, 'openai', 'stop'],
  ['tools not an array', '/v1/chat/completions', { messages: msgs, tools: {} }, {}, 400, 'openai', 'tools'],
  ['tool without a name', '/v1/chat/completions', { messages: msgs, tools: [{ type: 'function', function: {} }] }, {}, 400, 'openai', 'tools'],
  ['unknown content part type', '/v1/chat/completions', { messages: [{ role: 'user', content: [{ type: 'hologram' }] }] }, {}, 400, 'openai'],
  ['prompt longer than the context', '/v1/chat/completions', { messages: [{ role: 'user', content: long }] }, {}, 400, 'openai', 'messages', 'context_length_exceeded'],
  ['bad content-type', '/v1/chat/completions', JSON.stringify({ messages: msgs }), { 'content-type': 'text/plain' }, 415, 'openai'],
  ['bad test-output base64', '/v1/chat/completions', { messages: msgs }, { 'X-DS4-Test-Output': '!!!' }, 400, 'openai'],
  ['oversize body', '/v1/chat/completions', JSON.stringify({ messages: [{ role: 'user', content: 'x'.repeat(2 << 20) }] }), {}, 413, 'openai'],
  ['completions without prompt', '/v1/completions', { model: 'x' }, {}, 400, 'openai', 'prompt'],
  ['completions token out of range', '/v1/completions', { prompt: [1, 99999999] }, {}, 400, 'openai', 'prompt'],
  ['anthropic without max_tokens', '/v1/messages', { messages: msgs }, {}, 400, 'anthropic'],
  ['anthropic prompt too long', '/v1/messages', { max_tokens: 5, messages: [{ role: 'user', content: long }] }, {}, 400, 'anthropic'],
  ['anthropic bad JSON', '/v1/messages', '{', {}, 400, 'anthropic'],
  ['anthropic oversize', '/v1/messages', 'x'.repeat(2 << 20), {}, 413, 'anthropic'],
  ['responses bad input', '/v1/responses', { input: 5 }, {}, 400, 'openai', 'input'],
  ['unknown endpoint', '/v1/nothing', { messages: msgs }, {}, 404, 'openai'],
];

for (const [name, path, body, headers, status, family, param, code] of cases) {
  test(`malformed: ${name} -> ${status}`, async () => {
    const r = await post(path, body, headers);
    assert.equal(r.status, status, r.text.slice(0, 300));
    assert.ok(r.json, 'JSON error body');
    if (family === 'openai') {
      assert.deepEqual(Object.keys(r.json), ['error']);
      assert.deepEqual(Object.keys(r.json.error).sort(), ['code', 'message', 'param', 'type']);
      assert.equal(typeof r.json.error.message, 'string');
      assert.ok(r.json.error.message.length > 5);
      if (status === 400) assert.equal(r.json.error.type, 'invalid_request_error');
      if (param) assert.equal(r.json.error.param, param);
      if (code) assert.equal(r.json.error.code, code);
    } else {
      assert.equal(r.json.type, 'error');
      assert.equal(r.json.error.type, status === 413 ? 'request_too_large' : 'invalid_request_error');
      assert.equal(typeof r.json.error.message, 'string');
    }
  });
}

test('malformed: wrong methods -> 405 with Allow', async () => {
  let r = await fetch(`${BASE}/v1/chat/completions`);
  assert.equal(r.status, 405);
  assert.match(r.headers.get('allow'), /POST/);
  assert.equal((await r.json()).error.type, 'invalid_request_error');
  r = await fetch(`${BASE}/v1/models`, { method: 'POST', body: '{}', headers: { 'content-type': 'application/json' } });
  assert.equal(r.status, 405);
  r = await fetch(`${BASE}/v1/messages`, { method: 'DELETE' });
  assert.equal(r.status, 405);
  assert.equal((await r.json()).type, 'error');
  r = await fetch(`${BASE}/v1/chat/completions`, { method: 'OPTIONS' });
  assert.equal(r.status, 405, 'no CORS preflight without --cors');
});

test('prompt too long: the SDK sees context_length_exceeded', async () => {
  await assert.rejects(openai().chat.completions.create({ model: 'x', messages: [{ role: 'user', content: long }] }),
    (e) => e.status === 400 && e.code === 'context_length_exceeded' && /maximum context length is 4096/.test(e.message));
});

function rawExchange(payload, { end = true, wait = 2000 } = {}) {
  const u = new URL(BASE);
  return new Promise((resolve) => {
    const s = net.connect(Number(u.port), u.hostname);
    let data = '';
    s.on('data', (d) => { data += d.toString(); });
    s.on('error', () => {});
    s.on('close', () => resolve(data));
    s.on('connect', () => { s.write(payload); if (end) s.end(); });
    setTimeout(() => { s.destroy(); resolve(data); }, wait);
  });
}

test('raw garbage, truncated requests and header floods never take the server down', async () => {
  // the HTTP layer answers broken HTTP itself (a 4xx, then it closes)
  const a = await rawExchange('GARBAGE\r\n\r\n');
  assert.ok(a === '' || /^HTTP\/1\.[01] 4\d\d/.test(a), a);
  const host = `Host: ${new URL(BASE).host}`;   // a keyless loopback server checks it
  const bad = await rawExchange(`POST /v1/chat/completions HTTP/1.1\r\n${host}\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\n{"a":`);
  assert.match(bad, /^HTTP\/1\.1 400/);
  assert.match(bad, /invalid_request_error/);
  await rawExchange(`POST /v1/chat/completions HTTP/1.1\r\n${host}\r\nContent-Length: 100\r\n\r\n{"mess`, { wait: 300 });
  await rawExchange(`GET /v1/models HTTP/1.1\r\n${host}\r\n` + 'X-Big: ' + 'a'.repeat(200000) + '\r\n\r\n');
  const b = await rawExchange('\x00\x01\x02\xff\r\n\r\n');
  assert.ok(b === '' || /^HTTP\/1\.[01] 4\d\d/.test(b));
  const r = await fetch(`${BASE}/health`);
  assert.equal(r.status, 200);
  const c = await openai().chat.completions.create({ model: 'x', messages: msgs }, { headers: out('still alive') });
  assert.equal(c.choices[0].message.reasoning_content, 'still alive');
});

test('16 concurrent clients are all answered, in arrival order', async () => {
  // the server counts a request once its answer is sent, so the previous
  // test's last request may still be uncounted when its client has read
  // the answer: wait for the counter to settle before taking the baseline
  const key200 = 'ds4_requests_total{endpoint="chat_completions",status="200"}';
  let m0 = await metrics();
  for (let i = 0; i < 20; i++) {
    await sleep(100);
    const again = await metrics();
    if ((again[key200] || 0) === (m0[key200] || 0)) break;
    m0 = again;
  }
  // a longer job first keeps the worker busy while the 16 arrive and queue
  // (shorter in the ASan/UBSan suite, where 900 tokens alone take ~60 s:
  // 300 still outlast the 2.4 s in which the 16 arrive)
  const busy = process.env.DS4_DEBUG_BUILD === '1' ? 300 : 900;
  // the sends are spaced so that "arrival order" is well defined: with
  // 40 ms between them an ASan server on a loaded machine once parsed
  // client 7's request before 6's (its connection thread stalled longer
  // than the gap), so 150 ms there (16 sends still arrive within the
  // blocker); the optimized server answers a job in well under 120 ms, so
  // wider gaps there would leave nothing queued
  const gap = process.env.DS4_DEBUG_BUILD === '1' ? 150 : 40;
  const blocker = openai().chat.completions.create({ model: 'deepseek-chat', messages: [{ role: 'user', content: 'busy' }] },
    { headers: out('y '.repeat(busy)) });
  await sleep(50);
  // answers of ~60 tokens: one finishes tens of ms after the one before,
  // a margin the client's own scheduling on a loaded machine does not eat
  // (with ~8 tokens, two neighbours were once seen in swapped order)
  const finished = [];
  const seenAt = [];
  const reqs = [];
  for (let i = 0; i < 16; i++) {
    reqs.push(openai().chat.completions.create(
      { model: 'deepseek-chat', messages: [{ role: 'user', content: `client ${i}` }] },
      { headers: out(`answer number ${i} ` + 'x '.repeat(60)) }).then((r) => {
      finished.push(i);
      seenAt[i] = performance.now();
      return r;
    }));
    await sleep(gap);
  }
  const res = await Promise.all(reqs);
  await blocker;
  res.forEach((r, i) => assert.equal(r.choices[0].message.content, `answer number ${i} ` + 'x '.repeat(60)));
  // FIFO: every answer after the one sent before it.  The one worker runs
  // one job at a time (each ~60 tokens, 80 ms or more), so answers come
  // that far apart; two seen within a few ms of each other were both
  // waiting when a stalled client (a loaded machine: once 6 and 7 swapped)
  // looked, and say nothing of the server's order.
  const late = [];
  for (let a = 0; a < 16; a++)
    for (let b = a + 1; b < 16; b++)
      if (seenAt[b] < seenAt[a] && seenAt[a] - seenAt[b] > 25) late.push(`${a} ${(seenAt[a] - seenAt[b]).toFixed(0)} ms after ${b}`);
  assert.deepEqual(late, [], `FIFO: finished in the order sent (${finished})`);
  if (finished.some((v, k) => v !== k)) console.log(`note: the client read two ready answers out of order (${finished})`);
  const m1 = await metrics();
  const k = 'ds4_requests_total{endpoint="chat_completions",status="200"}';
  assert.equal((m1[k] || 0) - (m0[k] || 0), 17);
  assert.ok(m1.ds4_queue_depth_peak >= 4, `requests actually queued (peak ${m1.ds4_queue_depth_peak})`);
  assert.equal(m1.ds4_queue_depth, 0);
});

async function waitMetric(key, atLeast, ms = 5000) {
  const t0 = Date.now();
  for (;;) {
    const m = await metrics();
    if (m[key] >= atLeast) return m;
    if (Date.now() - t0 > ms) return m;
    await sleep(50);
  }
}

test('a client that disconnects mid-stream cancels its generation', async () => {
  const key = 'ds4_cancelled_total{reason="client_disconnect"}';
  const m0 = await metrics();
  const ac = new AbortController();
  const stream = await openai().chat.completions.create(
    { model: 'deepseek-chat', messages: [{ role: 'user', content: 'write forever' }], max_tokens: 3000, stream: true },
    { signal: ac.signal, headers: out('forever '.repeat(3000)) });   // forced: no early end token
  let n = 0;
  try {
    for await (const ch of stream) {
      const d = ch.choices[0]?.delta;
      if ((d?.content || d?.reasoning_content) && ++n >= 3) ac.abort();
    }
  } catch { /* aborted */ }
  const t0 = Date.now();
  const r = await openai().chat.completions.create({ model: 'x', messages: msgs }, { headers: out('next one') });
  const dt = Date.now() - t0;
  assert.equal(r.choices[0].message.reasoning_content, 'next one');
  assert.ok(dt < 3000, `the next request was served promptly (${dt} ms)`);
  const m1 = await waitMetric(key, m0[key] + 1);
  assert.equal(m1[key] - m0[key], 1);
  assert.ok(m1.ds4_generated_tokens_total - m0.ds4_generated_tokens_total < 2500, 'stopped early');
});

test('a client that disconnects during a long prefill cancels it', async () => {
  const key = 'ds4_cancelled_total{reason="client_disconnect"}';
  const m0 = await metrics();
  const ac = new AbortController();
  // ~2800 prompt tokens, evaluated 64 at a time (--chunk 64)
  const p = fetch(`${BASE}/v1/chat/completions`, {
    method: 'POST', signal: ac.signal, headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content: 'lorem ipsum dolor sit amet '.repeat(200) }], max_tokens: 5 }),
  }).catch(() => null);
  await sleep(300);
  ac.abort();
  await p;
  const m1 = await waitMetric(key, m0[key] + 1);
  assert.equal(m1[key] - m0[key], 1);
  const evaluated = m1.ds4_prompt_tokens_evaluated_total - m0.ds4_prompt_tokens_evaluated_total;
  assert.ok(evaluated < 2500, `prefill stopped early (${evaluated} tokens evaluated)`);
  const r = await openai().chat.completions.create({ model: 'x', messages: msgs }, { headers: out('fine') });
  assert.equal(r.choices[0].message.reasoning_content, 'fine');
});

test('streams send keep-alive comments while they wait', async () => {
  // a long request occupies the worker; a stream queued behind it receives
  // SSE comments (--keepalive 1 in t_server.sh) until its turn comes
  const ac = new AbortController();
  const blocker = fetch(`${BASE}/v1/chat/completions`, {
    method: 'POST', signal: ac.signal, headers: { 'content-type': 'application/json', ...out('lorem '.repeat(4000)) },
    body: JSON.stringify({ messages: [{ role: 'user', content: 'lorem ipsum '.repeat(300) }], max_tokens: 3000 }),
  }).then((r) => r.text()).catch(() => null);
  await sleep(200);
  const r = await fetch(`${BASE}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json', ...out('waited') },
    body: JSON.stringify({ model: 'deepseek-chat', messages: msgs, stream: true }),
  });
  assert.equal(r.status, 200);
  const reader = r.body.getReader();
  let text = '';
  const t0 = Date.now();
  while (!text.includes(': keep-alive') && Date.now() - t0 < 20000) {
    const { done, value } = await reader.read();
    if (done) break;
    text += Buffer.from(value).toString();
  }
  assert.ok(text.includes(': keep-alive'), 'a keep-alive comment arrived');
  ac.abort();             // cancels the blocker: the stream's turn comes
  await blocker;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    text += Buffer.from(value).toString();
  }
  const ev = await sse(new Response(text));
  assert.equal(ev.map((e) => e.data?.choices?.[0]?.delta?.content || '').join(''), 'waited');
  assert.equal(ev.at(-1).data, '[DONE]');
});

test('auth: API key via Bearer or x-api-key, error shapes, /health open', async () => {
  const srv = await startServer(['--api-key', 'sekrit', '--cors']);
  try {
    let r = await fetch(`${srv.url}/v1/models`);
    assert.equal(r.status, 401);
    let j = await r.json();
    assert.deepEqual(Object.keys(j.error).sort(), ['code', 'message', 'param', 'type']);
    assert.equal(j.error.code, 'invalid_api_key');
    r = await fetch(`${srv.url}/v1/models`, { headers: { authorization: 'Bearer wrong' } });
    assert.equal(r.status, 401);
    r = await fetch(`${srv.url}/v1/models`, { headers: { authorization: 'Bearer sekrit' } });
    assert.equal(r.status, 200);
    r = await fetch(`${srv.url}/v1/models`, { headers: { 'x-api-key': 'sekrit' } });
    assert.equal(r.status, 200);
    r = await fetch(`${srv.url}/v1/messages`, { method: 'POST', body: '{}', headers: { 'content-type': 'application/json' } });
    assert.equal(r.status, 401);
    j = await r.json();
    assert.equal(j.type, 'error');
    assert.equal(j.error.type, 'authentication_error');
    r = await fetch(`${srv.url}/health`);
    assert.equal(r.status, 200);
    // the SDKs: wrong key -> AuthenticationError, right key works
    await assert.rejects(openai({ baseURL: `${srv.url}/v1`, apiKey: 'nope' }).models.list(), (e) => e.status === 401);
    const ok = await openai({ baseURL: `${srv.url}/v1`, apiKey: 'sekrit' }).models.list();
    assert.ok(ok.data.length >= 1);
    // CORS: preflight without credentials, headers on answers
    r = await fetch(`${srv.url}/v1/chat/completions`, { method: 'OPTIONS', headers: { origin: 'http://x', 'access-control-request-headers': 'authorization,content-type' } });
    assert.equal(r.status, 204);
    assert.equal(r.headers.get('access-control-allow-origin'), '*');
    assert.match(r.headers.get('access-control-allow-headers'), /authorization/);
    assert.match(r.headers.get('access-control-allow-methods'), /POST/);
    r = await fetch(`${srv.url}/v1/models`, { headers: { 'x-api-key': 'sekrit' } });
    assert.equal(r.headers.get('access-control-allow-origin'), '*');
    // a metrics line per endpoint and status
    const m = await metrics(srv.url, { 'x-api-key': 'sekrit' });
    assert.ok(m['ds4_requests_total{endpoint="models",status="401"}'] >= 2);
  } finally {
    await srv.stop();
  }
  // the key from the environment
  const e = await startServer([], { DS4_API_KEY: 'fromenv' });
  try {
    assert.equal((await fetch(`${e.url}/v1/models`)).status, 401);
    assert.equal((await fetch(`${e.url}/v1/models`, { headers: { authorization: 'Bearer fromenv' } })).status, 200);
  } finally {
    await e.stop();
  }
});

test('startup: a non-loopback address without a key is refused', async () => {
  const r = await runServer(['-m', MODEL, '--host', '0.0.0.0', '--port', '0']);
  assert.equal(r.code, 2);
  assert.match(r.log, /refusing to listen on 0\.0\.0\.0/);
  const u = await runServer(['--bogus-flag']);
  assert.equal(u.code, 2);
  const h = await runServer(['--help']);
  assert.equal(h.code, 0);
});

test('shutdown: SIGTERM cancels the running stream with an error and exits cleanly', async () => {
  const srv = await startServer([]);
  const r = await fetch(`${srv.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'deepseek-chat', messages: msgs, max_tokens: 800, stream: true }),
  });
  const reader = r.body.getReader();
  await reader.read();           // the stream is running
  srv.proc.kill('SIGTERM');
  let text = '';
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    text += Buffer.from(value).toString();
  }
  const { code } = await srv.exited;
  assert.equal(code, 0);
  assert.match(text, /shutting down/);
  assert.match(srv.log, /stopped/);
});
