// The queue is ordered by arrival -- when a request's first bytes came --
// not by when its body finished arriving and was parsed: a large body that
// trickles in keeps its place ahead of a request that came later but was
// parsed first.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { BASE, out, post, metrics, sleep } from './helpers.mjs';

// POST with the headers now and the body in `pieces` parts, `gap` ms apart;
// resolves with the raw response once the server closes.  onFirst runs when
// the first response bytes come (the close itself may come later than a
// response on another connection that was written after this one).
function slowPost(path, body, headers, pieces, gap, onFirst = () => {}) {
  const u = new URL(BASE);
  const buf = Buffer.from(body);
  return new Promise((resolve) => {
    const s = net.connect(Number(u.port), u.hostname);
    let data = '';
    s.on('data', (d) => { if (!data) onFirst(); data += d.toString(); });
    s.on('error', () => {});
    s.on('close', () => resolve(data));
    s.on('connect', async () => {
      let head = `POST ${path} HTTP/1.1\r\nHost: ${u.host}\r\nConnection: close\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${buf.length}\r\n`;
      for (const [k, v] of Object.entries(headers)) head += `${k}: ${v}\r\n`;
      s.write(head + '\r\n');
      const step = Math.ceil(buf.length / pieces);
      for (let i = 0; i < buf.length; i += step) {
        await sleep(gap);
        s.write(buf.subarray(i, i + step));
      }
    });
  });
}

test('the queue is ordered by arrival: a slowly sent body keeps its place', async () => {
  const ac = new AbortController();
  // a long generation keeps the worker busy while both requests queue
  // (a forced answer: a sampled one could meet an end token early)
  const blocker = fetch(`${BASE}/v1/chat/completions`, {
    method: 'POST', signal: ac.signal, headers: { 'content-type': 'application/json', ...out('lorem '.repeat(4000)) },
    body: JSON.stringify({ messages: [{ role: 'user', content: 'lorem ipsum '.repeat(200) }], max_tokens: 3000 }),
  }).then((r) => r.text()).catch(() => null);
  await sleep(200);
  const order = [];
  // A arrives first, its body (padded to ~40 KB by a field the server
  // ignores) takes ~1 s to come
  const bodyA = JSON.stringify({ model: 'deepseek-chat', messages: [{ role: 'user', content: 'slow' }],
    metadata_padding: 'x'.repeat(40000) });
  const a = slowPost('/v1/chat/completions', bodyA, out('A'), 10, 100, () => order.push('A'));
  await sleep(150);
  // B arrives later but is complete at once: parsed and queued first.  Its
  // answer is long, so if A is served first, B's answer ends well after A's
  // began to come (a margin against a loaded machine's scheduling).
  const longB = 'B '.repeat(300);
  const b = post('/v1/chat/completions', { model: 'deepseek-chat', messages: [{ role: 'user', content: 'fast' }] }, out(longB))
    .then((r) => { order.push('B'); return r; });
  // both queued behind the blocker
  const t0 = Date.now();
  let m;
  do { await sleep(50); m = await metrics(); } while (m.ds4_queue_depth < 2 && Date.now() - t0 < 5000);
  assert.equal(m.ds4_queue_depth, 2, 'both requests are queued');
  ac.abort();
  const [ra, rb] = await Promise.all([a, b, blocker]);
  assert.match(ra, /^HTTP\/1\.1 200/);
  assert.ok(ra.includes('"content":"A"'), ra.slice(-300));
  assert.equal(rb.json.choices[0].message.content, longB);
  assert.deepEqual(order, ['A', 'B'], 'served in arrival order');
});
