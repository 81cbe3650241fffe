// GPT-OSS chat through the real server and engine: a random-weight gpt_oss checkpoint (MXFP4
// experts, sinks, sliding and full layers) with the real o200k_harmony tokenizer and GPT-OSS's
// own chat template (test/fixtures/openai-gpt-oss-120b.jinja, as llama.cpp vendors it). The
// reply is Harmony: the analysis channel is reasoning_content, a commentary message to
// functions.NAME is a tool call, parsed by the existing Harmony parser. Random weights write
// no Harmony of their own, so a GBNF grammar (llama-server's `grammar` field) makes the reply
// one analysis message and one call, whatever the weights; the template's rendering of the
// tools and of a finished call is checked on /apply-template. (The Harmony parser's streaming
// is tested on text in tool-call-formats.test.ts.)
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { useLive } from './helpers/live-server.js';

const TEMPLATE = readFileSync(new URL('./fixtures/openai-gpt-oss-120b.jinja', import.meta.url), 'utf8');

const live = useLive({
  model: { arch: 'gpt_oss', tokenizer: 'gptoss', hidden: 64, layers: 2, heads: 4, kvHeads: 2, headDim: 16, intermediate: 64, tie: true, seed: 5, extraConfig: { sliding_window: 8 } },
  prepare: (dir) => {
    const path = join(dir, 'tokenizer_config.json');
    writeFileSync(path, JSON.stringify({ ...JSON.parse(readFileSync(path, 'utf8')), chat_template: TEMPLATE }));
  },
});

const weather: OpenAI.ChatCompletionTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};

// One analysis message, then a call to get_weather with a lower-case city, ending in <|call|>.
const HARMONY_CALL = [
  'root ::= analysis call',
  'analysis ::= "<|channel|>analysis<|message|>" [a-z] [a-z ]{0,15} "<|end|>"',
  'call ::= "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\\"city\\": \\"" [a-z]{1,8} "\\"}<|call|>"',
].join('\n');

type Message = OpenAI.ChatCompletionMessage & { reasoning_content?: string };

const request = {
  model: 'gpt-oss',
  messages: [{ role: 'user', content: 'Weather in Paris?' }],
  tools: [weather],
  // The grammar's markup is spelled from ordinary tokens (a grammar never emits special
  // ones), ~80 of them.
  max_tokens: 160,
  temperature: 0,
  grammar: HARMONY_CALL,
} as OpenAI.ChatCompletionCreateParamsNonStreaming;

describe('GPT-OSS (Harmony) chat', () => {
  it('the analysis channel is reasoning_content and the commentary call a tool call', async () => {
    const res = await live.openai.chat.completions.create(request);
    const choice = res.choices[0]!;
    const message = choice.message as Message;
    expect(choice.finish_reason).toBe('tool_calls');
    expect(message.reasoning_content).toMatch(/^[a-z][a-z ]*$/);
    expect(message.content ?? '').toBe('');
    expect(message.tool_calls).toHaveLength(1);
    const call = message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    expect(call.function.name).toBe('get_weather');
    expect(JSON.parse(call.function.arguments)).toEqual({ city: expect.stringMatching(/^[a-z]{1,8}$/) });
  });

  it('a plain reply: Harmony markup never reaches the content', async () => {
    const res = await live.openai.chat.completions.create({ model: 'gpt-oss', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 6, temperature: 0 });
    const choice = res.choices[0]!;
    const message = choice.message as Message;
    expect(['stop', 'length']).toContain(choice.finish_reason);
    expect(`${message.content ?? ''}${message.reasoning_content ?? ''}`).not.toMatch(/<\|(channel|message|start|end|call|return)\|>/);
    expect(res.usage!.completion_tokens).toBeGreaterThan(0);
  });

  it("renders GPT-OSS's template: the tools as a functions namespace, a past call (recipient before the channel) and its result", async () => {
    const res = await live.post('/apply-template', {
      messages: [
        { role: 'user', content: 'Weather in Paris?' },
        { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
        { role: 'tool', tool_call_id: 'c1', content: '{"temp": 21}' },
      ],
      tools: [weather],
    });
    expect(res.status).toBe(200);
    const prompt = (res.body as { prompt: string }).prompt;
    expect(prompt).toContain('namespace functions {');
    expect(prompt).toContain('type get_weather = (_: {');
    expect(prompt).toContain('<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>');
    expect(prompt).toContain('<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"{\\"temp\\": 21}"<|end|>');
    expect(prompt.endsWith('<|start|>assistant')).toBe(true);
  });
});
