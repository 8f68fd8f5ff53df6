// Shared helpers of the ds4-server tests.
//
// tests/t_server.sh starts the server under test and passes its address in
// DS4_URL; DS4_SERVER / DS4_MODEL let a test start extra servers (auth,
// CORS, shutdown, startup refusal).  Every request that must produce a known
// output sends X-DS4-Test-Output (the server runs with --test-mode): the
// text is emitted token by token instead of sampling, so reasoning, DSML
// tool calls, usage and session reuse run for real on the random-weight
// tiny model.
import { spawn } from 'node:child_process';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

export const BASE = process.env.DS4_URL || 'http://127.0.0.1:8000';
export const SERVER = process.env.DS4_SERVER || './ds4-server';
export const MODEL = process.env.DS4_MODEL || '../shared/golden/models/tiny-a-q2.gguf';

export const DSML = '｜DSML｜';

// Worker threads of the servers the tests start (tests/run.sh: 2 under ASan).
export const SERVER_THREADS = process.env.DS4_SERVER_THREADS || '1';
// Client timeout: the ASan/UBSan server (tests/run.sh sets DS4_DEBUG_BUILD=1)
// runs ~10x slower, and a 3600-token prefill then outlasts 60 s.
export const CLIENT_TIMEOUT_MS = process.env.DS4_DEBUG_BUILD === '1' ? 600000 : 60000;

export function openai(opts = {}) {
  return new OpenAI({ apiKey: 'unused', baseURL: `${BASE}/v1`, maxRetries: 0, timeout: CLIENT_TIMEOUT_MS, ...opts });
}

export function anthropic(opts = {}) {
  return new Anthropic({ apiKey: 'unused', baseURL: BASE, maxRetries: 0, timeout: CLIENT_TIMEOUT_MS, ...opts });
}

// Header that makes the server emit exactly `text`.
export function out(text) {
  return { 'X-DS4-Test-Output': Buffer.from(text, 'utf8').toString('base64') };
}

// A DSML tool-call block as the model writes it (PROMPT_FORMAT.md 7).
// calls: [{name, params: [[key, text, isString]]}]; `text` goes in verbatim.
export function dsmlBlock(calls) {
  let s = `\n\n<${DSML}tool_calls>\n`;
  for (const c of calls) {
    s += `<${DSML}invoke name="${c.name}">\n`;
    for (const [k, text, isString] of c.params)
      s += `<${DSML}parameter name="${k}" string="${isString ? 'true' : 'false'}">${text}</${DSML}parameter>\n`;
    s += `</${DSML}invoke>\n`;
  }
  return s + `</${DSML}tool_calls>`;
}

export async function metrics(base = BASE, headers = {}) {
  const r = await fetch(`${base}/metrics`, { headers });
  const text = await r.text();
  const m = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    m[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return m;
}

export async function post(path, body, headers = {}, base = BASE) {
  const r = await fetch(`${base}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, json, text, headers: r.headers };
}

// Read an SSE response into [{event, data}] (data parsed when JSON).
export async function sse(res) {
  const text = await res.text();
  const events = [];
  for (const block of text.split('\n\n')) {
    if (!block.trim()) continue;
    let event = null, data = null, comment = false;
    for (const line of block.split('\n')) {
      if (line.startsWith(':')) comment = true;
      else if (line.startsWith('event: ')) event = line.slice(7);
      else if (line.startsWith('data: ')) data = line.slice(6);
    }
    if (comment && data === null) continue;
    let parsed = data;
    try { parsed = JSON.parse(data); } catch { /* [DONE] */ }
    events.push({ event, data: parsed });
  }
  return events;
}

// Start another ds4-server; resolves with {url, proc, log, stop()} once it
// listens (it prints its port: --port 0 picks a free one).
export function startServer(args = [], env = {}) {
  return new Promise((resolve, reject) => {
    const proc = spawn(SERVER, ['-m', MODEL, '--port', '0', '--ctx', '1024', '-t', SERVER_THREADS, ...args], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let log = '';
    const timer = setTimeout(() => { proc.kill('SIGKILL'); reject(new Error(`server did not start:\n${log}`)); }, 30000);
    proc.stderr.on('data', (d) => {
      log += d.toString();
      const m = log.match(/listening on (http:\/\/\S+)/);
      if (m && !proc.started) {
        proc.started = true;
        clearTimeout(timer);
        const url = m[1];
        // 'close' (not 'exit'): stderr is complete, a sanitizer report at exit included
        const exited = new Promise((res) => proc.on('close', (code, sig) => res({ code, sig })));
        resolve({
          url, proc, exited,
          get log() { return log; },
          async stop() { if (proc.exitCode === null) proc.kill('SIGTERM'); return exited; },
        });
      }
    });
    proc.on('exit', (code) => {
      if (!proc.started) { clearTimeout(timer); reject(Object.assign(new Error(`server exited ${code}:\n${log}`), { code, log })); }
    });
  });
}

// Run the server binary to completion (for startup refusals).
export function runServer(args, env = {}) {
  return new Promise((resolve) => {
    const proc = spawn(SERVER, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
    let log = '';
    proc.stderr.on('data', (d) => { log += d.toString(); });
    const timer = setTimeout(() => proc.kill('SIGKILL'), 20000);
    proc.on('exit', (code) => { clearTimeout(timer); resolve({ code, log }); });
  });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
