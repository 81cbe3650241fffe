// The Responses and Anthropic routes on a random-weight Qwen3 model with the real Qwen3
// tokenizer, whose template is the thinking variant (the generation prompt opens
// "<think>\n" unless enable_thinking is false): reasoning items and thinking blocks,
// thinking turned off, tools rendered into the template, tool_choice, replayed function
// calls and a forced call cut off by max_tokens, each checked against the template rendered
// here or against /v1/chat/completions, which runs the same pipeline.
import Anthropic from '@anthropic-ai/sdk';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { forcedInstruction } from '../src/chat/chat-request.js';
import { ChatTemplate, type ChatMessage } from '../src/chat/template.js';
import type { Engine } from '../src/engine/engine.js';
import { loadEngine } from '../src/engine/load.js';
import { startServer, type RunningServer } from '../src/server/server.js';
import { everyApi, expectCutOnEveryApi } from './helpers/chat-apis.js';
import { makeRandomCheckpoint, useThinkingQwen3Template } from './helpers/random-checkpoint.js';

let dir: string;
let engine: Engine;
let server: RunningServer;
let openai: OpenAI;
let anthropic: Anthropic;
let template: ChatTemplate;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'qwen3-apis-'));
  makeRandomCheckpoint({ arch: 'qwen3', tokenizer: 'qwen3', hidden: 64, layers: 2, heads: 4, kvHeads: 2, headDim: 16, intermediate: 128, seed: 1 }, dir);
  // Qwen3's template closes an empty block when enable_thinking is false; the thinking
  // variants open one otherwise.
  const chatTemplate = useThinkingQwen3Template(dir);
  engine = await loadEngine({ modelDir: dir, parallel: 2 });
  template = new ChatTemplate(chatTemplate, engine.tokenizer);
  server = await startServer(engine, { host: '127.0.0.1', port: 0 });
  openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  anthropic = new Anthropic({ baseURL: server.url, apiKey: 'unused', maxRetries: 0 });
});

afterAll(async () => {
  await server?.close();
  await engine?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const tokens = (messages: ChatMessage[], options: Parameters<ChatTemplate['render']>[1] = {}) =>
  engine.tokenizer.encode(template.render(messages, options), false).length;

const weatherTool = {
  type: 'function' as const,
  name: 'get_weather',
  description: 'Current weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 20 } }, required: ['city'] },
  strict: false,
};
const asChatTool = { type: 'function', function: { name: weatherTool.name, description: weatherTool.description, parameters: weatherTool.parameters } };

describe('reasoning', () => {
  it('Responses put the opened block in a reasoning item ahead of the message, streamed or not', async () => {
    const params = { model: 'q', input: 'Hello', max_output_tokens: 6, temperature: 0 };
    const res = await openai.responses.create(params);
    expect(res.output.map((o) => [o.type, 'status' in o ? o.status : undefined])).toEqual([
      ['reasoning', 'incomplete'],
      ['message', 'incomplete'],
    ]);
    const reasoning = res.output[0] as OpenAI.Responses.ResponseReasoningItem;
    const text = reasoning.content![0]!.text;
    expect(text.length).toBeGreaterThan(0);
    expect(res.output_text).toBe('');
    expect(res.usage?.output_tokens).toBe(6);
    expect(res.usage?.output_tokens_details.reasoning_tokens).toBe(engine.tokenizer.encode(text, false).length);

    const stream = openai.responses.stream(params);
    const deltas: string[] = [];
    stream.on('response.reasoning_text.delta', (e) => deltas.push(e.delta));
    const final = await stream.finalResponse();
    expect(deltas.join('')).toBe(text);
    expect((final.output[0] as OpenAI.Responses.ResponseReasoningItem).content).toEqual(reasoning.content);
  });

  it('thinking_budget_tokens caps reasoning exactly as on chat completions', async () => {
    for (const budget of [0, 3]) {
      const res = await openai.responses.create({ model: 'q', input: 'Hello', max_output_tokens: 12, temperature: 0, thinking_budget_tokens: budget } as never);
      const chat = await openai.chat.completions.create({
        model: 'q',
        messages: [{ role: 'user', content: 'Hello' }],
        max_tokens: 12,
        temperature: 0,
        thinking_budget_tokens: budget,
      } as never);
      const message = chat.choices[0]!.message as { content: string | null; reasoning_content?: string };
      expect(res.output_text).toBe(message.content ?? '');
      expect(res.output_text.length).toBeGreaterThan(0);
      const reasoning = res.output.find((o): o is OpenAI.Responses.ResponseReasoningItem => o.type === 'reasoning');
      expect(reasoning?.content?.[0]?.text ?? '').toBe(message.reasoning_content ?? '');
      expect(res.usage?.output_tokens_details.reasoning_tokens).toBe(budget);
      expect(res.usage?.input_tokens).toBe(chat.usage?.prompt_tokens);
    }
  });

  it('reasoning.effort "none" turns the template\'s thinking off', async () => {
    const res = await openai.responses.create({ model: 'q', input: 'Hello', max_output_tokens: 5, temperature: 0, reasoning: { effort: 'none' } } as never);
    expect(res.output.map((o) => o.type)).toEqual(['message']);
    expect(res.usage?.input_tokens).toBe(tokens([{ role: 'user', content: 'Hello' }], { kwargs: { enable_thinking: false } }));
  });

  it('Anthropic returns a thinking block, streamed as thinking_delta, and none when disabled', async () => {
    const params = { model: 'q', max_tokens: 6, temperature: 0, messages: [{ role: 'user' as const, content: 'Hello' }] };
    const msg = await anthropic.messages.create({ ...params, thinking: { type: 'enabled', budget_tokens: 1024 } });
    // Cut off by max_tokens inside the block: the thinking block alone, no empty text after it.
    expect(msg.content.map((b) => b.type)).toEqual(['thinking']);
    expect(msg.stop_reason).toBe('max_tokens');
    const stream = anthropic.messages.stream({ ...params, thinking: { type: 'enabled', budget_tokens: 1024 } });
    let thinking = '';
    stream.on('thinking', (delta) => (thinking += delta));
    const final = await stream.finalMessage();
    expect(final.content).toEqual(msg.content);
    expect(thinking).toBe((msg.content[0] as Anthropic.ThinkingBlock).thinking);
    const types: string[] = [];
    for await (const event of await anthropic.messages.create({ ...params, thinking: { type: 'enabled', budget_tokens: 1024 }, stream: true })) {
      if (event.type === 'content_block_start') types.push(event.content_block.type);
    }
    expect(types).toEqual(['thinking']);

    const off = await anthropic.messages.create({ ...params, max_tokens: 5, thinking: { type: 'disabled' } });
    expect(off.content.map((b) => b.type)).toEqual(['text']);
    const chat = await openai.chat.completions.create({
      model: 'q',
      messages: [{ role: 'user', content: 'Hello' }],
      max_tokens: 5,
      temperature: 0,
      chat_template_kwargs: { enable_thinking: false },
    } as never);
    expect((off.content[0] as Anthropic.TextBlock).text).toBe(chat.choices[0]!.message.content);
  });
});

describe('tools', () => {
  const user: ChatMessage[] = [{ role: 'user', content: 'Weather in Paris?' }];

  it('render into the template the same way through both APIs', async () => {
    const withTools = tokens(user, { tools: [asChatTool] });
    expect(withTools).toBeGreaterThan(tokens(user));
    const responses = await openai.responses.inputTokens.count({ input: 'Weather in Paris?', tools: [weatherTool] });
    expect(responses.input_tokens).toBe(withTools);
    const messages = await anthropic.messages.countTokens({
      model: 'q',
      messages: [{ role: 'user', content: 'Weather in Paris?' }],
      tools: [{ name: weatherTool.name, description: weatherTool.description, input_schema: weatherTool.parameters as never }],
    });
    expect(messages.input_tokens).toBe(withTools);
    // tool_choice none renders no tools.
    const none = await openai.responses.inputTokens.count({ input: 'Weather in Paris?', tools: [weatherTool], tool_choice: 'none' });
    expect(none.input_tokens).toBe(tokens(user));
  });

  it('a forced choice adds the instruction to the last user message, and unknown names are 400', async () => {
    const named = await openai.responses.inputTokens.count({
      input: 'Weather in Paris?',
      tools: [weatherTool],
      tool_choice: { type: 'function', name: 'get_weather' },
    });
    const instructed: ChatMessage[] = [{ role: 'user', content: `Weather in Paris?\n\n${forcedInstruction({ kind: 'named', name: 'get_weather' })}` }];
    expect(named.input_tokens).toBe(tokens(instructed, { tools: [asChatTool] }));
    const any = await anthropic.messages.countTokens({
      model: 'q',
      messages: [{ role: 'user', content: 'Weather in Paris?' }],
      tools: [{ name: weatherTool.name, description: weatherTool.description, input_schema: weatherTool.parameters as never }],
      tool_choice: { type: 'any' },
    });
    const required: ChatMessage[] = [{ role: 'user', content: `Weather in Paris?\n\n${forcedInstruction({ kind: 'required' })}` }];
    expect(any.input_tokens).toBe(tokens(required, { tools: [asChatTool] }));

    const missing = await openai.responses
      .create({ model: 'q', input: 'x', tools: [weatherTool], tool_choice: { type: 'function', name: 'nope' } })
      .catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(OpenAI.BadRequestError);
    const forcedWithSchema = await openai.responses
      .create({
        model: 'q',
        input: 'x',
        tools: [weatherTool],
        tool_choice: 'required',
        text: { format: { type: 'json_schema', name: 'r', schema: { type: 'object' } } },
      })
      .catch((e: unknown) => e);
    expect(forcedWithSchema).toBeInstanceOf(OpenAI.BadRequestError);
    const anthropicMissing = await anthropic.messages
      .create({ model: 'q', max_tokens: 1, messages: [{ role: 'user', content: 'x' }], tools: [], tool_choice: { type: 'tool', name: 'nope' } })
      .catch((e: unknown) => e);
    expect(anthropicMissing).toBeInstanceOf(Anthropic.BadRequestError);
  });

  it('replays function calls and their outputs as the template renders tool calls', async () => {
    const input: OpenAI.Responses.ResponseInputItem[] = [
      { role: 'user', content: 'Weather in Paris?' },
      { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city": "Paris"}' },
      { type: 'function_call_output', call_id: 'call_1', output: '{"temp": 21}' },
    ];
    const counted = await openai.responses.inputTokens.count({ input, tools: [weatherTool] });
    const chat: ChatMessage[] = [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: '', tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', name: 'get_weather', content: '{"temp": 21}' },
    ];
    expect(template.render(chat, { tools: [asChatTool] })).toContain('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>');
    expect(counted.input_tokens).toBe(tokens(chat, { tools: [asChatTool] }));
    // The same history through the Anthropic API renders identically.
    const viaAnthropic = await anthropic.messages.countTokens({
      model: 'q',
      tools: [{ name: weatherTool.name, description: weatherTool.description, input_schema: weatherTool.parameters as never }],
      messages: [
        { role: 'user', content: 'Weather in Paris?' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'call_1', name: 'get_weather', input: { city: 'Paris' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'call_1', content: '{"temp": 21}' }] },
      ],
    });
    expect(viaAnthropic.input_tokens).toBe(counted.input_tokens);
  });

  it('a request with tools generates through the same pipeline', async () => {
    const res = await openai.responses.create({ model: 'q', input: 'Weather in Paris?', tools: [weatherTool], max_output_tokens: 3, temperature: 0, reasoning: { effort: 'none' } } as never);
    expect(res.status).toBe('incomplete');
    expect(res.output.map((o) => o.type)).toEqual(['message']);
    expect(res.usage?.input_tokens).toBe(tokens(user, { tools: [asChatTool], kwargs: { enable_thinking: false } }));
  });
});

describe('a forced call cut off by max_tokens', () => {
  it('inside its opening marker or before its name, shows as a started call on every API, streamed or not', async () => {
    // The greedy forced call, token by token: the grammar writes "</think>\n\n<tool_call>\n{...",
    // the marker spelled in ordinary tokens.
    const forcedCall = (max_tokens: number) => ({
      model: 'q',
      messages: [{ role: 'user' as const, content: 'Weather in Paris?' }],
      tools: [asChatTool as OpenAI.ChatCompletionTool],
      tool_choice: 'required' as const,
      temperature: 0,
      max_tokens,
    });
    const probe = await openai.chat.completions.create({ ...forcedCall(16), logprobs: true });
    const pieces = probe.choices[0]!.logprobs!.content!.map((t) => t.token);
    const after = (k: number) => pieces.slice(0, k).join('').split('</think>')[1]?.trimStart() ?? '';
    const insideMarker = pieces.findIndex((_, k) => after(k + 1).length > 1 && '<tool_call>'.startsWith(after(k + 1)) && after(k + 1) !== '<tool_call>') + 1;
    const beforeName = pieces.findIndex((_, k) => after(k + 1).startsWith('<tool_call>\n{')) + 1;
    expect(insideMarker).toBeGreaterThan(0);
    expect(beforeName).toBeGreaterThan(insideMarker);
    expect(after(beforeName)).not.toContain('get_weather');
    const tools = [{ name: weatherTool.name, parameters: weatherTool.parameters }];
    expectCutOnEveryApi(await everyApi(server.url, insideMarker, tools, true), '', [{ name: 'get_weather', arguments: '' }]);
    // Every API renders the same events; test/server-tool-call-limit.test.ts runs this cut on each.
    const cut = await openai.chat.completions.create({ ...forcedCall(beforeName), logprobs: false });
    expect(cut.choices[0]).toMatchObject({ finish_reason: 'length', message: { content: null, tool_calls: [{ function: { name: 'get_weather', arguments: '' } }] } });
  });
});

describe('POST /apply-template', () => {
  const apply = async (body: unknown) => {
    const res = await fetch(`${server.url}/apply-template`, { method: 'POST', body: JSON.stringify(body) });
    return { status: res.status, body: (await res.json()) as any };
  };

  it('returns the prompt chat completions generate from, tools and kwargs included', async () => {
    const messages: ChatMessage[] = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Weather in Paris?' },
    ];
    const plain = await apply({ messages });
    expect(plain.status).toBe(200);
    expect(plain.body).toEqual({ prompt: template.render(messages, {}) });
    expect(plain.body.prompt.endsWith('<|im_start|>assistant\n<think>\n')).toBe(true);

    const body = { messages, tools: [asChatTool], chat_template_kwargs: { enable_thinking: false } };
    const withTools = await apply(body);
    expect(withTools.body.prompt).toBe(template.render(messages, { tools: [asChatTool], kwargs: { enable_thinking: false } }));
    expect(withTools.body.prompt).toContain('get_weather');
    const chat = await openai.chat.completions.create({ model: 'q', ...body, max_tokens: 1 } as never);
    expect((chat as OpenAI.ChatCompletion).usage!.prompt_tokens).toBe(engine.tokenizer.encode(withTools.body.prompt, false).length);
  });

  it('refuses what chat completions refuse', async () => {
    expect((await apply({})).body.error).toMatchObject({ type: 'invalid_request_error', message: 'messages is required' });
    const forcedUnknown = await apply({ messages: [{ role: 'user', content: 'Hi' }], tools: [asChatTool], tool_choice: { type: 'function', function: { name: 'nope' } } });
    expect(forcedUnknown.status).toBe(400);
  });
});

describe('POST /infill', () => {
  const post = async (path: string, body: unknown) => {
    const res = await fetch(`${server.url}${path}`, { method: 'POST', body: JSON.stringify(body) });
    return { status: res.status, body: (await res.json()) as any };
  };
  const request = {
    input_prefix: 'def add(a, b):\n    return ',
    input_suffix: '\n\nprint(add(1, 2))\n',
    input_extra: [{ filename: 'util.py', text: 'X = 1\n' }],
    prompt: 'a',
    n_predict: 8,
    temperature: 0,
  };
  const fimPrompt =
    '<|repo_name|>repo\n<|file_sep|>util.py\nX = 1\n<|fim_prefix|>def add(a, b):\n    return <|fim_suffix|>\n\nprint(add(1, 2))\n<|fim_middle|>a';

  it("lays the prompt out with Qwen's fill-in-the-middle tokens and generates as /completion does", async () => {
    const infill = await post('/infill', request);
    expect(infill.status).toBe(200);
    expect(infill.body.prompt).toBe(fimPrompt);
    expect(infill.body.tokens_predicted).toBe(8);
    // The same token ids through /completion give the same greedy continuation.
    const ids = engine.tokenizer.encode(fimPrompt, false);
    expect(infill.body.tokens_evaluated).toBe(ids.length);
    const completion = await post('/completion', { prompt: ids, n_predict: 8, temperature: 0 });
    expect(infill.body.content).toBe(completion.body.content);

    // Streamed: /completion's chunks, adding up to the same text.
    const res = await fetch(`${server.url}/infill`, { method: 'POST', body: JSON.stringify({ ...request, stream: true }) });
    const chunks = (await res.text()).split('\n').filter((l) => l.startsWith('data: ')).map((l) => JSON.parse(l.slice(6)));
    expect(chunks.map((c) => c.content).join('')).toBe(infill.body.content);
    expect(chunks.at(-1)).toMatchObject({ stop: true, prompt: fimPrompt });
  });

  it('keeps the text nearest the cursor when the input is longer than three quarters of the context', async () => {
    const contextSize = engine.info.contextSize;
    const prefix = Array.from({ length: contextSize }, (_, i) => `v${i} = ${i}\n`).join('');
    const res = await post('/infill', { input_prefix: prefix, input_suffix: 'end\n', n_predict: 2, temperature: 0 });
    expect(res.status).toBe(200);
    expect(res.body.tokens_evaluated).toBeLessThanOrEqual(Math.floor((3 * contextSize) / 4));
    expect(res.body.prompt.startsWith('<|fim_prefix|>')).toBe(true);
    expect(res.body.prompt).toContain(`v${contextSize - 1} = ${contextSize - 1}\n<|fim_suffix|>end\n<|fim_middle|>`);
  });

  it('lays the suffix first with --spm-infill', async () => {
    const spm = await startServer(engine, { host: '127.0.0.1', port: 0, spmInfill: true });
    try {
      const res = await fetch(`${spm.url}/infill`, { method: 'POST', body: JSON.stringify({ ...request, input_extra: [], n_predict: 1 }) });
      const body = (await res.json()) as { prompt: string };
      expect(body.prompt).toBe('<|fim_suffix|>\n\nprint(add(1, 2))\n<|fim_prefix|>def add(a, b):\n    return <|fim_middle|>a');
    } finally {
      await spm.close();
    }
  });

  it('refuses a malformed body and FIM markers in the text, in the native envelope', async () => {
    const bad = await post('/infill', { input_prefix: 'x', input_extra: [{ filename: 'a.py' }] });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toMatchObject({ type: 'invalid_request_error', message: 'Invalid infill request: input_extra[0].text is required' });
    const marker = await post('/infill', { input_prefix: 'x', input_extra: [{ filename: 'a.py', text: 'y<|fim_middle|>' }] });
    expect(marker.status).toBe(400);
    expect(marker.body.error.message).toBe('Invalid infill request: input_extra[0].text contains the fill-in-the-middle marker <|fim_middle|>');
  });
});
