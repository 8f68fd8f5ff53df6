// HTTP/1.1 framing (RFC 9112) on raw sockets: every request whose end two
// parsers could place differently (a proxy in front and this server) is
// refused with one 400 (413 for a chunk past --max-body-bytes) and
// "Connection: close", the connection is closed, and the bytes after it
// (here always a smuggled GET /v1/models) are never answered.  Well-formed
// keep-alive, pipelining, chunked bodies and 100-continue keep working.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { BASE, out } from './helpers.mjs';

const U = new URL(BASE);
const HOST = `Host: ${U.host}`;
const SMUGGLED = `GET /v1/models HTTP/1.1\r\n${HOST}\r\n\r\n`;
const BODY = JSON.stringify({ model: 'deepseek-chat', messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 });
const POST = `POST /v1/chat/completions HTTP/1.1\r\n${HOST}\r\nContent-Type: application/json\r\n`;

// Send `payload` (never ending our side); resolve when the server closes
// the connection or after `ms`: {data, closed}.
function exchange(payload, ms = 3000) {
  return new Promise((resolve) => {
    const s = net.connect(Number(U.port), U.hostname);
    let data = Buffer.alloc(0);
    let done = false;
    const finish = (closed) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      s.destroy();
      resolve({ data: data.toString('latin1'), closed });
    };
    const timer = setTimeout(() => finish(false), ms);
    s.on('data', (d) => { data = Buffer.concat([data, d]); });
    s.on('end', () => finish(true));
    s.on('close', () => finish(true));
    s.on('error', () => finish(true));
    s.on('connect', () => s.write(Buffer.from(payload, 'latin1')));
  });
}

function statusLines(data) {
  return data.match(/HTTP\/1\.[01] \d{3}/g) || [];
}

// One answer with `status`, Connection: close, the connection closed, no
// second answer; the error names the problem (`why`).
async function refused(payload, why, status = 400) {
  const r = await exchange(payload);
  const lines = statusLines(r.data);
  assert.equal(lines[0], `HTTP/1.1 ${status}`, `first answer: ${JSON.stringify(r.data.slice(0, 300))}`);
  assert.equal(lines.length, 1, `exactly one answer (the smuggled request is not answered): ${JSON.stringify(r.data.slice(0, 600))}`);
  const [head, body] = r.data.split('\r\n\r\n');
  assert.match(`${head}\r\n`, /\r\nConnection: close\r\n/i, head);
  assert.ok(r.closed, 'the server closed the connection');
  if (why) assert.match(JSON.parse(body).error.message, why);
}

const cases = [
  ['two different Content-Length', `${POST}Content-Length: 2\r\nContent-Length: ${2 + SMUGGLED.length}\r\n\r\n{}${SMUGGLED}`, /duplicate Content-Length/],
  ['two equal Content-Length', `${POST}Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}${SMUGGLED}`, /duplicate Content-Length/],
  ['a Content-Length list', `${POST}Content-Length: 2, 2\r\n\r\n{}${SMUGGLED}`, /invalid Content-Length/],
  ['a signed Content-Length', `${POST}Content-Length: +2\r\n\r\n{}${SMUGGLED}`, /invalid Content-Length/],
  ['Transfer-Encoding with Content-Length', `${POST}Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n${SMUGGLED}`, /together with Content-Length/],
  ['Content-Length with Transfer-Encoding', `${POST}Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n${SMUGGLED}`, /together with Content-Length/],
  ['Transfer-Encoding: chunked, identity', `${POST}Transfer-Encoding: chunked, identity\r\n\r\n2\r\n{}\r\n0\r\n\r\n${SMUGGLED}`, /Transfer-Encoding .*not supported/],
  ['Transfer-Encoding: identity, chunked', `${POST}Transfer-Encoding: identity, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n${SMUGGLED}`, /not supported/],
  ['Transfer-Encoding: " xchunked"', `${POST}Transfer-Encoding:  xchunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n${SMUGGLED}`, /not supported/],
  ['Transfer-Encoding: gzip', `${POST}Transfer-Encoding: gzip\r\n\r\n${SMUGGLED}`, /not supported/],
  ['two Transfer-Encoding fields', `${POST}Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n${SMUGGLED}`, /duplicate Transfer-Encoding/],
  ['Transfer-Encoding in HTTP/1.0', `POST /v1/chat/completions HTTP/1.0\r\n${HOST}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n${SMUGGLED}`, /HTTP\/1\.0/],
  ['a chunk size of 17 hex digits', `${POST}Transfer-Encoding: chunked\r\n\r\n10000000000000000\r\n{}\r\n0\r\n\r\n${SMUGGLED}`, /64 bits/],
  ['a chunk size that is not hex', `${POST}Transfer-Encoding: chunked\r\n\r\n2x\r\n{}\r\n0\r\n\r\n${SMUGGLED}`, /chunk size/],
  ['chunk data not followed by CRLF', `${POST}Transfer-Encoding: chunked\r\n\r\n2\r\n{}XX0\r\n\r\n${SMUGGLED}`, /CRLF/],
  ['two Host fields', `GET /v1/models HTTP/1.1\r\n${HOST}\r\nHost: evil.example\r\n\r\n${SMUGGLED}`, /duplicate Host/],
  ['two Origin fields', `GET /v1/models HTTP/1.1\r\n${HOST}\r\nOrigin: http://${U.host}\r\nOrigin: http://evil.example\r\n\r\n${SMUGGLED}`, /duplicate Origin/],
  ['HTTP/1.1 without Host', `GET /v1/models HTTP/1.1\r\n\r\n${SMUGGLED}`, /without a Host/],
  ['a NUL in a header value', `GET /v1/models HTTP/1.1\r\n${HOST}\r\nX-A: a\x00b\r\n\r\n${SMUGGLED}`, /NUL/],
  ['a NUL in the Host value', `GET /v1/models HTTP/1.1\r\n${HOST}\x00.evil.example\r\n\r\n${SMUGGLED}`, /NUL/],
  ['a bare CR in a header value', `GET /v1/models HTTP/1.1\r\n${HOST}\r\nX-A: a\rb\r\n\r\n${SMUGGLED}`, /bare CR/],
  ['a control character in a header value', `GET /v1/models HTTP/1.1\r\n${HOST}\r\nX-A: a\x01b\r\n\r\n${SMUGGLED}`, /control character 0x01/],
  ['DEL in a header value', `GET /v1/models HTTP/1.1\r\n${HOST}\r\nX-A: a\x7fb\r\n\r\n${SMUGGLED}`, /control character 0x7f/],
  ['obs-fold (a continuation line)', `GET /v1/models HTTP/1.1\r\n${HOST}\r\nX-A: a\r\n b\r\n\r\n${SMUGGLED}`, /obs-fold/],
  ['obs-fold of Content-Length', `${POST}Content-Length:\r\n 2\r\n\r\n{}${SMUGGLED}`, /obs-fold/],
  ['a bare LF line end', `GET /v1/models HTTP/1.1\n${HOST}\r\n\r\n${SMUGGLED}`, /bare LF/],
  ['whitespace before the colon', `${POST}Content-Length : 2\r\n\r\n{}${SMUGGLED}`, /whitespace between a header name and ':'/],
  ['a header line without a colon', `GET /v1/models HTTP/1.1\r\n${HOST}\r\nNoColon\r\n\r\n${SMUGGLED}`, /without ':'/],
  ['a malformed request line', `GET  /v1/models HTTP/1.1\r\n${HOST}\r\n\r\n${SMUGGLED}`, /request line/],
];

for (const [name, payload, why] of cases) {
  test(`framing: ${name} -> 400, closed, nothing more answered`, async () => {
    await refused(payload, why);
  });
}

test('framing: a chunk size past --max-body-bytes (ffffffffffffffff) -> 413 at once, closed', async () => {
  // t_server.sh runs the server with --max-body-bytes 1048576
  await refused(`${POST}Transfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n{}\r\n0\r\n\r\n${SMUGGLED}`, /exceeds the limit/, 413);
  await refused(`${POST}Transfer-Encoding: chunked\r\n\r\n100001\r\n{}\r\n0\r\n\r\n${SMUGGLED}`, /exceeds the limit/, 413);
});

test('framing: HTTP/2.0 in a request line -> 505', async () => {
  await refused(`GET /v1/models HTTP/2.0\r\n${HOST}\r\n\r\n${SMUGGLED}`, /not supported/, 505);
});

test('framing: well-formed requests on one connection are all answered (keep-alive, pipelining)', async () => {
  const get = `GET /health HTTP/1.1\r\n${HOST}\r\n\r\n`;
  const r = await exchange(get + get + `GET /v1/models HTTP/1.1\r\n${HOST}\r\nConnection: close\r\n\r\n`);
  assert.deepEqual(statusLines(r.data), ['HTTP/1.1 200', 'HTTP/1.1 200', 'HTTP/1.1 200'], r.data.slice(0, 300));
  assert.ok(r.closed, 'closed after Connection: close');
});

test('framing: a chunked body (extension, trailer, "Chunked") and a leading CRLF are accepted', async () => {
  const t = out('ok');
  const BODY = JSON.stringify({ model: 'deepseek-chat', messages: [{ role: 'user', content: 'hi' }] });
  const chunks = `5;name=value\r\n${BODY.slice(0, 5)}\r\n${(BODY.length - 5).toString(16)}\r\n${BODY.slice(5)}\r\n0\r\nX-Trailer: 1\r\n\r\n`;
  const r = await exchange(`\r\n${POST}Transfer-Encoding: Chunked\r\nX-DS4-Test-Output: ${t['X-DS4-Test-Output']}\r\nConnection: close\r\n\r\n${chunks}`);
  assert.deepEqual(statusLines(r.data), ['HTTP/1.1 200'], r.data.slice(0, 400));
  assert.equal(JSON.parse(r.data.split('\r\n\r\n')[1]).choices[0].message.content, 'ok');
});

test('framing: Expect: 100-continue gets 100 Continue, then the answer', async () => {
  const s = net.connect(Number(U.port), U.hostname);
  let data = '';
  s.on('data', (d) => { data += d.toString(); });
  await new Promise((r) => s.on('connect', r));
  s.write(`${POST}Content-Length: ${BODY.length}\r\nExpect: 100-continue\r\nX-DS4-Test-Output: ${out('yes')['X-DS4-Test-Output']}\r\n\r\n`);
  for (let i = 0; i < 50 && !data.includes('100 Continue'); i++) await new Promise((r) => setTimeout(r, 20));
  assert.match(data, /^HTTP\/1\.1 100 Continue\r\n\r\n/);
  s.write(BODY);
  for (let i = 0; i < 200 && !/HTTP\/1\.1 200/.test(data); i++) await new Promise((r) => setTimeout(r, 20));
  s.destroy();
  assert.match(data, /HTTP\/1\.1 200 OK/);
});

test('framing: an oversize Content-Length with Expect: 100-continue is refused without reading it', async () => {
  const r = await exchange(`${POST}Content-Length: 5000000\r\nExpect: 100-continue\r\n\r\n`);
  assert.deepEqual(statusLines(r.data), ['HTTP/1.1 413'], r.data.slice(0, 300));
  assert.ok(r.closed);
});
