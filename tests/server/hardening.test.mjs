// HTTP-facing hardening of ds4-server: a port in use, slow connections
// (header deadline, per-address cap), Host / Origin / Content-Type checks of
// a keyless loopback server, wrong-typed fields, NULs, numbers out of range,
// one context figure everywhere, model names, a quiet -v, and --help
// against the flag table of docs/server.md.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { readFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { BASE, MODEL, SERVER, out, post, metrics, startServer, runServer, sleep } from './helpers.mjs';

const msgs = [{ role: 'user', content: 'hi' }];
const PORT = Number(new URL(BASE).port);

// One request with full control of the headers (fetch cannot set Host).
function req(base, path, { method = 'GET', headers = {}, body, localAddress } = {}) {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const r = http.request({ host: u.hostname, port: u.port, path, method, headers, localAddress, agent: false }, (res) => {
      let d = '';
      res.on('data', (c) => { d += c; });
      res.on('end', () => {
        let json = null;
        try { json = JSON.parse(d); } catch { /* not JSON */ }
        resolve({ status: res.statusCode, text: d, json, headers: res.headers });
      });
    });
    r.on('error', reject);
    r.setTimeout(20000, () => r.destroy(new Error('timeout')));
    if (body !== undefined) r.write(typeof body === 'string' ? body : JSON.stringify(body));
    r.end();
  });
}

const J = { 'content-type': 'application/json' };

function assertOpenAIError(r, status, code) {
  assert.equal(r.status, status, r.text.slice(0, 300));
  assert.deepEqual(Object.keys(r.json.error).sort(), ['code', 'message', 'param', 'type']);
  if (code !== undefined) assert.equal(r.json.error.code, code);
}

function assertAnthropicError(r, status, type) {
  assert.equal(r.status, status, r.text.slice(0, 300));
  assert.equal(r.json.type, 'error');
  assert.equal(r.json.error.type, type);
  assert.equal(typeof r.json.error.message, 'string');
}

// ---------------------------------------------------------------------------
// 1. the port

test('port in use: a second server refuses to start (no SO_REUSEPORT sharing)', async () => {
  const r = await runServer(['-m', MODEL, '--port', String(PORT), '--ctx', '1024', '-t', '1']);
  assert.notEqual(r.code, 0);
  assert.match(r.log, /already in use/);
  assert.doesNotMatch(r.log, /listening on/);
  // the first server keeps every client
  for (let i = 0; i < 8; i++) assert.equal((await fetch(`${BASE}/health`)).status, 200);
});

// ---------------------------------------------------------------------------
// 2. slow connections

// Open n connections that send a request's headers one byte at a time and
// never finish them; resolves with the time (ms from the start) each closed.
function slowClients(port, n, dripMs, stopAfterMs) {
  const t0 = Date.now();
  const head = `POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nX-Slow: ${'a'.repeat(200)}`;
  const closed = [];
  const socks = [];
  const done = [];
  for (let i = 0; i < n; i++) {
    const s = net.connect(port, '127.0.0.1');
    socks.push(s);
    let k = 0;
    const timer = setInterval(() => {
      if (Date.now() - t0 > stopAfterMs || s.destroyed) { clearInterval(timer); return; }
      if (k < head.length) s.write(head[k++]);
    }, dripMs);
    s.on('error', () => {});
    done.push(new Promise((res) => s.on('close', () => { clearInterval(timer); closed[i] = Date.now() - t0; res(); })));
  }
  return {
    closed, socks,
    all: (ms) => Promise.race([Promise.all(done), sleep(ms)]),
    destroy: () => socks.forEach((s) => s.destroy()),
  };
}

test('slow connections: /health stays reachable, and they are closed at the header deadline', async () => {
  // default connection limits (256, 64 per address); a 2 s header deadline
  const srv = await startServer(['--header-timeout', '2']);
  const port = Number(new URL(srv.url).port);
  const slow = slowClients(port, 300, 500, 8000);
  try {
    await sleep(500);
    // another client address (all of 127/8 is loopback) still gets in at once
    for (let i = 0; i < 5; i++) {
      const t0 = Date.now();
      const r = await req(srv.url, '/health', { localAddress: '127.0.0.2' });
      assert.equal(r.status, 200);
      assert.ok(Date.now() - t0 < 1000, `/health answered in ${Date.now() - t0} ms`);
    }
    // every slow connection is gone by the deadline (plus the reaper's
    // period), although each kept sending a byte every 500 ms
    await slow.all(6000);
    const open = slow.closed.filter((t) => t === undefined).length;
    assert.equal(open, 0, `${open} slow connections still open`);
    // the server's own count of the connections it accepted and then timed
    // out (the refused ones are closed at once; on a loaded machine "at
    // once" can take longer than the deadline itself, so the client's clock
    // cannot tell the two apart), and the last close well before the
    // clients would have stopped sending (8 s)
    const m = await metrics(srv.url);
    const accepted = m.ds4_http_header_timeouts_total;
    assert.ok(accepted >= 1 && accepted <= 64, `${accepted} were accepted (at most 64 from one address)`);
    assert.ok(Math.max(...slow.closed) < 6500, `closed by ${Math.max(...slow.closed)} ms`);
    // the same address is served again
    const r = await req(srv.url, '/health');
    assert.equal(r.status, 200);
  } finally {
    slow.destroy();
    await srv.stop();
  }
});

test('slow connections: a kept-alive connection may idle past the header deadline', async () => {
  const srv = await startServer(['--header-timeout', '1', '--idle-timeout', '30']);
  const port = Number(new URL(srv.url).port);
  const s = net.connect(port, '127.0.0.1');
  let data = '';
  s.on('data', (d) => { data += d.toString(); });
  s.on('error', () => {});
  try {
    await new Promise((r) => s.on('connect', r));
    const get = `GET /health HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`;
    s.write(get);
    await sleep(300);
    assert.match(data, /^HTTP\/1\.1 200/);
    await sleep(2500);     // idle, past --header-timeout
    data = '';
    s.write(get);
    await sleep(300);
    assert.match(data, /^HTTP\/1\.1 200/, 'the second request on the same connection is answered');
  } finally {
    s.destroy();
    await srv.stop();
  }
});

test('connection flags: bad values are refused', async () => {
  for (const args of [['--header-timeout', '0'], ['--max-connections-per-ip', '-1'], ['--allow-host', 'a b'],
    ['--allow-host', 'x:99999'], ['--allow-host', '']]) {
    const r = await runServer(['-m', MODEL, ...args]);
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.log}`);
  }
});

// ---------------------------------------------------------------------------
// 3. Host, Origin, Content-Type (the shared server has no key, on loopback)

test('Host: a foreign name is refused, loopback names with the port pass', async () => {
  for (const host of [`localhost:${PORT}`, `127.0.0.1:${PORT}`, `[::1]:${PORT}`, `LOCALHOST:${PORT}`]) {
    const r = await req(BASE, '/v1/models', { headers: { Host: host } });
    assert.equal(r.status, 200, host);
  }
  for (const host of ['evil.example', `evil.example:${PORT}`, `localhost:${PORT + 1}`, 'localhost', '127.0.0.1',
    `localhost.evil.example:${PORT}`, `[::2]:${PORT}`]) {
    const r = await req(BASE, '/v1/models', { headers: { Host: host } });
    assertOpenAIError(r, 403, 'forbidden_host');
    assert.match(r.json.error.message, /--allow-host/);
  }
  // every route, in its API's error shape; the body is not used
  const r = await req(BASE, '/v1/messages', { method: 'POST', headers: { ...J, Host: `rebind.example:${PORT}` },
    body: { max_tokens: 5, messages: msgs } });
  assertAnthropicError(r, 403, 'permission_error');
  assertOpenAIError(await req(BASE, '/health', { headers: { Host: 'rebind.example' } }), 403, 'forbidden_host');
  assertOpenAIError(await req(BASE, '/v1/chat/completions', { method: 'POST', headers: { ...J, Host: 'x' }, body: { messages: msgs } }),
    403, 'forbidden_host');
});

test('Origin: a foreign page is refused, the server itself passes', async () => {
  for (const origin of ['http://evil.example', 'https://evil.example', 'null', `http://evil.example:${PORT}`,
    `http://localhost:${PORT + 1}`, 'file://', `ftp://localhost:${PORT}`]) {
    const r = await req(BASE, '/v1/chat/completions', { method: 'POST', headers: { ...J, Origin: origin }, body: { messages: msgs } });
    assertOpenAIError(r, 403, 'forbidden_origin');
  }
  const a = await req(BASE, '/v1/messages', { method: 'POST', headers: { ...J, Origin: 'http://evil.example' },
    body: { max_tokens: 5, messages: msgs } });
  assertAnthropicError(a, 403, 'permission_error');
  for (const origin of [`http://localhost:${PORT}`, `http://127.0.0.1:${PORT}`, `http://[::1]:${PORT}`]) {
    const r = await req(BASE, '/v1/chat/completions', { method: 'POST', headers: { ...J, Origin: origin, ...out('ok') },
      body: { model: 'deepseek-chat', messages: msgs } });
    assert.equal(r.status, 200, `${origin}: ${r.text.slice(0, 200)}`);
    assert.equal(r.json.choices[0].message.content, 'ok');
  }
});

test('Content-Type: a POST must declare JSON (415 in the API shape)', async () => {
  const body = JSON.stringify({ messages: msgs });
  let r = await req(BASE, '/v1/chat/completions', { method: 'POST', body });
  assertOpenAIError(r, 415, 'unsupported_media_type');
  assert.match(r.json.error.message, /application\/json/);
  for (const ct of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x']) {
    r = await req(BASE, '/v1/chat/completions', { method: 'POST', headers: { 'content-type': ct }, body });
    assertOpenAIError(r, 415, 'unsupported_media_type');
  }
  r = await req(BASE, '/v1/messages', { method: 'POST', body: JSON.stringify({ max_tokens: 5, messages: msgs }) });
  assertAnthropicError(r, 415, 'invalid_request_error');
  r = await req(BASE, '/v1/messages/count_tokens', { method: 'POST', headers: { 'content-type': 'text/plain' },
    body: JSON.stringify({ messages: msgs }) });
  assertAnthropicError(r, 415, 'invalid_request_error');
  for (const ct of ['application/json', 'application/json; charset=utf-8', 'Application/JSON']) {
    r = await req(BASE, '/v1/chat/completions', { method: 'POST', headers: { 'content-type': ct, ...out('typed') },
      body: JSON.stringify({ model: 'deepseek-chat', messages: msgs }) });
    assert.equal(r.status, 200, ct);
    assert.equal(r.json.choices[0].message.content, 'typed');
  }
});

test('--allow-host, --cors and --api-key relax the checks as documented', async () => {
  const a = await startServer(['--allow-host', 'box.lan', '--allow-host', 'proxy.lan:9999', '--allow-host', '[fd00::1]:81']);
  try {
    for (const host of ['box.lan', 'box.lan:1234', 'proxy.lan:9999', '[fd00::1]:81']) {
      assert.equal((await req(a.url, '/v1/models', { headers: { Host: host } })).status, 200, host);
    }
    for (const host of ['proxy.lan', 'proxy.lan:1', 'evil.lan', '[fd00::1]:80'])
      assertOpenAIError(await req(a.url, '/v1/models', { headers: { Host: host } }), 403, 'forbidden_host');
    assert.equal((await req(a.url, '/v1/models', { headers: { Origin: 'https://box.lan' } })).status, 200);
    assertOpenAIError(await req(a.url, '/v1/models', { headers: { Origin: 'https://evil.lan' } }), 403, 'forbidden_origin');
  } finally {
    await a.stop();
  }
  const star = await startServer(['--allow-host', '*']);
  try {
    assert.equal((await req(star.url, '/v1/models', { headers: { Host: 'any.where', Origin: 'http://any.where' } })).status, 200);
  } finally {
    await star.stop();
  }
  // --cors: any Origin (as before), but Host is still checked
  const c = await startServer(['--cors']);
  try {
    const r = await req(c.url, '/v1/models', { headers: { Origin: 'http://app.example' } });
    assert.equal(r.status, 200);
    assert.equal(r.headers['access-control-allow-origin'], '*');
    assertOpenAIError(await req(c.url, '/v1/models', { headers: { Host: 'rebind.example' } }), 403, 'forbidden_host');
  } finally {
    await c.stop();
  }
  // with a key, the key is the protection: no Host / Origin checks
  const k = await startServer(['--api-key', 'k3y']);
  try {
    const r = await req(k.url, '/v1/models', { headers: { Host: 'box.example', Origin: 'http://x.example', authorization: 'Bearer k3y' } });
    assert.equal(r.status, 200);
    assert.equal((await req(k.url, '/v1/models', { headers: { Host: 'box.example' } })).status, 401);
  } finally {
    await k.stop();
  }
});

// ---------------------------------------------------------------------------
// 4. types, NULs, numbers

const badTypes = [
  ['/v1/responses', { input: 'hi', text: 'json' }, 'text'],
  ['/v1/responses', { input: 'hi', text: [] }, 'text'],
  ['/v1/responses', { input: 'hi', text: { format: 'json_object' } }, 'text.format'],
  ['/v1/responses', { input: 'hi', text: { format: { type: 5 } } }, 'text.format.type'],
  ['/v1/responses', { input: 'hi', text: { format: {} } }, 'text.format.type'],
  ['/v1/responses', { input: 'hi', text: { format: { type: 'yaml' } } }, 'text.format'],
  ['/v1/chat/completions', { messages: msgs, chat_template_kwargs: 'thinking' }, 'chat_template_kwargs'],
  ['/v1/chat/completions', { messages: msgs, chat_template_kwargs: [true] }, 'chat_template_kwargs'],
  ['/v1/chat/completions', { messages: msgs, chat_template_kwargs: { thinking: 'yes' } }, 'thinking'],
  ['/v1/messages', { max_tokens: 5, messages: msgs, output_config: 'max' }, 'output_config'],
  ['/v1/messages', { max_tokens: 5, messages: msgs, output_config: { effort: 7 } }, 'effort'],
];

for (const [path, body, param] of badTypes) {
  test(`wrong type: ${path} ${JSON.stringify(body).slice(0, 90)} -> 400`, async () => {
    const r = await post(path, body);
    assert.equal(r.status, 400, r.text.slice(0, 300));
    if (path === '/v1/messages') assert.equal(r.json.error.type, 'invalid_request_error');
    else assert.equal(r.json.error.param, param);
  });
}

test('the right types of those fields still work', async () => {
  let r = await post('/v1/responses', { model: 'deepseek-chat', input: 'hi', text: { format: { type: 'json_object' } } }, out('{}'));
  assert.equal(r.status, 200, r.text.slice(0, 300));
  r = await post('/v1/responses', { model: 'deepseek-chat', input: 'hi', text: { format: { type: 'text' }, verbosity: 'low' } }, out('x'));
  assert.equal(r.status, 200, r.text.slice(0, 300));
  r = await post('/v1/chat/completions', { messages: msgs, chat_template_kwargs: { thinking: false } }, out('plain'));
  assert.equal(r.status, 200);
  assert.equal(r.json.choices[0].message.content, 'plain');
  r = await post('/v1/messages', { model: 'deepseek-chat', max_tokens: 5, messages: msgs, output_config: { effort: 'max' } }, out('y'));
  assert.equal(r.status, 200, r.text.slice(0, 300));
});

test('NUL: outside text it is a 400, inside text it is kept', async () => {
  const bad = [
    ['/v1/chat/completions', '{"messages":[{"role":"user\\u0000","content":"x"}]}', /messages\[0\]\.role/],
    ['/v1/chat/completions', '{"model":"deepseek-chat\\u0000x","messages":[{"role":"user","content":"x"}]}', /model/],
    ['/v1/chat/completions', '{"messages":[{"role":"user","content":"x"}],"stop":["a\\u0000b"]}', /stop\[0\]/],
    ['/v1/chat/completions', '{"messages":[{"role":"user","content":[{"type":"text\\u0000","text":"x"}]}]}', /type/],
    ['/v1/chat/completions', '{"messages":[{"role":"user","content":"x"}],"reasoning_effort":"high\\u0000"}', /reasoning_effort/],
    ['/v1/messages', '{"max_tokens":5,"messages":[{"role":"user","content":"x"}],"tools":[{"name":"a\\u0000b","input_schema":{}}]}', /tools\[0\]\.name/],
    ['/v1/responses', '{"input":[{"type":"function_call_output","call_id":"c\\u0000","output":"x"}]}', /call_id/],
    ['/v1/responses', '{"input":"x","instructions":"be brief\\u0000"}', /instructions/],
  ];
  for (const [path, body, where] of bad) {
    const r = await post(path, body);
    assert.equal(r.status, 400, `${body}: ${r.text.slice(0, 200)}`);
    const msg = r.json.error.message;
    assert.match(msg, /NUL/);
    assert.match(msg, where);
  }
  // text keeps its NUL: the prompt is one token longer than without it
  const a = await post('/v1/messages/count_tokens', '{"messages":[{"role":"user","content":"ab"}]}');
  const b = await post('/v1/messages/count_tokens', '{"messages":[{"role":"user","content":"a\\u0000b"}]}');
  assert.equal(a.status, 200);
  assert.equal(b.status, 200);
  assert.ok(b.json.input_tokens > a.json.input_tokens, `${b.json.input_tokens} > ${a.json.input_tokens}`);
  const c = await post('/v1/chat/completions', '{"model":"deepseek-chat","messages":[{"role":"user","content":"a\\u0000b"}]}', out('fine'));
  assert.equal(c.status, 200);
  assert.equal(c.json.choices[0].message.content, 'fine');
});

test('numbers: out-of-range doubles are 400s, never a cast', async () => {
  const cases = [
    ['/v1/chat/completions', `{"messages":${JSON.stringify(msgs)},"max_tokens":1e300}`, 'max_tokens'],
    ['/v1/chat/completions', `{"messages":${JSON.stringify(msgs)},"max_tokens":-1e300}`, 'max_tokens'],
    ['/v1/chat/completions', `{"messages":${JSON.stringify(msgs)},"max_completion_tokens":1e19}`, 'max_completion_tokens'],
    ['/v1/chat/completions', `{"messages":${JSON.stringify(msgs)},"top_k":1e300}`, 'top_k'],
    ['/v1/chat/completions', `{"messages":${JSON.stringify(msgs)},"seed":1e300}`, 'seed'],
    ['/v1/chat/completions', `{"messages":${JSON.stringify(msgs)},"seed":-9.3e18}`, 'seed'],
    ['/v1/chat/completions', `{"messages":${JSON.stringify(msgs)},"n":1e300}`, 'n'],
    ['/v1/chat/completions', `{"messages":${JSON.stringify(msgs)},"temperature":1e300}`, 'temperature'],
    ['/v1/completions', '{"prompt":"x","max_tokens":1e300}', 'max_tokens'],
    ['/v1/completions', '{"prompt":"x","best_of":1e300}', 'best_of'],
    ['/v1/responses', '{"input":"x","max_output_tokens":1e300}', 'max_output_tokens'],
    ['/v1/messages', `{"max_tokens":1e300,"messages":${JSON.stringify(msgs)}}`, null],
    ['/v1/messages', `{"max_tokens":5,"messages":${JSON.stringify(msgs)},"thinking":{"type":"enabled","budget_tokens":1e300}}`, null],
  ];
  for (const [path, body, param] of cases) {
    const r = await post(path, body);
    assert.equal(r.status, 400, `${body}: ${r.text.slice(0, 200)}`);
    if (param) assert.equal(r.json.error.param, param, body);
    else assert.equal(r.json.error.type, 'invalid_request_error');
  }
  // an integral double is still an integer
  const r = await post('/v1/chat/completions', `{"model":"deepseek-chat","messages":${JSON.stringify(msgs)},"max_tokens":3.0,"seed":7.0}`, out('a b c d e f'));
  assert.equal(r.status, 200, r.text.slice(0, 200));
  assert.equal(r.json.usage.completion_tokens, 3);
});

// ---------------------------------------------------------------------------
// 5. one context figure, one set of model names

test('context: the same figure on /v1/models, /health, /metrics and in every too-long error', async () => {
  const health = await (await fetch(`${BASE}/health`)).json();
  const ctx = health.ctx;
  assert.equal(ctx, 4096);
  const models = await (await fetch(`${BASE}/v1/models`)).json();
  for (const m of models.data) assert.equal(m.max_model_len, ctx);
  assert.equal((await (await fetch(`${BASE}/v1/models/deepseek-chat`)).json()).max_model_len, ctx);
  const mt = await metrics();
  assert.equal(mt.ds4_context_size, ctx);
  // the weights' mapping (Linux): resident bytes, and those on 2 MB pages
  assert.ok(mt.ds4_weights_resident_bytes > 0, 'ds4_weights_resident_bytes');
  assert.ok(mt.ds4_weights_huge_page_bytes >= 0 &&
            mt.ds4_weights_huge_page_bytes <= mt.ds4_weights_resident_bytes, 'ds4_weights_huge_page_bytes');
  const long = 'word '.repeat(5000);
  const errs = [
    await post('/v1/chat/completions', { messages: [{ role: 'user', content: long }] }),
    await post('/v1/completions', { prompt: long }),
    await post('/v1/responses', { input: long }),
    await post('/v1/messages', { max_tokens: 5, messages: [{ role: 'user', content: long }] }),
    await post('/v1/chat/completions', { messages: msgs, max_tokens: ctx + 1 }),
    await post('/v1/messages', { max_tokens: ctx + 1, messages: msgs }),
  ];
  for (const r of errs) {
    assert.equal(r.status, 400, r.text.slice(0, 200));
    const nums = (r.json.error.message.match(/\d+/g) || []).map(Number);
    assert.ok(nums.includes(ctx), r.json.error.message);
    assert.ok(!nums.includes(ctx - 1), `no other limit figure: ${r.json.error.message}`);
  }
  assert.match(errs[3].json.error.message, new RegExp(`^prompt is too long: \\d+ tokens > ${ctx} maximum$`));
  // a prompt that fills the context exactly leaves no room for the answer
  const ids = [...Array(ctx).keys()].map((i) => 10 + (i % 500));   // never BOS
  // (ids: BOS is prepended to them, making ctx tokens)
  const full = await post('/v1/completions', { prompt: ids.slice(0, ctx - 1), max_tokens: 1 });
  assert.equal(full.status, 400, full.text.slice(0, 200));
  assert.equal(full.json.error.code, 'context_length_exceeded');
  assert.match(full.json.error.message, new RegExp(`maximum context length is ${ctx} tokens.*${ctx + 1} tokens \\(${ctx} in the prompt, 1 in the completion\\)`));
  // one token less fits (and generates its one token)
  const fits = await post('/v1/completions', { prompt: ids.slice(0, ctx - 2), max_tokens: 1 }, out('z'));
  assert.equal(fits.status, 200, fits.text.slice(0, 200));
  // count_tokens measures any prompt, even one that does not fit
  const ct = await post('/v1/messages/count_tokens', { messages: [{ role: 'user', content: long }] });
  assert.equal(ct.status, 200, ct.text.slice(0, 200));
  assert.ok(ct.json.input_tokens > ctx);
});

test('model names: POST routes and GET /v1/models/{id} accept the same ones', async () => {
  const names = ['deepseek-chat', 'deepseek-reasoner', 'gpt-4o', 'claude-sonnet-4-5', 'org/some-model', 'a'.repeat(256), 'b'.repeat(257), 'c'.repeat(600)];
  const models = await (await fetch(`${BASE}/v1/models`)).json();
  names.push(models.data[0].id);
  for (const name of names) {
    const g = await fetch(`${BASE}/v1/models/${name}`);
    const gj = await g.json();
    const p = await post('/v1/chat/completions', { model: name, messages: msgs, max_tokens: 1 }, out('k'));
    const a = await post('/v1/messages', { model: name, max_tokens: 1, messages: msgs }, out('k'));
    const expect = name.length <= 256 ? 200 : 404;
    assert.equal(g.status, expect, `GET ${name.slice(0, 40)}`);
    assert.equal(p.status, expect, `POST chat ${name.slice(0, 40)}: ${p.text.slice(0, 200)}`);
    assert.equal(a.status, expect, `POST messages ${name.slice(0, 40)}`);
    if (expect === 200) {
      assert.equal(gj.id, name);
      assert.equal(p.json.model, name);
      assert.equal(a.json.model, name);
    } else {
      assert.equal(gj.error.code, 'model_not_found');
      assert.equal(p.json.error.code, 'model_not_found');
      assert.equal(a.json.error.type, 'not_found_error');
    }
  }
});

// ---------------------------------------------------------------------------
// 6. -v, 8. --help and docs/server.md

test('-v: a start and a good request print no warning', async () => {
  const srv = await startServer(['-v']);
  try {
    await fetch(`${srv.url}/health`);
    await sleep(200);
    assert.doesNotMatch(srv.log, /MHD_OPTION|http: |refused|warning/, srv.log);
  } finally {
    await srv.stop();
  }
});

test('--help lists exactly the flags of the docs/server.md table', async () => {
  const h = spawnSync(SERVER, ['--help'], { encoding: 'utf8' });
  assert.equal(h.status, 0);
  const help = new Set(h.stdout.match(/--[a-z][a-z-]*/g) || []);
  // the server's reference page (moved out of the README)
  const sec = readFileSync(fileURLToPath(new URL('../../docs/server.md', import.meta.url)), 'utf8');
  assert.ok(sec.includes('\n## Flags\n'), 'docs/server.md has no "## Flags" section');
  const table = sec.slice(sec.indexOf('\n## Flags\n'), sec.indexOf('\n## ', sec.indexOf('\n## Flags\n') + 5));
  const documented = new Set();
  for (const line of table.split('\n')) {
    if (!line.startsWith('| `')) continue;
    const cell = line.split('|')[1];
    for (const f of cell.match(/--[a-z][a-z-]*/g) || []) documented.add(f);
  }
  assert.ok(help.size > 30, `${help.size} flags in --help`);
  const missing = [...help].filter((f) => !documented.has(f));
  const extra = [...documented].filter((f) => !help.has(f));
  assert.deepEqual(missing, [], 'flags of --help missing from docs/server.md');
  assert.deepEqual(extra, [], 'docs/server.md flags that --help does not list');
});
