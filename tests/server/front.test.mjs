// The server's front door: the "/" page of --no-webui (HTML, or JSON on
// request; the chat page is webui.test.mjs's), the
// one log line of every request the server refuses, and the message of
// ds4-server / ds4 / ds4-agent when the model file cannot be opened.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import http from 'node:http';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { BASE, SERVER, MODEL, post, startServer, sleep } from './helpers.mjs';

function get(base, path, headers = {}, method = 'GET') {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const r = http.request({ host: u.hostname, port: u.port, path, method, headers, agent: false }, (res) => {
      let d = '';
      res.on('data', (c) => { d += c; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, text: d }));
    });
    r.on('error', reject);
    r.end();
  });
}

// ---------------------------------------------------------------------------
// GET /

test('GET / with --no-webui is a small self-contained HTML page: the model, the endpoints, a curl line', async () => {
  const srv = await startServer(['--no-webui']);
  try {
    await infoPage(srv.url);
  } finally {
    await srv.stop();
  }
});

async function infoPage(BASE) {
  const r = await get(BASE, '/');
  assert.equal(r.status, 200, r.text.slice(0, 200));
  assert.match(r.headers['content-type'], /^text\/html; charset=utf-8/);
  const health = await (await fetch(`${BASE}/health`)).json();
  assert.ok(r.text.includes(health.model), 'names the model');
  for (const p of ['/v1/chat/completions', '/v1/messages', '/v1/responses', '/v1/models', '/health'])
    assert.ok(r.text.includes(p), p);
  assert.match(r.text, /curl http:\/\/[^ ]+\/v1\/chat\/completions/);
  // nothing loaded from elsewhere
  assert.doesNotMatch(r.text, /<script|<link|<img|src=|url\(|@import/i);
  assert.doesNotMatch(r.text, /href="?https?:/i);
  const h = await get(BASE, '/', {}, 'HEAD');
  assert.equal(h.status, 200);
  assert.equal(h.text, '');
  assert.equal(h.headers['content-length'], r.headers['content-length']);
}

test('GET / with Accept: application/json describes the server as JSON', async () => {
  const r = await get(BASE, '/', { Accept: 'application/json' });
  assert.equal(r.status, 200);
  const j = JSON.parse(r.text);
  assert.equal(j.server, 'ds4-server');
  assert.equal(j.api_key_required, false);
  assert.ok(j.endpoints.some((e) => e.method === 'POST' && e.path === '/v1/messages'));
  // a browser's Accept (HTML first) gets the page
  const b = await get(BASE, '/', { Accept: 'text/html,application/xhtml+xml,application/json;q=0.9' });
  assert.match(b.headers['content-type'], /^text\/html/);
});

test('GET /: no API key needed (it shows the model name only, like /health); Host is still checked', async () => {
  const k = await startServer(['--no-webui', '--api-key', 's3cret', '--model-name', 'm<x>&"y\'']);
  try {
    const r = await get(k.url, '/');
    assert.equal(r.status, 200);
    assert.ok(r.text.includes('m&lt;x&gt;&amp;&quot;y&#39;'), 'the name is escaped');
    assert.ok(!r.text.includes('m<x>'));
    assert.match(r.text, /Authorization: Bearer/);
    assert.equal((await get(k.url, '/v1/models')).status, 401, 'the API stays keyed');
    assert.equal(JSON.parse((await get(k.url, '/', { Accept: 'application/json' })).text).api_key_required, true);
  } finally {
    await k.stop();
  }
  const r = await get(BASE, '/', { Host: 'rebind.example' });
  assert.equal(r.status, 403);
  assert.equal(JSON.parse(r.text).error.code, 'forbidden_host');
  const p = await post('/', { x: 1 });
  assert.equal(p.status, 405);
});

// ---------------------------------------------------------------------------
// the log of refused requests

function raw(url, payload) {
  const u = new URL(url);
  return new Promise((resolve) => {
    const s = net.connect(Number(u.port), u.hostname);
    let d = '';
    s.on('data', (x) => { d += x; });
    s.on('close', () => resolve(d));
    s.on('error', () => resolve(d));
    s.on('connect', () => s.write(payload));
    setTimeout(() => { s.destroy(); resolve(d); }, 3000);
  });
}

async function logLines(srv, re, n = 1) {
  for (let i = 0; i < 100; i++) {
    const l = srv.log.split('\n').filter((x) => re.test(x));
    if (l.length >= n) return l;
    await sleep(30);
  }
  return srv.log.split('\n').filter((x) => re.test(x));
}

test('every refused request logs one line: status, method, target, peer, the reason it was given', async () => {
  const srv = await startServer(['--api-key', 'k', '--max-body-bytes', '4096']);
  const u = new URL(srv.url);
  const auth = { authorization: 'Bearer k', 'content-type': 'application/json' };
  try {
    const cases = [
      // invalid JSON
      [() => post('/v1/chat/completions', '{"messages": [', auth, srv.url),
        /refused 400 POST \/v1\/chat\/completions from 127\.0\.0\.1:\d+: We could not parse the JSON body/],
      // an unknown field value (a role), with a newline: escaped
      [() => post('/v1/chat/completions', { messages: [{ role: 'wi\nzard', content: 'x' }] }, auth, srv.url),
        /refused 400 POST \/v1\/chat\/completions from 127\.0\.0\.1:\d+: messages\[0\]: unknown role 'wi\\x0azard'/],
      // auth
      [() => post('/v1/messages?beta=true', { max_tokens: 1, messages: [] }, { 'content-type': 'application/json' }, srv.url),
        /refused 401 POST \/v1\/messages\?beta=true from 127\.0\.0\.1:\d+: invalid x-api-key/],
      // a body over the limit
      [() => post('/v1/chat/completions', 'x'.repeat(5000), auth, srv.url),
        /refused 413 POST \/v1\/chat\/completions from 127\.0\.0\.1:\d+: the request body exceeds the limit of 4096 bytes/],
      // an unknown route
      [() => post('/v2/nothing', {}, auth, srv.url), /refused 404 POST \/v2\/nothing from 127\.0\.0\.1:\d+: Invalid URL/],
      // bad framing, answered by the HTTP layer
      [() => raw(srv.url, `POST /v1/chat/completions HTTP/1.1\r\nHost: ${u.host}\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n{}`),
        /refused 400 POST \/v1\/chat\/completions from 127\.0\.0\.1:\d+: duplicate Content-Length header/],
      // not even a request line
      [() => raw(srv.url, 'GARBAGE\r\n\r\n'), /refused 400 - - from 127\.0\.0\.1:\d+: malformed request line 'GARBAGE'/],
    ];
    for (const [send, re] of cases) {
      await send();
      const l = await logLines(srv, re);
      assert.equal(l.length, 1, `one line matching ${re}:\n${srv.log}`);
    }
    // a long reason is cut
    await post('/v1/chat/completions', { messages: [{ role: 'r'.repeat(2000), content: 'x' }] }, auth, srv.url);
    const [long] = await logLines(srv, /unknown role 'rrrr/);
    assert.ok(long && long.length < 600 && long.endsWith('...'), long);
    // a good request logs no "refused" line
    const before = srv.log.split('\n').filter((x) => /refused/.test(x)).length;
    assert.equal((await get(srv.url, '/v1/models', { authorization: 'Bearer k' })).status, 200);
    await sleep(100);
    assert.equal(srv.log.split('\n').filter((x) => /refused/.test(x)).length, before);
    // without -v no body is logged
    assert.doesNotMatch(srv.log, /body \(\d+ bytes\)/);
  } finally {
    await srv.stop();
  }
});

test('-v adds the first bytes of a refused request\'s body', async () => {
  const srv = await startServer(['-v']);
  try {
    await post('/v1/chat/completions', `{"messages": [\x01${'z'.repeat(500)}`, {}, srv.url);
    const [l] = await logLines(srv, / {2}body \(\d+ bytes\)/);
    assert.ok(l, srv.log);
    assert.match(l, /body \(515 bytes\): \{"messages": \[\\x01z+\.\.\.$/);
    assert.ok(l.length < 320, l);
  } finally {
    await srv.stop();
  }
});

// ---------------------------------------------------------------------------
// a model file that cannot be opened

test('a missing model: ds4-server, ds4 and ds4-agent name the file, the default and how to get one', async () => {
  const cwd = mkdtempSync(join(tmpdir(), 'ds4-nomodel-'));
  try {
    const bins = [['ds4-server', SERVER, []], ['ds4', join(dirname(SERVER), 'ds4'), ['-p', 'hi']],
      ['ds4-agent', join(dirname(SERVER), 'ds4-agent'), ['-p', 'hi']]];
    for (const [name, bin, args] of bins) {
      if (!existsSync(bin)) { console.log(`note: ${bin} not built, not checked`); continue; }
      for (const [extra, path] of [[[], './ds4flash.gguf'], [['-m', '/nonexistent/x.gguf'], '/nonexistent/x.gguf']]) {
        const r = spawnSync(bin, [...extra, ...args], { cwd, encoding: 'utf8', timeout: 20000 });
        assert.equal(r.status, 1, `${name} ${extra.join(' ')}: ${r.stderr}`);
        const msg = r.stderr.trim();
        assert.ok(msg.startsWith(`${name}: cannot open model ${path}: No such file or directory\n`), msg);
        assert.match(msg, /use -m FILE; the default is \.\/ds4flash\.gguf/);
        assert.match(msg, /`ds4-get q2-imatrix` downloads/);
        assert.match(msg, /docs\/models\.md/);
        assert.match(msg, /`make run` to create a demo model/);
        assert.doesNotMatch(msg, /listening/);
      }
    }
    // a directory is not a model
    const d = spawnSync(SERVER, ['-m', cwd], { encoding: 'utf8', timeout: 20000 });
    assert.equal(d.status, 1);
    assert.match(d.stderr, /cannot open model .*: Is a directory/);
  } finally {
    rmSync(cwd, { recursive: true, force: true });
  }
  assert.ok(existsSync(MODEL));
});
