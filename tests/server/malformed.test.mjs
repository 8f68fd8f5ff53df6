// A tool call the model writes badly (malformed DSML) comes back as visible
// text plus an error-shaped finish, in every API's stream and non-stream
// shape -- never an empty answer, never a call whose arguments stop half
// way.  --test-mode makes the "model" write exactly the bytes below.
// Completions (/v1/completions) never parse tools: not applicable.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openai, anthropic, out, post, sse, DSML, BASE } from './helpers.mjs';

const tools = [{
  type: 'function',
  function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
}];
const atools = [{ name: 'get_weather', input_schema: tools[0].function.parameters }];
const rtools = [{ type: 'function', name: 'get_weather', parameters: tools[0].function.parameters }];

const BEFORE = 'Let me check.';
// a parameter closes, then garbage where </invoke> or <parameter> must be
const BAD = `\n\n<${DSML}tool_calls>\n<${DSML}invoke name="get_weather">\n` +
  `<${DSML}parameter name="city" string="true">Paris</${DSML}parameter>\n<${DSML}bogus>`;
const OUT = out('Weather?</think>' + BEFORE + BAD);
// one good call, then a bad one: the good call stays a call
const GOOD = `\n\n<${DSML}tool_calls>\n<${DSML}invoke name="get_weather">\n` +
  `<${DSML}parameter name="city" string="true">Rome</${DSML}parameter>\n</${DSML}invoke>\n`;
const MIXED = out('Weather?</think>' + GOOD + `<${DSML}invoke name="get_weather">\n<${DSML}oops`);

// The visible text holds the text before the block and the block's text up
// to where it went wrong.
function checkText(text) {
  assert.ok(text.startsWith(BEFORE + `\n\n<${DSML}tool_calls>\n<${DSML}invoke name="get_weather">`), text);
  assert.ok(text.includes('Paris'), text);
}

test('openai chat, non-streaming: content + finish_reason "error" with an error object', async () => {
  const r = await post('/v1/chat/completions', { model: 'x', messages: [{ role: 'user', content: 'w' }], tools }, OUT);
  assert.equal(r.status, 200);
  const c = r.json.choices[0];
  checkText(c.message.content);
  assert.equal(c.message.tool_calls, undefined);
  assert.equal(c.finish_reason, 'error');
  assert.equal(r.json.error.code, 'malformed_tool_call');
  assert.match(r.json.error.message, /malformed tool call/);
  assert.equal(c.message.reasoning_content, 'Weather?');
});

test('openai chat, streaming: text deltas, no tool-call deltas, then the SDK raises the error', async () => {
  const stream = await openai().chat.completions.create(
    { model: 'x', messages: [{ role: 'user', content: 'w' }], tools, stream: true }, { headers: OUT });
  let text = '', toolDeltas = 0, error = null;
  try {
    for await (const ch of stream) {
      text += ch.choices[0]?.delta?.content || '';
      toolDeltas += (ch.choices[0]?.delta?.tool_calls || []).length;
    }
  } catch (e) { error = e; }
  checkText(text);
  assert.equal(toolDeltas, 0, 'no half call');
  assert.equal(error?.code, 'malformed_tool_call');
  // the raw stream: last chunk carries finish_reason "error", then [DONE]
  const res = await fetch(`${BASE}/v1/chat/completions`, { method: 'POST',
    headers: { 'content-type': 'application/json', ...OUT },
    body: JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'w' }], tools, stream: true }) });
  const ev = await sse(res);
  assert.equal(ev.at(-1).data, '[DONE]');
  const last = ev.at(-2).data;
  assert.equal(last.choices[0].finish_reason, 'error');
  assert.equal(last.error.type, 'invalid_tool_call');
});

test('openai chat: a good call before the bad one stays a call, sent whole', async () => {
  const r = await post('/v1/chat/completions', { model: 'x', messages: [{ role: 'user', content: 'w' }], tools }, MIXED);
  const c = r.json.choices[0];
  assert.equal(c.finish_reason, 'error');
  assert.equal(c.message.tool_calls.length, 1);
  assert.deepEqual(JSON.parse(c.message.tool_calls[0].function.arguments), { city: 'Rome' });
  assert.ok(c.message.content.startsWith(`<${DSML}invoke name="get_weather">`), c.message.content);
  const res = await fetch(`${BASE}/v1/chat/completions`, { method: 'POST',
    headers: { 'content-type': 'application/json', ...MIXED },
    body: JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'w' }], tools, stream: true }) });
  const ev = await sse(res);
  const args = ev.flatMap((e) => e.data?.choices?.[0]?.delta?.tool_calls || []).map((t) => t.function?.arguments || '').join('');
  assert.deepEqual(JSON.parse(args), { city: 'Rome' });
});

test('responses: the message item holds the text; status failed (non-streaming and streaming)', async () => {
  const body = { model: 'x', input: 'w', tools: rtools };
  const r = await post('/v1/responses', body, OUT);
  assert.equal(r.status, 200);
  assert.equal(r.json.status, 'failed');
  assert.equal(r.json.error.code, 'malformed_tool_call');
  const msg = r.json.output.find((o) => o.type === 'message');
  checkText(msg.content[0].text);
  assert.equal(r.json.output.filter((o) => o.type === 'function_call').length, 0);
  const res = await fetch(`${BASE}/v1/responses`, { method: 'POST',
    headers: { 'content-type': 'application/json', ...OUT }, body: JSON.stringify({ ...body, stream: true }) });
  const ev = await sse(res);
  const types = ev.map((e) => e.data.type);
  assert.ok(!types.includes('response.function_call_arguments.delta'), 'no half call');
  checkText(ev.filter((e) => e.data.type === 'response.output_text.delta').map((e) => e.data.delta).join(''));
  assert.equal(types.at(-1), 'response.failed');
  assert.equal(ev.at(-1).data.response.error.code, 'malformed_tool_call');
  checkText(ev.at(-1).data.response.output.find((o) => o.type === 'message').content[0].text);
});

test('anthropic: streaming text block then an error event; non-streaming api_error carrying the text', async () => {
  const body = { model: 'x', max_tokens: 200, tools: atools, messages: [{ role: 'user', content: 'w' }] };
  const res = await fetch(`${BASE}/v1/messages`, { method: 'POST',
    headers: { 'content-type': 'application/json', ...OUT }, body: JSON.stringify({ ...body, stream: true }) });
  const ev = await sse(res);
  const kinds = ev.map((e) => e.event);
  assert.ok(!ev.some((e) => e.data?.delta?.type === 'input_json_delta'), 'no half call');
  assert.ok(!ev.some((e) => e.data?.content_block?.type === 'tool_use'), 'no tool_use block');
  checkText(ev.filter((e) => e.data?.delta?.type === 'text_delta').map((e) => e.data.delta.text).join(''));
  assert.equal(kinds.at(-1), 'error');
  assert.equal(ev.at(-1).data.error.type, 'api_error');
  assert.match(ev.at(-1).data.error.message, /malformed tool call/);
  // the SDK delivers the text, then raises
  let text = '', error = null;
  try {
    const s = anthropic().messages.stream(body, { headers: OUT });
    for await (const e of s) if (e.type === 'content_block_delta' && e.delta.type === 'text_delta') text += e.delta.text;
  } catch (e) { error = e; }
  checkText(text);
  assert.ok(error, 'the stream ended in an error');
  const r = await post('/v1/messages', body, OUT);
  assert.equal(r.status, 500);
  assert.equal(r.json.type, 'error');
  assert.equal(r.json.error.type, 'api_error');
  assert.ok(r.json.error.message.includes(BEFORE + `\n\n<${DSML}tool_calls>`), r.json.error.message);
});

test('a block cut by max_tokens is text with finish_reason length, not a half call', async () => {
  const r = await post('/v1/chat/completions', { model: 'x', messages: [{ role: 'user', content: 'w' }], tools, max_tokens: 20 },
    out('Weather?</think>' + GOOD));
  const c = r.json.choices[0];
  assert.equal(c.finish_reason, 'length');
  assert.equal(c.message.tool_calls, undefined);
  assert.ok(c.message.content.startsWith(`\n\n<${DSML}tool_calls>`), c.message.content);
});

test('responses stream: text, a good call, then the bad call\'s text: items with distinct ids', async () => {
  const o = out('Weather?</think>' + BEFORE + GOOD + `<${DSML}invoke name="get_weather">\n<${DSML}oops`);
  const res = await fetch(`${BASE}/v1/responses`, { method: 'POST',
    headers: { 'content-type': 'application/json', ...o }, body: JSON.stringify({ model: 'x', input: 'w', tools: rtools, stream: true }) });
  const ev = await sse(res);
  const added = ev.filter((e) => e.data.type === 'response.output_item.added').map((e) => e.data.item);
  assert.deepEqual(added.map((i) => i.type), ['reasoning', 'message', 'function_call', 'message']);
  const ids = added.map((i) => i.id);
  assert.equal(new Set(ids).size, ids.length, `distinct item ids: ${ids}`);
  assert.equal(ev.at(-1).data.type, 'response.failed');
});
