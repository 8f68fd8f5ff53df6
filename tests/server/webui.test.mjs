// The chat page at "/" (server/webui/index.html) in a real browser: Debian's
// Chromium, headless, driven by playwright-core (no browser download: the
// system one).  Each test starts its own --test-mode servers; the page's
// test hook (localStorage "ds4.testOutput" -> X-DS4-Test-Output) fixes what
// the "model" answers.  Screenshots go to DS4_SHOT_DIR (tests/t_webui.sh
// points it at the test log directory) and their paths are printed.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { existsSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { startServer, metrics, dsmlBlock, sleep } from './helpers.mjs';

const CHROME = process.env.DS4_CHROMIUM ||
  ['/usr/lib/chromium/chromium', '/usr/bin/chromium'].find((p) => existsSync(p));
const SHOTS = process.env.DS4_SHOT_DIR || tmpdir();
// the sanitizer build is ~10x slower
const SLOW = process.env.DS4_DEBUG_BUILD === '1' ? 10 : 1;

let browser;
before(async () => {
  mkdirSync(SHOTS, { recursive: true });
  browser = await chromium.launch({
    executablePath: CHROME,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
});
after(async () => { await browser?.close(); });

// A page on a fresh context (its own localStorage) that records console
// errors, page errors and CSP violations.
async function open(url, viewport = { width: 1100, height: 800 }) {
  const ctx = await browser.newContext({ viewport });
  const page = await ctx.newPage();
  const problems = [];
  page.on('console', (m) => { if (m.type() === 'error') problems.push(m.text()); });
  page.on('pageerror', (e) => problems.push(String(e)));
  const resp = await page.goto(url + '/');
  return { ctx, page, problems, resp };
}

async function shot(page, name) {
  const p = join(SHOTS, `webui-${name}.png`);
  await page.screenshot({ path: p, fullPage: true });
  console.log(`screenshot: ${p}`);
  return p;
}

async function sendMessage(page, text) {
  await page.fill('#input', text);
  await page.press('#input', 'Enter');
}

const lastAssistant = (page) => page.locator('.msg.assistant').last();

test('the page loads under its CSP, names the model and context, and says so with no error', async () => {
  const srv = await startServer(['--test-mode']);
  try {
    const { ctx, page, problems, resp } = await open(srv.url);
    const h = resp.headers();
    assert.match(h['content-type'], /^text\/html; charset=utf-8/);
    assert.match(h['content-security-policy'], /default-src 'none'; style-src 'sha256-[^']+'; script-src 'sha256-[^']+'; connect-src 'self'/);
    assert.equal(h['x-content-type-options'], 'nosniff');
    assert.equal(h['referrer-policy'], 'no-referrer');
    assert.equal(h['cache-control'], 'no-cache');
    assert.match(h.etag, /^"[0-9a-f]{16}"$/);
    await page.waitForFunction(() => /context 1024 tokens/.test(document.getElementById('info').textContent));
    const info = await page.textContent('#info');
    const health = await (await fetch(`${srv.url}/health`)).json();
    assert.ok(info.includes(health.model), info);
    // the script ran (it fills #info): the CSP hashes match the page
    assert.deepEqual(problems, []);
    // a reload with the ETag is a 304
    const again = await new Promise((res) => {
      const u = new URL(srv.url);
      http.get({ host: u.hostname, port: u.port, path: '/', headers: { 'If-None-Match': h.etag } },
               (r) => { r.resume(); r.on('end', () => res(r.statusCode)); });
    });
    assert.equal(again, 304);
    // a foreign Host (DNS rebinding) gets no page, as the API gets no answer
    const foreign = await new Promise((res) => {
      const u = new URL(srv.url);
      http.get({ host: u.hostname, port: u.port, path: '/', headers: { Host: 'rebind.example' } },
               (r) => { r.resume(); r.on('end', () => res(r.statusCode)); });
    });
    assert.equal(foreign, 403);
    await ctx.close();
  } finally {
    await srv.stop();
  }
});

test('an answer streams in: reasoning folded, content with a code block, a tool call, usage', async () => {
  const srv = await startServer(['--test-mode']);
  try {
    const { ctx, page, problems } = await open(srv.url);
    // tools from Settings, so that the server parses the DSML block
    await page.click('#settings summary');
    await page.fill('#tools', JSON.stringify([{ type: 'function', function: { name: 'get_weather',
      description: 'Weather of a city', parameters: { type: 'object', properties: { city: { type: 'string' } },
      required: ['city'] } } }]));
    await page.dispatchEvent('#tools', 'change');
    await page.click('#settings summary');
    const answer = 'Let me check the weather.</think>Here is some code:\n```c\nint x = 1;\n```\nAnd the weather:' +
      dsmlBlock([{ name: 'get_weather', params: [['city', 'Paris', true]] }]);
    await page.evaluate((t) => localStorage.setItem('ds4.testOutput', t), answer);
    await sendMessage(page, 'What is the weather in Paris?');
    const a = lastAssistant(page);
    await a.locator('.usage', { hasText: 'finish:' }).waitFor({ timeout: 30000 * SLOW });
    // the reasoning is there, folded
    const d = a.locator('details.reasoning');
    assert.equal(await d.evaluate((e) => e.open), false);
    assert.equal(await d.locator('.rtext').textContent(), 'Let me check the weather.');
    assert.match(await d.locator('summary').textContent(), /Reasoning \(25 characters\)/);
    // content as text, the fence as a code block (never HTML)
    assert.match(await a.locator('.body').textContent(), /Here is some code:/);
    assert.equal(await a.locator('.body pre code').textContent(), 'int x = 1;\n');
    // the tool call as a block
    assert.match(await a.locator('.tool .name').textContent(), /tool call: get_weather/);
    assert.deepEqual(JSON.parse(await a.locator('.tool pre').textContent()), { city: 'Paris' });
    const usage = await a.locator('.usage').textContent();
    assert.match(usage, /\d+ prompt tokens · \d+ generated · [\d.]+ tok\/s · finish: tool_calls/);
    // the user's turn and the conversation's title
    assert.equal(await page.locator('.msg.user .body').textContent(), 'What is the weather in Paris?');
    assert.match(await page.locator('#convs li.cur span').textContent(), /What is the weather in Paris/);
    // model text with markup stays text
    await page.evaluate(() => localStorage.setItem('ds4.testOutput', 'ok</think><img src=x onerror="window.pwned=1"><b>bold</b>'));
    await sendMessage(page, 'markup?');
    await lastAssistant(page).locator('.usage', { hasText: 'finish:' }).waitFor({ timeout: 30000 * SLOW });
    assert.equal(await lastAssistant(page).locator('.body').textContent(), '<img src=x onerror="window.pwned=1"><b>bold</b>');
    assert.equal(await page.evaluate(() => window.pwned), undefined);
    assert.equal(await lastAssistant(page).locator('.body img').count(), 0);
    await shot(page, 'answer');
    assert.deepEqual(problems, []);
    await ctx.close();
  } finally {
    await srv.stop();
  }
});

test('Stop ends a long answer, and the server cancels the generation', async () => {
  // long enough that a quiet machine is still generating when Stop is
  // pressed (6000 tokens could end before the first render); the forced
  // text travels in a header, hence the larger header room
  const srv = await startServer(['--test-mode', '--ctx', '32768', '--max-header-bytes', '1048576']);
  try {
    const { ctx, page } = await open(srv.url);
    const key = 'ds4_cancelled_total{reason="client_disconnect"}';
    const m0 = await metrics(srv.url);
    await page.evaluate(() => localStorage.setItem('ds4.testOutput', 'thinking</think>' + 'word '.repeat(24000)));
    await sendMessage(page, 'a long one');
    const a = lastAssistant(page);
    await page.waitForFunction(() => {
      const b = [...document.querySelectorAll('.msg.assistant .body')].pop();
      return b && b.textContent.length > 20;
    }, null, { timeout: 30000 * SLOW });
    assert.equal(await page.isVisible('#stop'), true);
    assert.equal(await page.isVisible('#send'), false);
    await page.click('#stop');
    await a.locator('.usage', { hasText: 'stopped' }).waitFor({ timeout: 10000 * SLOW });
    assert.equal(await page.isVisible('#send'), true);
    const got = (await a.locator('.body').textContent()).length;
    assert.ok(got < 'word '.repeat(6000).length, `stopped before the end (${got} characters)`);
    let m1 = await metrics(srv.url);
    for (let i = 0; i < 100 && (m1[key] || 0) <= (m0[key] || 0); i++) { await sleep(100); m1 = await metrics(srv.url); }
    assert.equal((m1[key] || 0) - (m0[key] || 0), 1, 'the server cancelled the job');
    await shot(page, 'stopped');
    await ctx.close();
  } finally {
    await srv.stop();
  }
});

test('conversations live in the browser: reload, switch, rename, delete', async () => {
  const srv = await startServer(['--test-mode']);
  try {
    const { ctx, page } = await open(srv.url);
    await page.evaluate(() => localStorage.setItem('ds4.testOutput', 'hm</think>first answer'));
    await sendMessage(page, 'first question');
    await lastAssistant(page).locator('.usage', { hasText: 'finish:' }).waitFor({ timeout: 30000 * SLOW });
    // a follow-up sends the history: the server keeps the cached prefix
    await page.evaluate(() => localStorage.setItem('ds4.testOutput', 'hm</think>follow-up answer'));
    await sendMessage(page, 'and then?');
    await lastAssistant(page).locator('.usage', { hasText: 'finish:' }).waitFor({ timeout: 30000 * SLOW });
    assert.match(await lastAssistant(page).locator('.usage').textContent(), /\(\d+ cached\)/);
    assert.equal(await page.locator('.msg').count(), 4);
    await page.click('#new');
    await page.evaluate(() => localStorage.setItem('ds4.testOutput', 'hm</think>second answer'));
    await sendMessage(page, 'second question');
    await lastAssistant(page).locator('.usage', { hasText: 'finish:' }).waitFor({ timeout: 30000 * SLOW });
    await page.reload();
    const items = page.locator('#convs li');
    assert.equal(await items.count(), 2);
    assert.match(await page.locator('#convs li.cur span').textContent(), /second question/);
    assert.equal(await lastAssistant(page).locator('.body').textContent(), 'second answer');
    // switch
    await page.locator('#convs li', { hasText: 'first question' }).locator('span').click();
    assert.equal(await lastAssistant(page).locator('.body').textContent(), 'follow-up answer');
    // rename
    await page.locator('#convs li.cur .rename').click();
    await page.fill('#convs li.cur input', 'Renamed');
    await page.press('#convs li.cur input', 'Enter');
    assert.equal(await page.locator('#convs li.cur span').textContent(), 'Renamed');
    assert.equal(await page.textContent('#title'), 'Renamed');
    // delete
    await page.locator('#convs li', { hasText: 'second question' }).locator('.delete').click();
    assert.equal(await items.count(), 1);
    await page.reload();
    assert.equal(await items.count(), 1);
    assert.equal(await page.locator('#convs li span').textContent(), 'Renamed');
    await ctx.close();
  } finally {
    await srv.stop();
  }
});

test('a server with an API key: the page asks for it, then answers; a narrow screen', async () => {
  const srv = await startServer(['--test-mode', '--api-key', 'k3y']);
  try {
    const { ctx, page, problems } = await open(srv.url, { width: 390, height: 780 });
    await page.locator('#keybox').waitFor({ state: 'visible', timeout: 10000 * SLOW });
    await page.evaluate(() => localStorage.setItem('ds4.testOutput', 'sure</think>keyed answer'));
    await sendMessage(page, 'hello');
    // the 401 keeps the question; a wrong key asks again, the right one answers it
    await page.fill('#key', 'wrong');
    await page.click('#keybox button');
    await page.locator('#keybox').waitFor({ state: 'visible', timeout: 10000 * SLOW });
    await page.fill('#key', 'k3y');
    await page.click('#keybox button');
    await lastAssistant(page).locator('.usage', { hasText: 'finish:' }).waitFor({ timeout: 30000 * SLOW });
    assert.equal(await lastAssistant(page).locator('.body').textContent(), 'keyed answer');
    assert.equal(await page.locator('.msg.user').count(), 1, 'asked once');
    assert.equal(await page.evaluate(() => sessionStorage.getItem('ds4.apiKey')), 'k3y');
    assert.equal(await page.evaluate(() => localStorage.getItem('ds4.apiKey')), null, 'the key is not left on disk');
    // narrow: the conversation list is behind the menu button
    assert.equal(await page.isVisible('#menu'), true);
    await shot(page, 'narrow');
    assert.deepEqual(problems.filter((p) => !/401/.test(p)), []);
    await ctx.close();
  } finally {
    await srv.stop();
  }
});
