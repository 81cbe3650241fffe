// Tool calling and reasoning through the real server and engine, with the official
// `openai` client, on a random-weight Qwen3 model with the real Qwen3 tokenizer. Random
// weights never choose to call a tool, so what is checked is what the server enforces:
// a forced tool_choice is constrained by the grammar to a valid call of a declared
// function (the parameter schemas bound every string, so even random weights must finish
// the call), "none" renders no tools, every refused tool_choice answers 400, and the
// thinking template's reasoning is split off, capped by a thinking budget, and reported
// as reasoning_only when nothing else came.
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { tinyQwen3, useLive } from './helpers/live-server.js';
import { useThinkingQwen3Template } from './helpers/random-checkpoint.js';

const live = useLive({
  model: tinyQwen3({ layers: 2, seed: 3 }),
  engine: { parallel: 2 },
  // The thinking variant of the Qwen3 template: the generation prompt opens "<think>\n"
  // unless enable_thinking is false (then it closes an empty block, as the original does).
  prepare: useThinkingQwen3Template,
});

const weather: OpenAI.ChatCompletionTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather in a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string', maxLength: 12 }, unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } },
      required: ['city', 'unit'],
      additionalProperties: false,
    },
  },
};
const time: OpenAI.ChatCompletionTool = {
  type: 'function',
  function: {
    name: 'get_time',
    description: 'Current time in a time zone',
    parameters: { type: 'object', properties: { zone: { type: 'string', maxLength: 8 } }, required: ['zone'], additionalProperties: false },
  },
};
const TOOLS = [weather, time];
const noThinking = { chat_template_kwargs: { enable_thinking: false } } as Record<string, unknown>;
const ask: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'What is the weather in Paris, and the time in Tokyo?' }];

/** The declared tool a call names, with its arguments checked against the schema. */
function checkCall(name: string, args: string, allowed: string[]): void {
  expect(allowed).toContain(name);
  const value = JSON.parse(args) as Record<string, unknown>;
  if (name === 'get_weather') {
    expect(Object.keys(value).sort()).toEqual(['city', 'unit']);
    expect(typeof value.city).toBe('string');
    expect((value.city as string).length).toBeLessThanOrEqual(12);
    expect(['celsius', 'fahrenheit']).toContain(value.unit);
  } else {
    expect(Object.keys(value)).toEqual(['zone']);
    expect((value.zone as string).length).toBeLessThanOrEqual(8);
  }
}

async function streamed(params: OpenAI.ChatCompletionCreateParamsStreaming) {
  const stream = await live.openai.chat.completions.create(params);
  let content = '';
  let reasoning = '';
  let finish: string | null = null;
  let reasoningOnly: unknown;
  const calls: Array<{ id?: string; name: string; args: string; chunks: number }> = [];
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    const delta = choice.delta as OpenAI.ChatCompletionChunk.Choice.Delta & { reasoning_content?: string; reasoning_only?: boolean };
    content += delta.content ?? '';
    reasoning += delta.reasoning_content ?? '';
    for (const d of delta.tool_calls ?? []) {
      if (d.id) calls[d.index] = { id: d.id, name: d.function!.name!, args: d.function!.arguments ?? '', chunks: 0 };
      else {
        calls[d.index]!.args += d.function!.arguments ?? '';
        calls[d.index]!.chunks++;
      }
    }
    if (choice.finish_reason) {
      finish = choice.finish_reason;
      reasoningOnly = delta.reasoning_only;
    }
  }
  return { content, reasoning, finish, calls, reasoningOnly };
}

describe('forced tool_choice returns a valid call to a declared function', () => {
  it('required (non-streaming)', async () => {
    const res = await live.openai.chat.completions.create({ model: 'm', messages: ask, tools: TOOLS, tool_choice: 'required', max_tokens: 80, temperature: 0, ...noThinking });
    const choice = res.choices[0]!;
    expect(choice.finish_reason).toBe('tool_calls');
    expect(choice.message.content).toBeNull();
    expect(choice.message.tool_calls).toHaveLength(1);
    const call = choice.message.tool_calls![0]! as OpenAI.ChatCompletionMessageFunctionToolCall;
    expect(call.id).toMatch(/^call_[A-Za-z0-9]{24}$/);
    expect(call.type).toBe('function');
    checkCall(call.function.name, call.function.arguments, ['get_weather', 'get_time']);
  });

  it('required with n = 2: each choice is its own valid call (a constraint per choice)', async () => {
    const res = await live.openai.chat.completions.create({ model: 'm', messages: ask, tools: TOOLS, tool_choice: 'required', max_tokens: 80, temperature: 0.9, seed: 11, n: 2, ...noThinking });
    expect(res.choices.map((c) => c.index)).toEqual([0, 1]);
    for (const choice of res.choices) {
      expect(choice.finish_reason).toBe('tool_calls');
      expect(choice.message.tool_calls).toHaveLength(1);
      const call = choice.message.tool_calls![0]! as OpenAI.ChatCompletionMessageFunctionToolCall;
      checkCall(call.function.name, call.function.arguments, ['get_weather', 'get_time']);
    }
  });

  it('required (streaming): a start chunk, then argument pieces that add up', async () => {
    const out = await streamed({ model: 'm', messages: ask, tools: TOOLS, tool_choice: 'required', max_tokens: 80, temperature: 0.7, seed: 5, stream: true, ...noThinking });
    expect(out.finish).toBe('tool_calls');
    expect(out.content).toBe('');
    expect(out.calls).toHaveLength(1);
    checkCall(out.calls[0]!.name, out.calls[0]!.args, ['get_weather', 'get_time']);
    // Hermes calls stream their arguments as they are generated.
    expect(out.calls[0]!.chunks).toBeGreaterThan(1);
  });

  it('with the reasoning block left open by the prompt, the call follows its closing', async () => {
    const res = await live.openai.chat.completions.create({ model: 'm', messages: ask, tools: TOOLS, tool_choice: 'required', max_tokens: 80, temperature: 0 });
    const choice = res.choices[0]!;
    expect(choice.finish_reason).toBe('tool_calls');
    expect((choice.message as { reasoning_content?: string }).reasoning_content).toBeUndefined();
    const call = choice.message.tool_calls![0]! as OpenAI.ChatCompletionMessageFunctionToolCall;
    checkCall(call.function.name, call.function.arguments, ['get_weather', 'get_time']);
  });

  it('the named form calls that function, streamed or not', async () => {
    const named = { type: 'function', function: { name: 'get_time' } } as const;
    const res = await live.openai.chat.completions.create({ model: 'm', messages: ask, tools: TOOLS, tool_choice: named, max_tokens: 80, temperature: 0, ...noThinking });
    expect(res.choices[0]!.finish_reason).toBe('tool_calls');
    const call = res.choices[0]!.message.tool_calls![0]! as OpenAI.ChatCompletionMessageFunctionToolCall;
    checkCall(call.function.name, call.function.arguments, ['get_time']);

    const out = await streamed({ model: 'm', messages: ask, tools: TOOLS, tool_choice: named, max_tokens: 80, temperature: 0, stream: true, ...noThinking });
    expect(out.finish).toBe('tool_calls');
    checkCall(out.calls[0]!.name, out.calls[0]!.args, ['get_time']);
  });
});

describe('tool rendering and refusals', () => {
  it('"none" renders no tools: the prompt is the one without tools', async () => {
    const usage = async (extra: Record<string, unknown>) =>
      (await live.openai.chat.completions.create({ model: 'm', messages: ask, max_tokens: 1, ...noThinking, ...extra })).usage!.prompt_tokens;
    const bare = await usage({});
    expect(await usage({ tools: TOOLS, tool_choice: 'none' })).toBe(bare);
    expect(await usage({ tools: [] })).toBe(bare);
    expect(await usage({ tools: TOOLS })).toBeGreaterThan(bare + 50);
  });

  it('answers 400 in the OpenAI envelope for every refused tool_choice', async () => {
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ tool_choice: 'required' }, /needs at least one tool/],
      [{ tools: [], tool_choice: 'required' }, /needs at least one tool/],
      [{ tools: TOOLS, tool_choice: { type: 'function', function: { name: 'get_stock_price' } } }, /not declared/],
      [{ tools: TOOLS, tool_choice: { type: 'custom', function: { name: 'get_time' } } }, /type must be "function"/],
      [{ tools: TOOLS, tool_choice: { type: 'function', function: { name: '' } } }, /non-empty string/],
      [{ tools: TOOLS, tool_choice: 'sometimes' }, /tool_choice must be/],
      [
        { tools: TOOLS, tool_choice: 'required', response_format: { type: 'json_schema', json_schema: { name: 'r', schema: { type: 'object' } } } },
        /cannot be combined with a constraining response_format/,
      ],
      [{ tools: [{ type: 'function', function: { description: 'no name' } }] }, /tools\[0\]\.function\.name is required/],
    ];
    for (const [extra, message] of cases) {
      const err = await live.openai.chat.completions.create({ model: 'm', messages: ask, max_tokens: 1, ...extra } as never).catch((e: unknown) => e);
      expect(err, JSON.stringify(extra)).toBeInstanceOf(OpenAI.BadRequestError);
      const e = err as InstanceType<typeof OpenAI.BadRequestError>;
      expect(e.message).toMatch(message);
      expect((e.error as { type?: string }).type).toBe('invalid_request_error');
    }
  });

  it('/health advertises the tool-call parser', async () => {
    const health = (await (await fetch(`${live.url}/health`)).json()) as { tool_call_parser: unknown };
    expect(health.tool_call_parser).toBe('mlxcel');
  });
});

describe('reasoning (the generation prompt opens <think>)', () => {
  it('POST /completion applies the thinking budget to a block its raw prompt opens', async () => {
    const prompt = '<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n';
    const complete = async (extra: Record<string, unknown>) => {
      const res = await fetch(`${live.url}/completion`, { method: 'POST', body: JSON.stringify({ prompt, temperature: 0, ...extra }) });
      expect(res.status).toBe(200);
      return (await res.json()) as { content: string; tokens_predicted: number };
    };
    const firstFour = (await complete({ n_predict: 4 })).content;
    const free = await complete({ n_predict: 14 });
    expect(free.content).not.toContain('</think>');
    for (const field of ['thinking_budget_tokens', 'reasoning_budget_tokens', 'reasoning_budget']) {
      const budgeted = await complete({ n_predict: 14, [field]: 4 });
      // Greedy: four reasoning tokens as without a budget, then the forced closing tag.
      expect(budgeted.content.startsWith(`${firstFour}</think>`)).toBe(true);
      expect(budgeted.tokens_predicted).toBe(14);
    }
  });

  it('a reply that never leaves the block is reasoning_only, streamed or not', async () => {
    const res = await live.openai.chat.completions.create({ model: 'm', messages: ask, max_tokens: 8, temperature: 0 });
    const message = res.choices[0]!.message as OpenAI.ChatCompletionMessage & { reasoning_content?: string; reasoning_only?: boolean };
    expect(message.content).toBe('');
    expect(message.reasoning_content).toBeTruthy();
    expect(message.reasoning_only).toBe(true);
    expect(res.choices[0]!.finish_reason).toBe('length');

    const out = await streamed({ model: 'm', messages: ask, max_tokens: 8, temperature: 0, stream: true });
    expect(out.reasoning).toBe(message.reasoning_content);
    expect(out.content).toBe('');
    expect(out.reasoningOnly).toBe(true);
  });

  it('a thinking budget closes the block after that many tokens (each alias)', async () => {
    type Reasoned = OpenAI.ChatCompletionMessage & { reasoning_content?: string; reasoning_only?: boolean };
    // Greedy: the budgeted reply's reasoning is the first four tokens of the free one.
    const free = await live.openai.chat.completions.create({ model: 'm', messages: ask, max_tokens: 4, temperature: 0 });
    const firstFour = (free.choices[0]!.message as Reasoned).reasoning_content;
    expect(firstFour).toBeTruthy();
    for (const field of ['thinking_budget_tokens', 'reasoning_budget_tokens', 'reasoning_budget']) {
      const res = (await live.openai.chat.completions.create({ model: 'm', messages: ask, max_tokens: 14, temperature: 0, [field]: 4 } as never)) as OpenAI.ChatCompletion;
      const message = res.choices[0]!.message as Reasoned;
      expect(message.reasoning_content).toBe(firstFour);
      // Then the forced "</think>", then the answer.
      expect(message.content).toBeTruthy();
      expect(message.content).not.toContain('think>');
      expect(message.reasoning_only).toBeUndefined();
      expect(res.usage!.completion_tokens).toBe(14);
    }
  });
});
