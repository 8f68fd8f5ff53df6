// Anthropic /v1/messages through the official SDK: message shape, thinking
// blocks, text, tool_use blocks (DSML in -> tool_use out), streaming event
// sequence, stop_sequences, count_tokens, errors.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { anthropic, out, dsmlBlock, post, sse, BASE } from './helpers.mjs';

const client = anthropic();
const tools = [{
  name: 'run_shell', description: 'Run a shell command',
  input_schema: { type: 'object', properties: { cmd: { type: 'string' }, timeout_s: { type: 'number' } }, required: ['cmd'] },
}];

test('messages: non-streaming thinking + text, usage', async () => {
  const m = await client.messages.create(
    { model: 'claude-x', max_tokens: 64, system: 'Be brief.', messages: [{ role: 'user', content: 'Hello' }] },
    { headers: out('Greeting.</think>Hi!') });
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.match(m.id, /^msg_/);
  assert.equal(m.model, 'claude-x');
  assert.equal(m.stop_reason, 'end_turn');
  assert.equal(m.stop_sequence, null);
  assert.deepEqual(m.content.map((b) => b.type), ['thinking', 'text']);
  assert.equal(m.content[0].thinking, 'Greeting.');
  assert.equal(m.content[1].text, 'Hi!');
  assert.ok(m.usage.input_tokens > 3);
  assert.ok(m.usage.output_tokens >= 3);
  assert.equal(typeof m.usage.cache_read_input_tokens, 'number');
});

test('messages: thinking disabled gives a text block only', async () => {
  const m = await client.messages.create(
    { model: 'x', max_tokens: 64, thinking: { type: 'disabled' }, messages: [{ role: 'user', content: [{ type: 'text', text: 'Hello' }] }] },
    { headers: out('plain') });
  assert.deepEqual(m.content, [{ type: 'text', text: 'plain' }]);
});

test('messages: max_tokens and stop_sequences', async () => {
  const a = await client.messages.create({
    model: 'x', max_tokens: 3, thinking: { type: 'disabled' }, messages: [{ role: 'user', content: 'long' }],
  });
  assert.equal(a.stop_reason, 'max_tokens');
  assert.equal(a.usage.output_tokens, 3);
  const b = await client.messages.create(
    { model: 'x', max_tokens: 50, thinking: { type: 'disabled' }, stop_sequences: ['STOP'], messages: [{ role: 'user', content: 'q' }] },
    { headers: out('before STOP after') });
  assert.equal(b.stop_reason, 'stop_sequence');
  assert.equal(b.stop_sequence, 'STOP');
  assert.equal(b.content[0].text, 'before ');
});

test('messages: tool_use blocks (non-streaming)', async () => {
  const text = 'I will run it.</think>Running.' + dsmlBlock([
    { name: 'run_shell', params: [['cmd', 'ls -la /tmp', true], ['timeout_s', '2.5', false]] }]);
  const m = await client.messages.create(
    { model: 'x', max_tokens: 200, tools, messages: [{ role: 'user', content: 'list /tmp' }] }, { headers: out(text) });
  assert.equal(m.stop_reason, 'tool_use');
  assert.deepEqual(m.content.map((b) => b.type), ['thinking', 'text', 'tool_use']);
  const tu = m.content[2];
  assert.match(tu.id, /^toolu_[0-9A-Za-z]{24}$/);
  assert.equal(tu.name, 'run_shell');
  assert.deepEqual(tu.input, { cmd: 'ls -la /tmp', timeout_s: 2.5 });
});

test('messages: streaming event sequence with thinking, text and tool_use', async () => {
  const text = 'Plan.</think>Ok.' + dsmlBlock([{ name: 'run_shell', params: [['cmd', 'echo hello world', true]] }]);
  const r = await fetch(`${BASE}/v1/messages`, {
    method: 'POST', headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01', ...out(text) },
    body: JSON.stringify({ model: 'x', max_tokens: 200, tools, stream: true, messages: [{ role: 'user', content: 'go' }] }),
  });
  const ev = await sse(r);
  const names = ev.map((e) => e.event);
  for (const e of ev) assert.equal(e.event, e.data.type, 'event name = data.type');
  assert.equal(names[0], 'message_start');
  assert.equal(names[1], 'ping');
  assert.equal(names.at(-1), 'message_stop');
  assert.equal(names.at(-2), 'message_delta');
  const starts = ev.filter((e) => e.event === 'content_block_start').map((e) => [e.data.index, e.data.content_block.type]);
  assert.deepEqual(starts, [[0, 'thinking'], [1, 'text'], [2, 'tool_use']]);
  assert.equal(ev.filter((e) => e.event === 'content_block_stop').length, 3);
  const deltas = (t) => ev.filter((e) => e.event === 'content_block_delta' && e.data.delta.type === t);
  assert.equal(deltas('thinking_delta').map((e) => e.data.delta.thinking).join(''), 'Plan.');
  assert.equal(deltas('text_delta').map((e) => e.data.delta.text).join(''), 'Ok.');
  const json = deltas('input_json_delta').map((e) => e.data.delta.partial_json).join('');
  assert.deepEqual(JSON.parse(json), { cmd: 'echo hello world' });
  assert.ok(deltas('input_json_delta').length > 1);
  const md = ev.at(-2).data;
  assert.equal(md.delta.stop_reason, 'tool_use');
  assert.ok(md.usage.output_tokens > 5);
  assert.equal(ev[0].data.message.usage.output_tokens, 0);
});

test('messages: SDK stream helper assembles the final message', async () => {
  const text = 'Thinking here.</think>Final text.' + dsmlBlock([{ name: 'run_shell', params: [['cmd', 'pwd', true]] }]);
  const stream = client.messages.stream(
    { model: 'x', max_tokens: 200, tools, messages: [{ role: 'user', content: 'go' }] }, { headers: out(text) });
  let textSeen = '';
  stream.on('text', (t) => { textSeen += t; });
  const m = await stream.finalMessage();
  assert.equal(textSeen, 'Final text.');
  assert.equal(m.stop_reason, 'tool_use');
  assert.equal(m.content[0].type, 'thinking');
  assert.equal(m.content[0].thinking, 'Thinking here.');
  assert.deepEqual(m.content[2].input, { cmd: 'pwd' });
});

test('messages: tool_result turns and count_tokens', async () => {
  const first = await client.messages.create(
    { model: 'x', max_tokens: 200, tools, messages: [{ role: 'user', content: 'run pwd' }] },
    { headers: out('r.</think>' + dsmlBlock([{ name: 'run_shell', params: [['cmd', 'pwd', true]] }])) });
  const tu = first.content.find((b) => b.type === 'tool_use');
  const messages = [
    { role: 'user', content: 'run pwd' },
    { role: 'assistant', content: first.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: tu.id, content: '/home/user' }, { type: 'text', text: 'thanks' }] },
  ];
  const m = await client.messages.create({ model: 'x', max_tokens: 50, tools, messages }, { headers: out('done.</think>The directory is /home/user.') });
  assert.equal(m.content.at(-1).text, 'The directory is /home/user.');
  const ct = await client.messages.countTokens({ model: 'x', tools, messages });
  // the live-session tokens may split the kept text differently from a
  // fresh tokenization: the counts agree up to that
  assert.ok(Math.abs(ct.input_tokens - (m.usage.input_tokens + m.usage.cache_read_input_tokens)) <= 4);
  assert.ok(m.usage.cache_read_input_tokens > 0, 'the first turn was reused');
});

test('messages: errors in the Anthropic shape', async () => {
  let r = await post('/v1/messages', { model: 'x', messages: [{ role: 'user', content: 'q' }] });
  assert.equal(r.status, 400);
  assert.equal(r.json.type, 'error');
  assert.equal(r.json.error.type, 'invalid_request_error');
  assert.match(r.json.error.message, /max_tokens/);
  r = await post('/v1/messages', { model: 'x', max_tokens: 5, messages: [{ role: 'system', content: 'q' }] });
  assert.equal(r.status, 400);
  assert.equal(r.json.error.type, 'invalid_request_error');
  r = await post('/v1/messages', { model: 'x', max_tokens: 5, messages: [{ role: 'user', content: [{ type: 'hologram' }] }] });
  assert.equal(r.status, 400);
  assert.match(r.json.error.message, /hologram/);
  await assert.rejects(client.messages.create({ model: 'x', max_tokens: 5, temperature: 3, messages: [{ role: 'user', content: 'q' }] }),
    (e) => e.status === 400 && e.error?.error?.type === 'invalid_request_error');
});

test('messages: images become a placeholder (text-only model), the request succeeds', async () => {
  const withImage = await client.messages.countTokens({ model: 'x', messages: [{ role: 'user', content: [
    { type: 'text', text: 'What is this?' }, { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } }] }] });
  const without = await client.messages.countTokens({ model: 'x', messages: [{ role: 'user', content: 'What is this?' }] });
  assert.ok(withImage.input_tokens > without.input_tokens + 3, 'the placeholder is in the prompt');
  const m = await client.messages.create({ model: 'x', max_tokens: 10, messages: [{ role: 'user', content: [
    { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } }] }] }, { headers: out('no.</think>I cannot see images.') });
  assert.equal(m.content.at(-1).text, 'I cannot see images.');
});

test('messages: thinking.budget_tokens closes the reasoning after that many tokens', async () => {
  const m = await client.messages.create({
    model: 'x', max_tokens: 12, temperature: 0, thinking: { type: 'enabled', budget_tokens: 2 },
    messages: [{ role: 'user', content: 'think briefly' }],
  });
  assert.equal(m.content[0].type, 'thinking');
  if (m.stop_reason === 'max_tokens') {
    // 2 reasoning tokens + the forced </think>, then the answer
    assert.equal(m.content.at(-1).type, 'text');
    assert.equal(m.usage.output_tokens, 12);
  }
});
