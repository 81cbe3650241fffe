// A tool call cut off by max_tokens, on the three chat APIs: its markup never reaches
// content, the call whose name was read stays with the arguments read so far, a call cut
// before its name still shows, and the turn reports the limit (finish_reason "length",
// status "incomplete", stop_reason "max_tokens"). A scripted engine writes a Qwen3 Hermes
// call under the real tokenizer.
import { beforeAll, describe, expect, it } from 'vitest';
import { everyApi, expectCutOnEveryApi } from './helpers/chat-apis.js';
import { FakeEngine } from './helpers/fake-engine.js';
import { useServer } from './helpers/live-server.js';
import { tokenizerDir } from './helpers/random-checkpoint.js';
import { readSse } from './helpers/sse.js';

const REPLY = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>';

let engine: FakeEngine;
let script: number[] = [];
/** A max_tokens that stops generation inside the call's arguments. */
let cut: number;

beforeAll(async () => {
  engine = await FakeEngine.create({ tokenizerDir: tokenizerDir('qwen3'), contextSize: 4096, script: () => script });
  script = engine.tokenizer.encode(REPLY, false);
  cut = script.findIndex((_, n) => engine.tokenizer.decode(script.slice(0, n), false).includes('"city": "'));
});

const server = useServer({ get engine() { return engine; } });

const chatTool = {
  type: 'function',
  function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] } },
};
const messages = [{ role: 'user', content: 'Weather in Paris?' }];

describe('a tool call cut off by max_tokens', () => {
  it('chat completions: the call with partial arguments, finish_reason "length", no markup in content', async () => {
    const res = await server.request('/v1/chat/completions', { messages, tools: [chatTool], tool_choice: 'required', max_tokens: cut });
    const body = (await res.json()) as { choices: Array<{ message: Record<string, unknown>; finish_reason: string }> };
    const [choice] = body.choices;
    expect(choice!.finish_reason).toBe('length');
    expect(choice!.message.content).toBe('Let me check.');
    const calls = choice!.message.tool_calls as Array<{ function: { name: string; arguments: string } }>;
    expect(calls.map((c) => c.function.name)).toEqual(['get_weather']);
    expect('{"city": "Paris", "days": 2}'.startsWith(calls[0]!.function.arguments)).toBe(true);
  });

  it('a chat stream: the same call and content, and never markup in delta.content', async () => {
    const res = await server.request('/v1/chat/completions', { messages, tools: [chatTool], tool_choice: 'required', max_tokens: cut, stream: true });
    const chunks = (await readSse(res)).filter((c) => c !== '[DONE]') as Array<{ choices: Array<{ delta: Record<string, unknown>; finish_reason: string | null }> }>;
    const deltas = chunks.flatMap((c) => c.choices);
    const content = deltas.map((d) => d.delta.content ?? '').join('');
    expect(content).toBe('Let me check.');
    const calls = deltas.flatMap((d) => (d.delta.tool_calls ?? []) as Array<{ index: number; function: { name?: string; arguments: string } }>);
    expect(calls.filter((c) => c.function.name).map((c) => c.function.name)).toEqual(['get_weather']);
    expect('{"city": "Paris", "days": 2}'.startsWith(calls.map((c) => c.function.arguments).join(''))).toBe(true);
    expect(deltas.at(-1)!.finish_reason).toBe('length');
  });

  it('Responses: the message and the call, status incomplete (max_output_tokens)', async () => {
    const tool = { type: 'function', name: 'get_weather', parameters: chatTool.function.parameters };
    const res = await server.request('/v1/responses', { input: 'Weather in Paris?', tools: [tool], tool_choice: 'required', max_output_tokens: cut });
    const body = (await res.json()) as { status: string; incomplete_details: unknown; output: Array<Record<string, unknown>> };
    expect(body.status).toBe('incomplete');
    expect(body.incomplete_details).toEqual({ reason: 'max_output_tokens' });
    expect(body.output.map((o) => o.type)).toEqual(['message', 'function_call']);
    expect(JSON.stringify(body.output[0])).not.toContain('tool_call');
    expect(body.output[0]!.content).toMatchObject([{ type: 'output_text', text: 'Let me check.' }]);
    expect(body.output[1]).toMatchObject({ name: 'get_weather' });
  });

  it('Anthropic: the text and the tool_use block, stop_reason max_tokens', async () => {
    const tool = { name: 'get_weather', input_schema: chatTool.function.parameters };
    const res = await server.request('/v1/messages', { model: 'm', max_tokens: cut, messages, tools: [tool], tool_choice: { type: 'any' } });
    const body = (await res.json()) as { stop_reason: string; content: Array<Record<string, unknown>> };
    expect(body.stop_reason).toBe('max_tokens');
    expect(body.content.map((b) => b.type)).toEqual(['text', 'tool_use']);
    expect(body.content[0]).toMatchObject({ text: 'Let me check.' });
    expect(body.content[1]).toMatchObject({ name: 'get_weather' });
  });
});

/** Scripts the reply as `pieces` (one token or more each); its length in tokens. */
function scripted(pieces: string[]): number {
  script = pieces.flatMap((p) => engine.tokenizer.encode(p, false));
  return script.length;
}

describe('a forced call cut off before its name, on every API streamed or not', () => {
  const weather = { name: 'get_weather', parameters: chatTool.function.parameters };
  const time = { name: 'get_time', parameters: { type: 'object', properties: { zone: { type: 'string' } } } };

  it('inside its opening marker: no markup as content, the one declared tool as a started call', async () => {
    const seen = await everyApi(server.url, scripted(['<', 'tool', '_c']), [weather], true);
    expectCutOnEveryApi(seen, '', [{ name: 'get_weather', arguments: '' }]);
  });

  it('after the marker, before the name: a started call, nameless among several tools', async () => {
    const seen = await everyApi(server.url, scripted(['<tool_call>', '\n{"', 'na']), [weather, time], true);
    expectCutOnEveryApi(seen, '', [{ name: '', arguments: '' }]);
  });

  it('tool_choice auto: text ending in a partial marker keeps its text and drops the marker', async () => {
    const seen = await everyApi(server.url, scripted(['Let me check.', ' <', 'tool', '_c']), [weather], false);
    for (const [api, s] of Object.entries(seen)) expect(s.content, api).toBe('Let me check.');
    for (const [api, s] of Object.entries(seen)) expect(s.calls, api).toEqual([]);
  });
});
