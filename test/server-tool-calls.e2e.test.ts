// Function calls through the Responses and Anthropic routes, read by the official SDKs.
// A random-weight model does not write a well-formed call unprompted, so here a scripted
// engine emits a reply a Qwen3 model would write (reasoning, then a Hermes <tool_call>),
// tokenized by the real Qwen3 tokenizer and served under its real chat template: the
// tool-call parser, the reasoning split and both wire formats are all real.
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { beforeAll, describe, expect, it } from 'vitest';
import { FakeEngine } from './helpers/fake-engine.js';
import { useServer } from './helpers/live-server.js';
import { tokenizerDir } from './helpers/random-checkpoint.js';

const REPLY =
  '<think>\nThe user wants the weather in Paris.\n</think>\n\n' +
  'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>';

let engine: FakeEngine;

beforeAll(async () => {
  let script: number[] = [];
  engine = await FakeEngine.create({ tokenizerDir: tokenizerDir('qwen3'), contextSize: 4096, script: () => script });
  script = engine.tokenizer.encode(REPLY, false);
});

const live = useServer({ get engine() { return engine; } });

const tool = {
  type: 'function' as const,
  name: 'get_weather',
  description: 'Weather forecast',
  parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] },
  strict: false,
};
const ARGS = '{"city": "Paris", "days": 2}';

describe('Responses function calls', () => {
  it('come back as reasoning, message and function_call items', async () => {
    const res = await live.openai.responses.create({ model: 'q', input: 'Weather in Paris?', tools: [tool] });
    expect(res.status).toBe('completed');
    expect(res.output.map((o) => o.type)).toEqual(['reasoning', 'message', 'function_call']);
    expect((res.output[0] as OpenAI.Responses.ResponseReasoningItem).content).toEqual([
      { type: 'reasoning_text', text: 'The user wants the weather in Paris.' },
    ]);
    expect(res.output_text).toBe('Let me check.');
    expect(res.output[2]).toMatchObject({ type: 'function_call', name: 'get_weather', arguments: ARGS, status: 'completed', call_id: expect.stringMatching(/^call_/) });
  });

  it('stream as function_call_arguments deltas that the SDK assembles', async () => {
    const stream = live.openai.responses.stream({ model: 'q', input: 'Weather in Paris?', tools: [tool] });
    const deltas: string[] = [];
    stream.on('response.function_call_arguments.delta', (e) => deltas.push(e.delta));
    const types: string[] = [];
    stream.on('event', (e) => types.push(e.type));
    const final = await stream.finalResponse();
    expect(deltas.join('')).toBe(ARGS);
    expect(final.output.map((o) => o.type)).toEqual(['reasoning', 'message', 'function_call']);
    expect(final.output[2]).toMatchObject({ name: 'get_weather', arguments: ARGS });
    expect(types.filter((t) => t.startsWith('response.function_call_arguments')).at(-1)).toBe('response.function_call_arguments.done');
    expect(types.at(-1)).toBe('response.completed');
  });

  it('chain with their outputs through previous_response_id', async () => {
    const first = await live.openai.responses.create({ model: 'q', input: 'Weather in Paris?', tools: [tool] });
    const call = first.output[2] as OpenAI.Responses.ResponseFunctionToolCall;
    const next = { previous_response_id: first.id, tools: [tool], input: [{ type: 'function_call_output' as const, call_id: call.call_id, output: '{"temp": 21}' }] };
    const counted = await live.openai.responses.inputTokens.count(next);
    // The same conversation, replayed by the client as items, counts the same.
    const replayed = await live.openai.responses.inputTokens.count({
      tools: [tool],
      input: [{ role: 'user', content: 'Weather in Paris?' }, ...(first.output as OpenAI.Responses.ResponseInputItem[]), next.input[0]!],
    });
    expect(counted.input_tokens).toBe(replayed.input_tokens);
    const second = await live.openai.responses.create({ model: 'q', ...next });
    expect(second.usage?.input_tokens).toBe(counted.input_tokens);
    const prompt = engine.tokenizer.decode(engine.requests.at(-1)!.promptTokens, false);
    expect(prompt).toContain(`<tool_call>\n{"name": "get_weather", "arguments": ${ARGS}}\n</tool_call>`);
    expect(prompt).toContain('<tool_response>\n{"temp": 21}\n</tool_response>');
  });

  it('are not parsed when tool_choice is none', async () => {
    const res = await live.openai.responses.create({ model: 'q', input: 'Weather in Paris?', tools: [tool], tool_choice: 'none' });
    expect(res.output.map((o) => o.type)).toEqual(['reasoning', 'message']);
    expect(res.output_text).toContain('<tool_call>');
  });
});

describe('Anthropic tool_use', () => {
  const params = {
    model: 'q',
    max_tokens: 256,
    messages: [{ role: 'user' as const, content: 'Weather in Paris?' }],
    tools: [{ name: 'get_weather', description: 'Weather forecast', input_schema: tool.parameters as Anthropic.Tool.InputSchema }],
  };

  it('comes back as thinking, text and tool_use blocks with stop_reason tool_use', async () => {
    const msg = await live.anthropic.messages.create(params);
    expect(msg.stop_reason).toBe('tool_use');
    expect(msg.content).toEqual([
      { type: 'thinking', thinking: 'The user wants the weather in Paris.', signature: '' },
      { type: 'text', text: 'Let me check.' },
      { type: 'tool_use', id: expect.stringMatching(/^call_/), name: 'get_weather', input: { city: 'Paris', days: 2 } },
    ]);
  });

  it('streams input_json_delta that the SDK parses into the same input', async () => {
    const stream = live.anthropic.messages.stream(params);
    let json = '';
    stream.on('inputJson', (partial) => (json += partial));
    const final = await stream.finalMessage();
    expect(json).toBe(ARGS);
    expect(final.stop_reason).toBe('tool_use');
    expect(final.content.at(-1)).toMatchObject({ type: 'tool_use', name: 'get_weather', input: { city: 'Paris', days: 2 } });
  });

  it('replays tool_use and tool_result blocks as the template renders calls', async () => {
    const first = await live.anthropic.messages.create(params);
    const use = first.content.at(-1) as Anthropic.ToolUseBlock;
    await live.anthropic.messages.create({
      ...params,
      messages: [...params.messages, { role: 'assistant', content: first.content }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '{"temp": 21}' }] }],
    });
    const prompt = engine.tokenizer.decode(engine.requests.at(-1)!.promptTokens, false);
    expect(prompt).toContain('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>');
    expect(prompt).toContain('<tool_response>\n{"temp": 21}\n</tool_response>');
  });
});
