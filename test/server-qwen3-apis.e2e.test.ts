// The Responses and Anthropic routes on a random-weight Qwen3 model with the real Qwen3
// tokenizer, whose template is the thinking variant (the generation prompt opens
// "<think>\n" unless enable_thinking is false): reasoning items and thinking blocks,
// thinking turned off, tools rendered into the template, tool_choice, replayed function
// calls and a forced call cut off by max_tokens, each checked against the template rendered
// here or against /v1/chat/completions, which runs the same pipeline.
import Anthropic from '@anthropic-ai/sdk';
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';
import { beforeAll, describe, expect, it } from 'vitest';
import { forcedInstruction } from '../src/chat/chat-request.js';
import { ChatTemplate, templateDates, type ChatMessage } from '../src/chat/template.js';
import { parseCli } from '../src/cli-options.js';
import { everyApi, expectCutOnEveryApi } from './helpers/chat-apis.js';
import { serve, tinyQwen3, useLive } from './helpers/live-server.js';
import { useThinkingQwen3Template } from './helpers/random-checkpoint.js';

let chatTemplate: string;
const live = useLive({
  model: tinyQwen3({ layers: 2, seed: 1 }),
  engine: { parallel: 2 },
  // Qwen3's template closes an empty block when enable_thinking is false; the thinking
  // variants open one otherwise.
  prepare: (dir) => {
    chatTemplate = useThinkingQwen3Template(dir);
  },
});
let template: ChatTemplate;

beforeAll(() => {
  template = new ChatTemplate(chatTemplate, live.engine.tokenizer);
});

const tokens = (messages: ChatMessage[], options: Parameters<ChatTemplate['render']>[1] = {}) =>
  live.engine.tokenizer.encode(template.render(messages, options), false).length;

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
    const res = await live.openai.responses.create(params);
    expect(res.output.map((o) => [o.type, 'status' in o ? o.status : undefined])).toEqual([
      ['reasoning', 'incomplete'],
      ['message', 'incomplete'],
    ]);
    const reasoning = res.output[0] as OpenAI.Responses.ResponseReasoningItem;
    const text = reasoning.content![0]!.text;
    expect(text.length).toBeGreaterThan(0);
    expect(res.output_text).toBe('');
    expect(res.usage?.output_tokens).toBe(6);
    expect(res.usage?.output_tokens_details.reasoning_tokens).toBe(live.engine.tokenizer.encode(text, false).length);

    const stream = live.openai.responses.stream(params);
    const deltas: string[] = [];
    stream.on('response.reasoning_text.delta', (e) => deltas.push(e.delta));
    const final = await stream.finalResponse();
    expect(deltas.join('')).toBe(text);
    expect((final.output[0] as OpenAI.Responses.ResponseReasoningItem).content).toEqual(reasoning.content);
  });

  it('thinking_budget_tokens caps reasoning exactly as on chat completions', async () => {
    for (const budget of [0, 3]) {
      const res = await live.openai.responses.create({ model: 'q', input: 'Hello', max_output_tokens: 12, temperature: 0, thinking_budget_tokens: budget } as never);
      const chat = await live.openai.chat.completions.create({
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
    const res = await live.openai.responses.create({ model: 'q', input: 'Hello', max_output_tokens: 5, temperature: 0, reasoning: { effort: 'none' } } as never);
    expect(res.output.map((o) => o.type)).toEqual(['message']);
    expect(res.usage?.input_tokens).toBe(tokens([{ role: 'user', content: 'Hello' }], { kwargs: { enable_thinking: false } }));
  });

  it('Anthropic returns a thinking block, streamed as thinking_delta, and none when disabled', async () => {
    const params = { model: 'q', max_tokens: 6, temperature: 0, messages: [{ role: 'user' as const, content: 'Hello' }] };
    const msg = await live.anthropic.messages.create({ ...params, thinking: { type: 'enabled', budget_tokens: 1024 } });
    // Cut off by max_tokens inside the block: the thinking block alone, no empty text after it.
    expect(msg.content.map((b) => b.type)).toEqual(['thinking']);
    expect(msg.stop_reason).toBe('max_tokens');
    const stream = live.anthropic.messages.stream({ ...params, thinking: { type: 'enabled', budget_tokens: 1024 } });
    let thinking = '';
    stream.on('thinking', (delta) => (thinking += delta));
    const final = await stream.finalMessage();
    expect(final.content).toEqual(msg.content);
    expect(thinking).toBe((msg.content[0] as Anthropic.ThinkingBlock).thinking);
    const types: string[] = [];
    for await (const event of await live.anthropic.messages.create({ ...params, thinking: { type: 'enabled', budget_tokens: 1024 }, stream: true })) {
      if (event.type === 'content_block_start') types.push(event.content_block.type);
    }
    expect(types).toEqual(['thinking']);

    const off = await live.anthropic.messages.create({ ...params, max_tokens: 5, thinking: { type: 'disabled' } });
    expect(off.content.map((b) => b.type)).toEqual(['text']);
    const chat = await live.openai.chat.completions.create({
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
    const responses = await live.openai.responses.inputTokens.count({ input: 'Weather in Paris?', tools: [weatherTool] });
    expect(responses.input_tokens).toBe(withTools);
    const messages = await live.anthropic.messages.countTokens({
      model: 'q',
      messages: [{ role: 'user', content: 'Weather in Paris?' }],
      tools: [{ name: weatherTool.name, description: weatherTool.description, input_schema: weatherTool.parameters as never }],
    });
    expect(messages.input_tokens).toBe(withTools);
    // tool_choice none renders no tools.
    const none = await live.openai.responses.inputTokens.count({ input: 'Weather in Paris?', tools: [weatherTool], tool_choice: 'none' });
    expect(none.input_tokens).toBe(tokens(user));
  });

  it('a forced choice adds the instruction to the last user message, and unknown names are 400', async () => {
    const named = await live.openai.responses.inputTokens.count({
      input: 'Weather in Paris?',
      tools: [weatherTool],
      tool_choice: { type: 'function', name: 'get_weather' },
    });
    const instructed: ChatMessage[] = [{ role: 'user', content: `Weather in Paris?\n\n${forcedInstruction({ kind: 'named', name: 'get_weather' })}` }];
    expect(named.input_tokens).toBe(tokens(instructed, { tools: [asChatTool] }));
    const any = await live.anthropic.messages.countTokens({
      model: 'q',
      messages: [{ role: 'user', content: 'Weather in Paris?' }],
      tools: [{ name: weatherTool.name, description: weatherTool.description, input_schema: weatherTool.parameters as never }],
      tool_choice: { type: 'any' },
    });
    const required: ChatMessage[] = [{ role: 'user', content: `Weather in Paris?\n\n${forcedInstruction({ kind: 'required' })}` }];
    expect(any.input_tokens).toBe(tokens(required, { tools: [asChatTool] }));

    const missing = await live.openai.responses
      .create({ model: 'q', input: 'x', tools: [weatherTool], tool_choice: { type: 'function', name: 'nope' } })
      .catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(OpenAI.BadRequestError);
    const forcedWithSchema = await live.openai.responses
      .create({
        model: 'q',
        input: 'x',
        tools: [weatherTool],
        tool_choice: 'required',
        text: { format: { type: 'json_schema', name: 'r', schema: { type: 'object' } } },
      })
      .catch((e: unknown) => e);
    expect(forcedWithSchema).toBeInstanceOf(OpenAI.BadRequestError);
    const anthropicMissing = await live.anthropic.messages
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
    const counted = await live.openai.responses.inputTokens.count({ input, tools: [weatherTool] });
    const chat: ChatMessage[] = [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: '', tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', name: 'get_weather', content: '{"temp": 21}' },
    ];
    expect(template.render(chat, { tools: [asChatTool] })).toContain('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>');
    expect(counted.input_tokens).toBe(tokens(chat, { tools: [asChatTool] }));
    // The same history through the Anthropic API renders identically.
    const viaAnthropic = await live.anthropic.messages.countTokens({
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
    const res = await live.openai.responses.create({ model: 'q', input: 'Weather in Paris?', tools: [weatherTool], max_output_tokens: 3, temperature: 0, reasoning: { effort: 'none' } } as never);
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
    const probe = await live.openai.chat.completions.create({ ...forcedCall(16), logprobs: true });
    const pieces = probe.choices[0]!.logprobs!.content!.map((t) => t.token);
    const after = (k: number) => pieces.slice(0, k).join('').split('</think>')[1]?.trimStart() ?? '';
    const insideMarker = pieces.findIndex((_, k) => after(k + 1).length > 1 && '<tool_call>'.startsWith(after(k + 1)) && after(k + 1) !== '<tool_call>') + 1;
    const beforeName = pieces.findIndex((_, k) => after(k + 1).startsWith('<tool_call>\n{')) + 1;
    expect(insideMarker).toBeGreaterThan(0);
    expect(beforeName).toBeGreaterThan(insideMarker);
    expect(after(beforeName)).not.toContain('get_weather');
    const tools = [{ name: weatherTool.name, parameters: weatherTool.parameters }];
    expectCutOnEveryApi(await everyApi(live.url, insideMarker, tools, true), '', [{ name: 'get_weather', arguments: '' }]);
    // Every API renders the same events; test/server-tool-call-limit.test.ts runs this cut on each.
    const cut = await live.openai.chat.completions.create({ ...forcedCall(beforeName), logprobs: false });
    expect(cut.choices[0]).toMatchObject({ finish_reason: 'length', message: { content: null, tool_calls: [{ function: { name: 'get_weather', arguments: '' } }] } });
  });
});

describe('POST /apply-template', () => {
  const apply = async (body: unknown) => {
    const res = await fetch(`${live.url}/apply-template`, { method: 'POST', body: JSON.stringify(body) });
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
    const chat = await live.openai.chat.completions.create({ model: 'q', ...body, max_tokens: 1 } as never);
    expect((chat as OpenAI.ChatCompletion).usage!.prompt_tokens).toBe(live.engine.tokenizer.encode(withTools.body.prompt, false).length);
  });

  it('refuses what chat completions refuse', async () => {
    expect((await apply({})).body.error).toMatchObject({ type: 'invalid_request_error', message: 'messages is required' });
    const forcedUnknown = await apply({ messages: [{ role: 'user', content: 'Hi' }], tools: [asChatTool], tool_choice: { type: 'function', function: { name: 'nope' } } });
    expect(forcedUnknown.status).toBe(400);
  });
});

describe('POST /infill', () => {
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
    const infill = await live.post('/infill', request);
    expect(infill.status).toBe(200);
    expect(infill.body.prompt).toBe(fimPrompt);
    expect(infill.body.tokens_predicted).toBe(8);
    // The same token ids through /completion give the same greedy continuation.
    const ids = live.engine.tokenizer.encode(fimPrompt, false);
    expect(infill.body.tokens_evaluated).toBe(ids.length);
    const completion = await live.post('/completion', { prompt: ids, n_predict: 8, temperature: 0 });
    expect(infill.body.content).toBe(completion.body.content);

    // Streamed: /completion's chunks, adding up to the same text.
    const res = await fetch(`${live.url}/infill`, { method: 'POST', body: JSON.stringify({ ...request, stream: true }) });
    const chunks = (await res.text()).split('\n').filter((l) => l.startsWith('data: ')).map((l) => JSON.parse(l.slice(6)));
    expect(chunks.map((c) => c.content).join('')).toBe(infill.body.content);
    expect(chunks.at(-1)).toMatchObject({ stop: true, prompt: fimPrompt });
  });

  it('keeps the text nearest the cursor when the input is longer than three quarters of the context', async () => {
    const contextSize = live.engine.info.contextSize;
    const prefix = Array.from({ length: contextSize }, (_, i) => `v${i} = ${i}\n`).join('');
    const res = await live.post('/infill', { input_prefix: prefix, input_suffix: 'end\n', n_predict: 2, temperature: 0 });
    expect(res.status).toBe(200);
    expect(res.body.tokens_evaluated).toBeLessThanOrEqual(Math.floor((3 * contextSize) / 4));
    expect(res.body.prompt.startsWith('<|fim_prefix|>')).toBe(true);
    expect(res.body.prompt).toContain(`v${contextSize - 1} = ${contextSize - 1}\n<|fim_suffix|>end\n<|fim_middle|>`);
  });

  it('lays the suffix first with --spm-infill', async () => {
    const spm = await serve(live.engine, { server: { spmInfill: true } });
    try {
      const res = await fetch(`${spm.url}/infill`, { method: 'POST', body: JSON.stringify({ ...request, input_extra: [], n_predict: 1 }) });
      const body = (await res.json()) as { prompt: string };
      expect(body.prompt).toBe('<|fim_suffix|>\n\nprint(add(1, 2))\n<|fim_prefix|>def add(a, b):\n    return <|fim_middle|>a');
    } finally {
      await spm.close();
    }
  });

  it('refuses a malformed body and FIM markers in the text, in the native envelope', async () => {
    const bad = await live.post('/infill', { input_prefix: 'x', input_extra: [{ filename: 'a.py' }] });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toMatchObject({ type: 'invalid_request_error', message: 'Invalid infill request: input_extra[0].text is required' });
    const marker = await live.post('/infill', { input_prefix: 'x', input_extra: [{ filename: 'a.py', text: 'y<|fim_middle|>' }] });
    expect(marker.status).toBe(400);
    expect(marker.body.error.message).toBe('Invalid infill request: input_extra[0].text contains the fill-in-the-middle marker <|fim_middle|>');
  });
});

describe('agent loops: a tool round trip sent back as the server returned it', () => {
  const call = { id: 'call_1', type: 'function' as const, function: { name: 'get_weather', arguments: '{"city": "Paris"}' } };
  const round = (content: null | undefined | '') => [
    { role: 'user', content: 'Weather in Paris?' },
    { role: 'assistant', tool_calls: [call], ...(content === undefined ? {} : { content }) },
    { role: 'tool', tool_call_id: 'call_1', content: 'Sunny and 21 degrees' },
  ];

  // The OpenAI form ({"content": null, "tool_calls": [...]}, as the AI SDK and the OpenAI
  // Agents SDK send it), content left out, or "": the same prompt, with the call and its result.
  it('renders and generates with the assistant content null, absent or "" (chat completions and /apply-template)', async () => {
    const prompts: string[] = [];
    for (const content of [null, undefined, ''] as const) {
      const body = { messages: round(content), tools: [asChatTool], chat_template_kwargs: { enable_thinking: false } };
      const applied = await fetch(`${live.url}/apply-template`, { method: 'POST', body: JSON.stringify(body) });
      expect(applied.status).toBe(200);
      const { prompt } = (await applied.json()) as { prompt: string };
      expect(prompt).toContain('<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n');
      expect(prompt).toContain('<|im_start|>user\n<tool_response>\nSunny and 21 degrees\n</tool_response><|im_end|>\n');
      prompts.push(prompt);
      const chat = await live.openai.chat.completions.create({ model: 'q', ...body, max_tokens: 2, temperature: 0 } as never);
      expect((chat as OpenAI.ChatCompletion).usage!.prompt_tokens).toBe(live.engine.tokenizer.encode(prompt, false).length);
    }
    expect(new Set(prompts).size).toBe(1);
  });
});

describe('assistant prefill', () => {
  const prefill = [
    { role: 'user' as const, content: 'Hi' },
    { role: 'assistant' as const, content: 'Whill' },
  ];
  const applyTemplate = async (body: unknown) => {
    const res = await fetch(`${live.url}/apply-template`, { method: 'POST', body: JSON.stringify(body) });
    return { status: res.status, body: (await res.json()) as any };
  };

  // llama-server (and Anthropic's documented prefill): the prompt is the conversation
  // before the final assistant message, the generation prompt, then that message's text
  // unclosed; the reply holds only what follows it.
  it('continues the final assistant message on chat completions, Responses and Anthropic Messages, streamed or not', async () => {
    const { body: applied } = await applyTemplate({ messages: prefill });
    // Thinking is off for a continued message: the template's closed empty block, then the text.
    expect(applied.prompt).toBe('<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nWhill');
    const ids = live.engine.tokenizer.encode(applied.prompt, false);
    const completion = await fetch(`${live.url}/completion`, { method: 'POST', body: JSON.stringify({ prompt: ids, n_predict: 4, temperature: 0 }) });
    const continuation = ((await completion.json()) as { content: string }).content;
    expect(continuation.length).toBeGreaterThan(0);

    const params = { model: 'q', messages: prefill, max_tokens: 4, temperature: 0 };
    const chat = await live.openai.chat.completions.create(params);
    expect(chat.choices[0]!.message.content).toBe(continuation);
    expect(chat.usage!.prompt_tokens).toBe(ids.length);
    let streamed = '';
    for await (const chunk of await live.openai.chat.completions.create({ ...params, stream: true })) streamed += chunk.choices[0]?.delta.content ?? '';
    expect(streamed).toBe(continuation);

    const responseInput = [
      { role: 'user' as const, content: 'Hi' },
      { role: 'assistant' as const, content: 'Whill' },
    ];
    const response = await live.openai.responses.create({ model: 'q', input: responseInput, max_output_tokens: 4, temperature: 0 });
    expect(response.output.map((o) => o.type)).toEqual(['message']);
    expect(response.output_text).toBe(continuation);
    const responseStream = live.openai.responses.stream({ model: 'q', input: responseInput, max_output_tokens: 4, temperature: 0 });
    expect((await responseStream.finalResponse()).output_text).toBe(continuation);

    const message = await live.anthropic.messages.create(params);
    expect(message.content).toHaveLength(1);
    expect(message.content[0]).toMatchObject({ type: 'text', text: continuation });
    expect(message.usage.input_tokens + (message.usage.cache_read_input_tokens ?? 0)).toBe(ids.length);
    let text = '';
    const messageStream = live.anthropic.messages.stream(params);
    messageStream.on('text', (delta) => (text += delta));
    await messageStream.finalMessage();
    expect(text).toBe(continuation);
  });

  it('refuses two trailing assistant messages, and a prefill with thinking on, in each API\'s envelope', async () => {
    const two = [...prefill, { role: 'assistant' as const, content: 'again' }];
    const chat = await live.openai.chat.completions.create({ model: 'q', messages: two, max_tokens: 1 }).catch((e: unknown) => e);
    expect(chat).toBeInstanceOf(OpenAI.BadRequestError);
    expect((chat as InstanceType<typeof OpenAI.BadRequestError>).error).toMatchObject({ type: 'invalid_request_error', message: 'Cannot have 2 or more assistant messages at the end of the list.' });
    const responses = await live.openai.responses.create({ model: 'q', input: two, max_output_tokens: 1 }).catch((e: unknown) => e);
    expect(responses).toBeInstanceOf(OpenAI.BadRequestError);
    const raw = await fetch(`${live.url}/v1/messages`, { method: 'POST', body: JSON.stringify({ model: 'q', max_tokens: 1, messages: two }) });
    expect(raw.status).toBe(400);
    expect(await raw.json()).toEqual({ type: 'error', error: { type: 'invalid_request_error', message: 'Cannot have 2 or more assistant messages at the end of the list.' } });
    // llama-server refuses a prefill asked to think; so does Anthropic's API.
    const thinking = await live.anthropic.messages
      .create({ model: 'q', max_tokens: 2048, messages: prefill, thinking: { type: 'enabled', budget_tokens: 1024 } })
      .catch((e: unknown) => e);
    expect(thinking).toBeInstanceOf(Anthropic.BadRequestError);
    expect((thinking as Error).message).toMatch('Assistant response prefill is incompatible with enable_thinking.');
    expect((await applyTemplate({ messages: two })).status).toBe(400);
    // Anthropic's own rule for a prefilled response.
    const trailing = await live.anthropic.messages.create({ model: 'q', max_tokens: 1, messages: [prefill[0]!, { role: 'assistant', content: 'Whill ' }] }).catch((e: unknown) => e);
    expect(trailing).toBeInstanceOf(Anthropic.BadRequestError);
    expect((trailing as Error).message).toMatch('final assistant content cannot end with trailing whitespace');
  });
});

describe('add_generation_prompt', () => {
  // llama-server reads add_generation_prompt (default true) on chat and /apply-template.
  it('false renders the conversation without opening the assistant turn', async () => {
    const messages = [{ role: 'user', content: 'Hi' }];
    const res = await fetch(`${live.url}/apply-template`, { method: 'POST', body: JSON.stringify({ messages, add_generation_prompt: false }) });
    const { prompt } = (await res.json()) as { prompt: string };
    expect(prompt).toBe('<|im_start|>user\nHi<|im_end|>\n');
    const chat = await live.openai.chat.completions.create({ model: 'q', messages: messages as never, max_tokens: 1, add_generation_prompt: false } as never);
    expect((chat as OpenAI.ChatCompletion).usage!.prompt_tokens).toBe(live.engine.tokenizer.encode(prompt, false).length);
    const bad = await fetch(`${live.url}/v1/chat/completions`, { method: 'POST', body: JSON.stringify({ messages, add_generation_prompt: 'no' }) });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as any).error.type).toBe('invalid_request_error');
  });
});

describe('--reasoning and the template context', () => {
  const fixture = (name: string) => readFileSync(new URL(`./fixtures/${name}`, import.meta.url), 'utf8');
  const applyOn = async (url: string, body: unknown) => {
    const res = await fetch(`${url}/apply-template`, { method: 'POST', body: JSON.stringify(body) });
    const answer = (await res.json()) as { prompt: string };
    expect(res.status, JSON.stringify(answer)).toBe(200);
    return answer.prompt;
  };
  const messages = [{ role: 'user', content: 'Hi' }];

  // llama-server's --reasoning auto (the default) renders QwQ's template with thinking on:
  // the prompt opens the block; thinking off (--reasoning off, or the request's
  // enable_thinking false) closes it; the request's value wins over the server's.
  it('QwQ renders with thinking on by default, closed by --reasoning off, the request winning', async () => {
    const parsed = parseCli(['--reasoning', 'off'], {}, live.dir);
    if (parsed.kind !== 'serve') throw new Error('expected serve');
    const auto = await serve(live.engine, { server: { chatTemplate: fixture('qwq-32b.jinja') } });
    const off = await serve(live.engine, { server: { chatTemplate: fixture('qwq-32b.jinja'), chatTemplateKwargs: parsed.options.chatTemplateKwargs } });
    try {
      expect(await applyOn(auto.url, { messages })).toBe('<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n');
      expect(await applyOn(off.url, { messages })).toBe('<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n</think>');
      expect(await applyOn(auto.url, { messages, chat_template_kwargs: { enable_thinking: false } })).toMatch(/<think>\n<\/think>$/);
      expect(await applyOn(off.url, { messages, chat_template_kwargs: { enable_thinking: true } })).toMatch(/<think>\n$/);
      // The reply of the default starts inside the block; off's is all content.
      const thinking = await auto.openai.chat.completions.create({ model: 'q', messages: messages as never, max_tokens: 3, temperature: 0 });
      expect((thinking.choices[0]!.message as { reasoning_content?: string }).reasoning_content?.length).toBeGreaterThan(0);
      const plain = await off.openai.chat.completions.create({ model: 'q', messages: messages as never, max_tokens: 3, temperature: 0 });
      expect((plain.choices[0]!.message as { reasoning_content?: string }).reasoning_content ?? '').toBe('');
    } finally {
      await Promise.all([auto.close(), off.close()]);
    }
  });

  // llama-server gives templates date_string (Llama 3.x: "%d %b %Y") and datetime
  // (FireFunction v2) beside strftime_now.
  it("prints today's date in Llama 3.3's template and renders FireFunction v2's", async () => {
    const llama = await serve(live.engine, { server: { chatTemplate: fixture('llama-3.3-instruct.jinja') } });
    const fire = await serve(live.engine, { server: { chatTemplate: fixture('firefunction-v2.jinja') } });
    try {
      const today = templateDates(new Date()).date_string;
      expect(today).toMatch(/^\d\d [A-Z][a-z]{2} \d{4}$/);
      expect(await applyOn(llama.url, { messages })).toContain(`Cutting Knowledge Date: December 2023\nToday Date: ${today}\n\n`);
      const prompt = await applyOn(fire.url, { messages, tools: [asChatTool] });
      expect(prompt).toMatch(/\nToday is [A-Z][a-z]{2} \d\d \d{4} \d\d:\d\d:\d\d GMT\.<\|eot_id\|>/);
      expect(prompt).toContain('"name": "get_weather"');
      const chat = await fire.openai.chat.completions.create({ model: 'q', messages: messages as never, max_tokens: 1 });
      expect(chat.choices).toHaveLength(1);
    } finally {
      await Promise.all([llama.close(), fire.close()]);
    }
  });
});
