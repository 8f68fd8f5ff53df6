// Time to first token of a long prompt on ds4-server: evaluated from
// scratch (no cache, and a first request that writes the cold checkpoint)
// vs. resumed from the disk KV cache by a freshly started server.  Not a
// test (not run by CI): docs/perf/kvcache.md quotes its numbers.
//
//   node tests/server/ttft.mjs            (from the repository root)
//
// Environment: DS4_SERVER (default ./ds4-server), DS4_MODEL (the tiny
// model), TTFT_WORDS (prompt length in filler words, default 1170: ~3000
// tokens of the tiny model's vocabulary), TTFT_REPS (default 3),
// TTFT_ARGS (extra server flags, e.g. "-t 2"), TTFT_KV_ARGS (cache knobs;
// default: the server's defaults).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer } from './helpers.mjs';

const WORDS = Number(process.env.TTFT_WORDS || 1170);
const REPS = Number(process.env.TTFT_REPS || 3);
const EXTRA = (process.env.TTFT_ARGS || '').split(' ').filter(Boolean);
const KV = (process.env.TTFT_KV_ARGS || '').split(' ').filter(Boolean);
const W = ('river stone garden window silver morning quiet market bridge letter harbor ' +
  'mountain pencil orange thunder candle meadow violin lantern compass').split(' ');

function prompt(seed) {
  let x = seed * 2654435761 % 4294967296 || 1;
  const w = [];
  for (let i = 0; i < WORDS; i++) {
    x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0;
    w.push(W[x % W.length]);
  }
  return w.join(' ');
}

// One streaming chat request: seconds to the first delta, and the usage.
async function ttft(url, p) {
  const t0 = performance.now();
  const r = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'ds4', temperature: 0, max_tokens: 16, stream: true,
      stream_options: { include_usage: true }, messages: [{ role: 'user', content: p }] }),
  });
  const dec = new TextDecoder();
  let first = 0, buf = '', usage = null;
  for await (const chunk of r.body) {
    buf += dec.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
      const o = JSON.parse(ev.slice(6));
      const d = o.choices?.[0]?.delta;
      if (!first && d && (d.content || d.reasoning_content)) first = performance.now();
      if (o.usage) usage = o.usage;
    }
  }
  return { s: (first - t0) / 1000, prompt: usage.prompt_tokens, cached: usage.prompt_tokens_details.cached_tokens };
}

const median = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
const rows = { none: [], miss: [], hit: [] };
let info = null, saveLine = '', loadLine = '';
for (let rep = 0; rep < REPS; rep++) {
  const p = prompt(1000 + rep);
  const plain = await startServer(['--ctx', '8192', ...EXTRA]);
  rows.none.push((await ttft(plain.url, p)).s);
  await plain.stop();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ds4-ttft-'));
  const a = await startServer(['--ctx', '8192', '--kv-disk-dir', dir, ...KV, ...EXTRA]);
  rows.miss.push((await ttft(a.url, p)).s);
  await a.stop();
  saveLine = (a.log.match(/saved \d+ tokens \(cold\).*/) || [''])[0];
  const b = await startServer(['--ctx', '8192', '--kv-disk-dir', dir, ...KV, ...EXTRA]);
  const h = await ttft(b.url, p);
  rows.hit.push(h.s);
  info = h;
  await b.stop();
  loadLine = (b.log.match(/restored \d+ tokens.*/) || [''])[0];
  fs.rmSync(dir, { recursive: true, force: true });
}
console.log(`prompt ${info.prompt} tokens; disk hit restores ${info.cached} (median of ${REPS})`);
console.log(`last run: ${saveLine}; ${loadLine}`);
console.log(`TTFT no cache            ${(median(rows.none) * 1000).toFixed(0)} ms`);
console.log(`TTFT miss (+cold save)   ${(median(rows.miss) * 1000).toFixed(0)} ms`);
console.log(`TTFT disk hit (restart)  ${(median(rows.hit) * 1000).toFixed(0)} ms`);
