// OpenAI /v1/responses through the official SDK: reasoning, message and
// function_call output items, the streaming event sequence with
// sequence_number, incomplete responses, function_call_output turns.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openai, out, dsmlBlock, post } from './helpers.mjs';

const client = openai();
const tools = [{
  type: 'function', name: 'read_file', description: 'Read a file',
  parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
}];

test('responses: non-streaming reasoning + message, usage', async () => {
  const r = await client.responses.create(
    { model: 'ds4', instructions: 'Be brief.', input: 'Hello' }, { headers: out('Hmm.</think>Hi there.') });
  assert.equal(r.object, 'response');
  assert.match(r.id, /^resp_/);
  assert.equal(r.status, 'completed');
  assert.equal(r.instructions, 'Be brief.');
  assert.deepEqual(r.output.map((i) => i.type), ['reasoning', 'message']);
  assert.equal(r.output[0].content[0].type, 'reasoning_text');
  assert.equal(r.output[0].content[0].text, 'Hmm.');
  assert.equal(r.output[1].role, 'assistant');
  assert.equal(r.output[1].content[0].type, 'output_text');
  assert.equal(r.output_text, 'Hi there.');
  assert.ok(r.usage.input_tokens > 3);
  assert.ok(r.usage.output_tokens > 3);
  assert.ok(r.usage.output_tokens_details.reasoning_tokens >= 1);
  assert.equal(typeof r.usage.input_tokens_details.cached_tokens, 'number');
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
});

test('responses: reasoning effort none, max_output_tokens -> incomplete', async () => {
  const a = await client.responses.create(
    { model: 'ds4', input: [{ role: 'user', content: 'q' }], reasoning: { effort: 'none' } }, { headers: out('direct') });
  assert.deepEqual(a.output.map((i) => i.type), ['message']);
  assert.equal(a.output_text, 'direct');
  const b = await client.responses.create({ model: 'ds4', input: 'q', reasoning: { effort: 'none' }, max_output_tokens: 3 });
  assert.equal(b.status, 'incomplete');
  assert.equal(b.incomplete_details.reason, 'max_output_tokens');
  assert.equal(b.usage.output_tokens, 3);
});

test('responses: function_call items (non-streaming) and a function_call_output turn', async () => {
  const text = 'Read it.</think>' + dsmlBlock([{ name: 'read_file', params: [['path', '/etc/hostname', true]] }]);
  const r = await client.responses.create({ model: 'ds4', input: 'show the hostname', tools }, { headers: out(text) });
  assert.equal(r.status, 'completed');
  assert.deepEqual(r.output.map((i) => i.type), ['reasoning', 'function_call']);
  const fc = r.output[1];
  assert.equal(fc.name, 'read_file');
  assert.match(fc.call_id, /^call_[0-9A-Za-z]{24}$/);
  assert.match(fc.id, /^fc_/);
  assert.deepEqual(JSON.parse(fc.arguments), { path: '/etc/hostname' });
  // next turn: the client sends its input, the output items, and the result
  const input = [{ role: 'user', content: 'show the hostname' }, ...r.output,
    { type: 'function_call_output', call_id: fc.call_id, output: 'myhost' }];
  const r2 = await client.responses.create({ model: 'ds4', input, tools }, { headers: out('ok.</think>It is myhost.') });
  assert.equal(r2.output_text, 'It is myhost.');
  assert.ok(r2.usage.input_tokens_details.cached_tokens >= r.usage.input_tokens, 'previous turn reused');
});

test('responses: streaming event sequence', async () => {
  const text = 'Reason.</think>Text part.' + dsmlBlock([{ name: 'read_file', params: [['path', '/a/b/c.txt', true]] }]);
  const stream = await client.responses.create({ model: 'ds4', input: 'go', tools, stream: true }, { headers: out(text) });
  const ev = [];
  for await (const e of stream) ev.push(e);
  const types = ev.map((e) => e.type);
  assert.equal(types[0], 'response.created');
  assert.equal(types[1], 'response.in_progress');
  assert.equal(types.at(-1), 'response.completed');
  ev.forEach((e, i) => assert.equal(e.sequence_number, i));
  const added = ev.filter((e) => e.type === 'response.output_item.added').map((e) => [e.output_index, e.item.type]);
  assert.deepEqual(added, [[0, 'reasoning'], [1, 'message'], [2, 'function_call']]);
  assert.equal(ev.filter((e) => e.type === 'response.output_item.done').length, 3);
  const join = (t) => ev.filter((e) => e.type === t).map((e) => e.delta).join('');
  assert.equal(join('response.reasoning_text.delta'), 'Reason.');
  assert.equal(join('response.output_text.delta'), 'Text part.');
  const args = join('response.function_call_arguments.delta');
  assert.deepEqual(JSON.parse(args), { path: '/a/b/c.txt' });
  const done = ev.find((e) => e.type === 'response.function_call_arguments.done');
  assert.equal(done.arguments, args);
  const textDone = ev.find((e) => e.type === 'response.output_text.done');
  assert.equal(textDone.text, 'Text part.');
  assert.ok(types.indexOf('response.content_part.added') < types.indexOf('response.reasoning_text.delta'));
  const fin = ev.at(-1).response;
  assert.equal(fin.status, 'completed');
  assert.deepEqual(fin.output.map((i) => i.type), ['reasoning', 'message', 'function_call']);
  assert.equal(fin.output[2].call_id, added.length && ev.find((e) => e.type === 'response.output_item.added' && e.item.type === 'function_call').item.call_id);
  assert.ok(fin.usage.output_tokens > 5);
});

test('responses: streaming incomplete and errors', async () => {
  const stream = await client.responses.create({ model: 'ds4', input: 'go', stream: true, max_output_tokens: 2 });
  const ev = [];
  for await (const e of stream) ev.push(e);
  assert.equal(ev.at(-1).type, 'response.incomplete');
  assert.equal(ev.at(-1).response.incomplete_details.reason, 'max_output_tokens');
  let r = await post('/v1/responses', { model: 'x', input: 'q', previous_response_id: 'resp_123' });
  assert.equal(r.status, 400);
  assert.equal(r.json.error.param, 'previous_response_id');
  r = await post('/v1/responses', { model: 'x' });
  assert.equal(r.status, 400);
  assert.equal(r.json.error.param, 'input');
  r = await post('/v1/responses', { model: 'x', input: [{ type: 'item_reference', id: 'x' }] });
  assert.equal(r.status, 400);
});
