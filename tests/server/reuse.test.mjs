// Live-session reuse and exact DSML replay across turns.  The first turn's
// tool call is sent back by id; the server must render the exact DSML the
// model produced (here deliberately non-canonical: compact JSON that the
// canonical renderer would space out), so the live session is a prefix of
// the new prompt and only the new suffix is evaluated -- checked through
// usage (cached tokens) and /metrics (evaluated tokens, replay counters).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openai, anthropic, out, dsmlBlock, metrics, startServer } from './helpers.mjs';

const client = openai();
const tools = [{
  type: 'function',
  function: {
    name: 'run_shell', description: 'Run a command',
    parameters: { type: 'object', properties: { cmd: { type: 'string' }, env: { type: 'object' } }, required: ['cmd'] },
  },
}];
// {"LANG":"C"} is what the model "sampled"; canonical rendering would give {"LANG": "C"}
const CALL = 'Listing.</think>' + dsmlBlock([{ name: 'run_shell', params: [['cmd', 'ls -la', true], ['env', '{"LANG":"C"}', false]] }]);

const delta = (a, b, k) => b[k] - a[k];

async function turn1(stream) {
  const messages = [{ role: 'system', content: 'You run commands.' }, { role: 'user', content: 'list files' }];
  if (!stream) {
    const r = await client.chat.completions.create({ model: 'ds4', messages, tools }, { headers: out(CALL) });
    return { messages, msg: r.choices[0].message, usage: r.usage };
  }
  const s = await client.chat.completions.create(
    { model: 'ds4', messages, tools, stream: true, stream_options: { include_usage: true } }, { headers: out(CALL) });
  const msg = { role: 'assistant', content: null, tool_calls: [] };
  let usage = null;
  for await (const ch of s) {
    if (ch.usage) usage = ch.usage;
    for (const t of ch.choices[0]?.delta?.tool_calls || []) {
      if (t.id) msg.tool_calls[t.index] = { id: t.id, type: 'function', function: { name: t.function.name, arguments: '' } };
      if (t.function?.arguments) msg.tool_calls[t.index].function.arguments += t.function.arguments;
    }
  }
  return { messages, msg, usage };
}

for (const stream of [false, true]) {
  test(`chat: exact DSML replay by id, only the suffix is evaluated (${stream ? 'streaming' : 'non-streaming'})`, async () => {
    const t1 = await turn1(stream);
    const call = t1.msg.tool_calls[0];
    assert.deepEqual(JSON.parse(call.function.arguments), { cmd: 'ls -la', env: { LANG: 'C' } });
    const m0 = await metrics();
    // the client drops reasoning_content (most do): the server restores it
    const assistant = { role: 'assistant', content: null, tool_calls: t1.msg.tool_calls };
    const messages = [...t1.messages, assistant, { role: 'tool', tool_call_id: call.id, content: 'a.txt b.txt' }];
    const r = await client.chat.completions.create({ model: 'ds4', messages, tools }, { headers: out('Two files.</think>There are two files.') });
    const m1 = await metrics();
    const u = r.usage;
    // everything of turn 1 but its last token (never evaluated: the turn ended there)
    assert.equal(u.prompt_tokens_details.cached_tokens, t1.usage.prompt_tokens + t1.usage.completion_tokens - 1);
    assert.equal(delta(m0, m1, 'ds4_prompt_tokens_evaluated_total'), u.prompt_tokens - u.prompt_tokens_details.cached_tokens);
    assert.ok(u.prompt_tokens - u.prompt_tokens_details.cached_tokens < 40, 'only the new suffix');
    assert.equal(delta(m0, m1, 'ds4_tool_replay_exact_total'), 1);
    assert.equal(delta(m0, m1, 'ds4_session_reuse_hits_total'), 1);
    assert.equal(delta(m0, m1, 'ds4_prompt_tokens_cached_total'), u.prompt_tokens_details.cached_tokens);
    assert.equal(r.choices[0].message.content, 'There are two files.');
  });
}

test('chat: an unknown tool-call id falls back to canonical rendering (no reuse)', async () => {
  const t1 = await turn1(false);
  const forged = t1.msg.tool_calls.map((c) => ({ ...c, id: 'call_000000000000000000000000' }));
  const m0 = await metrics();
  const messages = [...t1.messages, { role: 'assistant', content: null, reasoning_content: 'Listing.', tool_calls: forged },
    { role: 'tool', tool_call_id: forged[0].id, content: 'x' }];
  const r = await client.chat.completions.create({ model: 'ds4', messages, tools }, { headers: out('ok') });
  const m1 = await metrics();
  assert.equal(delta(m0, m1, 'ds4_tool_replay_canonical_total'), 1);
  assert.equal(delta(m0, m1, 'ds4_tool_replay_exact_total'), 0);
  // the canonical {"LANG": "C"} differs from the sampled bytes: the session
  // diverges inside turn 1's answer; the RAM checkpoint at the end of turn
  // 1's prompt is all that is kept
  assert.equal(r.usage.prompt_tokens_details.cached_tokens, t1.usage.prompt_tokens);
  // a changed argument with the right id is not replayed either
  const t2 = await turn1(false);
  const changed = t2.msg.tool_calls.map((c) => ({ ...c, function: { ...c.function, arguments: '{"cmd": "rm -rf /"}' } }));
  const m2 = await metrics();
  await client.chat.completions.create({ model: 'ds4', tools, messages: [...t2.messages,
    { role: 'assistant', content: null, tool_calls: changed }, { role: 'tool', tool_call_id: changed[0].id, content: 'x' }] },
  { headers: out('ok') });
  const m3 = await metrics();
  assert.equal(delta(m2, m3, 'ds4_tool_replay_canonical_total'), 1);
});

test('a different BPE split of the same text still hits the live session', async () => {
  // \x01 forces token boundaries in the test output: "cats" comes out as
  // c|a|t|s, which a fresh tokenization of the next prompt would not choose
  const messages = [{ role: 'user', content: 'Tell me about cats' }];
  const r1 = await client.chat.completions.create({ model: 'deepseek-chat', messages },
    { headers: out('c\x01a\x01t\x01s are\x01 nice an\x01im\x01als') });
  assert.equal(r1.choices[0].message.content, 'cats are nice animals');
  const m0 = await metrics();
  const r2 = await client.chat.completions.create({ model: 'deepseek-chat', messages: [...messages,
    { role: 'assistant', content: 'cats are nice animals' }, { role: 'user', content: 'more' }] }, { headers: out('ok') });
  const m1 = await metrics();
  // all of turn 1 (it ended with EOS, so every emitted token was evaluated)
  assert.equal(r2.usage.prompt_tokens_details.cached_tokens, r1.usage.prompt_tokens + r1.usage.completion_tokens);
  assert.equal(delta(m0, m1, 'ds4_session_reuse_retokenized_total'), 1, 'the split really differed');
  assert.equal(delta(m0, m1, 'ds4_session_reuse_text_total'), 1);
  assert.equal(delta(m0, m1, 'ds4_prompt_tokens_evaluated_total'), r2.usage.prompt_tokens - r2.usage.prompt_tokens_details.cached_tokens);
});

test('anthropic: tool_use id sent back replays the exact DSML', async () => {
  const ac = anthropic();
  const atools = [{ name: 'run_shell', input_schema: tools[0].function.parameters }];
  const messages = [{ role: 'user', content: 'list files' }];
  const first = await ac.messages.create({ model: 'x', max_tokens: 300, tools: atools, messages }, { headers: out(CALL) });
  const tu = first.content.find((b) => b.type === 'tool_use');
  assert.deepEqual(tu.input, { cmd: 'ls -la', env: { LANG: 'C' } });
  const m0 = await metrics();
  // drop the thinking block, like a client that does not keep it
  const m = await ac.messages.create({ model: 'x', max_tokens: 50, tools: atools, messages: [...messages,
    { role: 'assistant', content: [tu] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: tu.id, content: 'a.txt' }] }] }, { headers: out('ok') });
  const m1 = await metrics();
  assert.equal(delta(m0, m1, 'ds4_tool_replay_exact_total'), 1);
  assert.equal(m.usage.cache_read_input_tokens, first.usage.input_tokens + first.usage.cache_read_input_tokens + first.usage.output_tokens - 1);
  assert.ok(m.usage.input_tokens < 40);
});

test('responses: function_call sent back by call_id replays the exact DSML', async () => {
  const rtools = [{ type: 'function', ...tools[0].function }];
  const r = await client.responses.create({ model: 'ds4', input: 'list files', tools: rtools }, { headers: out(CALL) });
  const fc = r.output.find((i) => i.type === 'function_call');
  const m0 = await metrics();
  // only the function_call item (no reasoning item) comes back
  const r2 = await client.responses.create({ model: 'ds4', tools: rtools, input: [{ role: 'user', content: 'list files' },
    fc, { type: 'function_call_output', call_id: fc.call_id, output: 'a.txt' }] }, { headers: out('ok') });
  const m1 = await metrics();
  assert.equal(delta(m0, m1, 'ds4_tool_replay_exact_total'), 1);
  assert.equal(r2.usage.input_tokens_details.cached_tokens, r.usage.input_tokens + r.usage.output_tokens - 1);
});

test('the tool memory is bounded (--tool-memory-max-ids): the oldest id is evicted', async () => {
  const srv = await startServer(['--tool-memory-max-ids', '1', '--test-mode']);
  try {
    const c = openai({ baseURL: `${srv.url}/v1` });
    const ask = (q) => c.chat.completions.create({ model: 'ds4', tools, messages: [{ role: 'user', content: q }] }, { headers: out(CALL) });
    const back = (q, r) => c.chat.completions.create({ model: 'ds4', tools, messages: [{ role: 'user', content: q },
      { role: 'assistant', content: null, tool_calls: r.choices[0].message.tool_calls },
      { role: 'tool', tool_call_id: r.choices[0].message.tool_calls[0].id, content: 'x' }] }, { headers: out('ok') });
    const a = await ask('first');
    const b = await ask('second');
    let m = await metrics(srv.url);
    assert.equal(m.ds4_tool_memory_ids, 1);
    await back('first', a);
    m = await metrics(srv.url);
    assert.equal(m.ds4_tool_replay_canonical_total, 1, 'the first id was evicted');
    await back('second', b);
    m = await metrics(srv.url);
    assert.equal(m.ds4_tool_replay_exact_total, 1, 'the newest id is still known');
  } finally {
    await srv.stop();
  }
});

test('a cut inside a special token is not reused by text (it would turn the marker into text)', async () => {
  // the answer spells the EOS marker in plain-text tokens; with max_tokens
  // equal to its length the last token ("｜>") is never evaluated, so the
  // live session ends inside what a fresh tokenization of the next prompt
  // reads as one special token
  const text = 'Hi <｜end▁of▁sentence\x01｜>';
  const ask = (max) => client.chat.completions.create({ model: 'deepseek-chat', max_tokens: max,
    messages: [{ role: 'user', content: 'marker' }] }, { headers: out(text) });
  const n = (await ask(100)).usage.completion_tokens;
  const r1 = await ask(n);
  assert.equal(r1.choices[0].finish_reason, 'length');
  assert.equal(r1.choices[0].message.content, 'Hi <｜end▁of▁sentence｜>');
  const m0 = await metrics();
  const r2 = await client.chat.completions.create({ model: 'deepseek-chat', messages: [
    { role: 'user', content: 'marker' }, { role: 'assistant', content: r1.choices[0].message.content },
    { role: 'user', content: 'again' }] }, { headers: out('ok') });
  const m1 = await metrics();
  assert.equal(delta(m0, m1, 'ds4_session_reuse_text_total'), 0);
  // none of the answer's tokens: only turn 1's prompt, from its RAM checkpoint
  assert.equal(r2.usage.prompt_tokens_details.cached_tokens, r1.usage.prompt_tokens);
});

// RAM checkpoints: ds4_eval keeps the state at the end of each prompt and 1
// token before it (server/worker.c: REWIND_TAIL), so a retried request and
// the next thinking-mode turn cost only their new tokens.
const REWIND_TAIL = 1;

test('a retried request reuses its whole prompt and gives the same output at temperature 0', async () => {
  const messages = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: `retry me ${Date.now()}` }];
  const req = { model: 'deepseek-chat', messages, temperature: 0, max_tokens: 12 };
  const r1 = await client.chat.completions.create(req);
  const m0 = await metrics();
  const r2 = await client.chat.completions.create(req);
  const m1 = await metrics();
  assert.equal(r2.usage.prompt_tokens, r1.usage.prompt_tokens);
  assert.equal(r2.usage.prompt_tokens_details.cached_tokens, r2.usage.prompt_tokens, 'the whole prompt was reused');
  assert.equal(delta(m0, m1, 'ds4_prompt_tokens_evaluated_total'), 0, 'nothing evaluated');
  assert.equal(r2.choices[0].message.content, r1.choices[0].message.content, 'same greedy output');
  assert.ok(r1.usage.completion_tokens > 0);
  // streaming, and the Anthropic shape report it too
  const s = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let text = '', usage = null;
  for await (const ch of s) { text += ch.choices[0]?.delta?.content || ''; if (ch.usage) usage = ch.usage; }
  assert.equal(text, r1.choices[0].message.content);
  assert.equal(usage.prompt_tokens_details.cached_tokens, usage.prompt_tokens);
  const ac = anthropic();
  const areq = { model: 'deepseek-chat', max_tokens: 12, temperature: 0, system: 'You are terse.',
    messages: [{ role: 'user', content: `retry me too ${Date.now()}` }] };
  const a1 = await ac.messages.create(areq);
  const a2 = await ac.messages.create(areq);
  assert.equal(a2.usage.input_tokens, 0, 'no uncached input on the retry');
  assert.equal(a2.usage.cache_read_input_tokens, a1.usage.input_tokens + a1.usage.cache_read_input_tokens);
  assert.deepEqual(a2.content, a1.content);
});

test('a thinking-mode next turn (reasoning dropped) reuses the first prompt but its last token', async () => {
  const messages = [{ role: 'user', content: `think about this ${Date.now()}` }];
  const r1 = await client.chat.completions.create({ model: 'ds4', messages },
    { headers: out('Some reasoning.</think>The answer.') });
  assert.equal(r1.choices[0].message.reasoning_content, 'Some reasoning.');
  // the next turn renders turn 1 as "<｜Assistant｜></think>The answer.": the
  // prompt diverges at turn 1's final "<think>" token
  const m0 = await metrics();
  const r2 = await client.chat.completions.create({ model: 'ds4', messages: [...messages,
    { role: 'assistant', content: 'The answer.' }, { role: 'user', content: 'and then?' }] }, { headers: out('ok</think>ok') });
  const m1 = await metrics();
  const u = r2.usage;
  assert.equal(u.prompt_tokens_details.cached_tokens, r1.usage.prompt_tokens - REWIND_TAIL);
  assert.equal(delta(m0, m1, 'ds4_prompt_tokens_evaluated_total'), u.prompt_tokens - u.prompt_tokens_details.cached_tokens);
  assert.ok(u.prompt_tokens - u.prompt_tokens_details.cached_tokens < 30, 'only the new turn and a few tokens');
});

// openai-node's stream helper (chat.completions.stream) assigns each
// reasoning_content delta onto the message instead of appending it, so the
// message it hands back carries only the last delta.  Sent back with its
// tool call, that copy differs from what the model wrote only by how the
// deltas were merged (server/toolmem.h defines it): the server renders its
// own remembered reasoning, and the live session stays a prefix.
const REASONING = 'Listing the files of the current directory first.';
const CALL2 = REASONING + '</think>' + dsmlBlock([{ name: 'run_shell', params: [['cmd', 'ls -la', true]] }]);

async function streamTurn(messages) {
  const runner = client.chat.completions.stream(
    { model: 'ds4', messages, tools, stream_options: { include_usage: true } }, { headers: out(CALL2) });
  const deltas = [];
  runner.on('chunk', (ch) => { const r = ch.choices[0]?.delta?.reasoning_content; if (r) deltas.push(r); });
  const final = await runner.finalChatCompletion();
  return { msg: final.choices[0].message, usage: final.usage, deltas };
}

test('reasoning_content mangled by the SDK while merging deltas: the remembered copy is used', async () => {
  const messages = [{ role: 'system', content: 'You run commands.' }, { role: 'user', content: `list ${Date.now()}` }];
  const t1 = await streamTurn(messages);
  assert.ok(t1.deltas.length > 1, 'several reasoning deltas');
  assert.equal(t1.deltas.join(''), REASONING);
  // what the helper produced: the last delta only
  assert.equal(t1.msg.reasoning_content, t1.deltas.at(-1));
  const full = t1.usage.prompt_tokens + t1.usage.completion_tokens - 1;
  const next = (assistant) => client.chat.completions.create({ model: 'ds4', tools, messages: [...messages, assistant,
    { role: 'tool', tool_call_id: t1.msg.tool_calls[0].id, content: 'a.txt' }] }, { headers: out('ok</think>ok') });
  // 1. the SDK's message as it is
  let r = await next(t1.msg);
  assert.equal(r.usage.prompt_tokens_details.cached_tokens, full, 'the live session is a prefix');

  // 2. every delta doubled in place (a proxy that appends each twice)
  const t2 = await streamTurn(messages);
  r = await next({ ...t2.msg, tool_calls: t2.msg.tool_calls, reasoning_content: t2.deltas.map((d) => d + d).join('') });
  assert.equal(r.usage.prompt_tokens_details.cached_tokens, t2.usage.prompt_tokens + t2.usage.completion_tokens - 1);

  // 3. control: an edited reasoning is the client's -- the prompt diverges
  // inside turn 1's answer and only its prompt (RAM checkpoint) is kept
  const t3 = await streamTurn(messages);
  r = await next({ ...t3.msg, reasoning_content: 'I changed this reasoning.' });
  assert.equal(r.usage.prompt_tokens_details.cached_tokens, t3.usage.prompt_tokens);
});
