// The clients people build agents with, run against one live server on a random-weight Qwen3
// model with the real Qwen3 tokenizer and chat template: a forced tool call, its result sent
// back and a final answer, through the AI SDK (openai-compatible and openai providers), the
// OpenAI Agents SDK and LangChain's ChatOpenAI; and structured output on /v1/messages through
// the AI SDK's anthropic provider and LangChain's ChatAnthropic. The weights are random: the
// call's arguments come from the tool-choice grammar, the final answer is random text cut by
// its token limit. Each loop is checked on the wire: the call came back to the server with
// its result, and the server rendered both into the prompt it generated from.
import { createAnthropic } from '@ai-sdk/anthropic';
import { createOpenAI } from '@ai-sdk/openai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { ChatAnthropic } from '@langchain/anthropic';
import { HumanMessage, ToolMessage } from '@langchain/core/messages';
import { tool as langchainTool } from '@langchain/core/tools';
import { ChatOpenAI } from '@langchain/openai';
import { Agent, OpenAIChatCompletionsModel, run, setTracingDisabled, tool as agentTool } from '@openai/agents';
import { generateObject, generateText, stepCountIs, tool, type LanguageModel } from 'ai';
import OpenAI from 'openai';
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { tinyQwen3, useLive } from './helpers/live-server.js';
import { useThinkingQwen3Template } from './helpers/random-checkpoint.js';

const live = useLive({
  model: tinyQwen3({ layers: 2, seed: 1 }),
  engine: { parallel: 2 },
  prepare: useThinkingQwen3Template,
  // Thinking off, as a deployment serving agents would run it: every token is the answer.
  server: { chatTemplateKwargs: { enable_thinking: false } },
});

/** One HTTP exchange a client made: the JSON it sent and the JSON it got back. */
interface Exchange {
  path: string;
  body: any;
  response: any;
}
let exchanges: Exchange[] = [];

/** The fetch every client is given: it records each exchange and passes it through. */
const recordingFetch = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
  const res = await fetch(input, init);
  const url = new URL(input instanceof Request ? input.url : input.toString());
  const isJson = res.headers.get('content-type')?.includes('application/json') ?? false;
  exchanges.push({
    path: url.pathname,
    body: typeof init?.body === 'string' ? JSON.parse(init.body) : undefined,
    response: isJson ? await res.clone().json() : undefined,
  });
  return res;
};

beforeAll(() => {
  setTracingDisabled(true);
});

beforeEach(() => {
  exchanges = [];
});

/** Tokens for the forced call (its markup, the name and two argument characters) and for the answer. */
const CALL_TOKENS = 48;
const ANSWER_TOKENS = 4;
const RESULT = 'sunny-21C';
const DESCRIPTION = 'Looks a city up';
const lookupSchema = z.object({ q: z.string().max(2) });

/**
 * A forced call and the turn after it, as the chat-completions requests show them: the call
 * named lookup with arguments the schema admits, sent back as the assistant's tool_calls
 * with its result in a tool message, and rendered by the server into the second prompt.
 */
async function expectToolRoundTrip(): Promise<void> {
  const chat = exchanges.filter((e) => e.path === '/v1/chat/completions');
  expect(chat).toHaveLength(2);
  const [first, second] = chat as [Exchange, Exchange];
  expect(first.response.choices[0].finish_reason).toBe('tool_calls');
  const [call] = first.response.choices[0].message.tool_calls;
  expect(call.function.name).toBe('lookup');
  expect(lookupSchema.parse(JSON.parse(call.function.arguments))).toBeTruthy();

  const messages = second.body.messages as Array<Record<string, any>>;
  const assistant = messages.find((m) => m.role === 'assistant')!;
  // Sent back in the OpenAI form: content null, absent or empty beside the calls.
  expect(assistant.content ?? '').toBe('');
  expect(assistant.tool_calls[0]).toMatchObject({ id: call.id, function: { name: 'lookup' } });
  const result = messages.find((m) => m.role === 'tool')!;
  expect(result.tool_call_id).toBe(call.id);
  expect(JSON.stringify(result.content)).toContain(RESULT);

  // The prompt the server generated the answer from holds the call and its result.
  const rendered = await fetch(`${live.url}/apply-template`, { method: 'POST', body: JSON.stringify(second.body) });
  const { prompt } = (await rendered.json()) as { prompt: string };
  expect(prompt).toMatch(/<tool_call>\n\{"name": "lookup", "arguments": \{"q": ?"/);
  expect(prompt).toMatch(new RegExp(`<tool_response>\\n.*${RESULT}.*\\n</tool_response>`));
  expect(second.response.usage.prompt_tokens).toBe(live.engine.tokenizer.encode(prompt, false).length);
  expect(second.response.choices[0].finish_reason).toBe('length');
}

describe('an agent loop over chat completions', () => {
  const aiSdkLoop = async (model: LanguageModel) => {
    const result = await generateText({
      model,
      tools: { lookup: tool({ description: DESCRIPTION, inputSchema: lookupSchema, execute: async () => RESULT }) },
      prompt: 'Weather in Paris?',
      toolChoice: 'required',
      temperature: 0,
      maxOutputTokens: CALL_TOKENS,
      // The call, then the answer without tools.
      prepareStep: ({ stepNumber }) => (stepNumber === 1 ? { toolChoice: 'none', maxOutputTokens: ANSWER_TOKENS } : undefined),
      stopWhen: stepCountIs(2),
    });
    expect(result.steps).toHaveLength(2);
    expect(result.steps[0]!.toolResults.map((r) => [r.toolName, r.output])).toEqual([['lookup', RESULT]]);
    expect(result.finishReason).toBe('length');
    await expectToolRoundTrip();
  };

  it('AI SDK generateText through @ai-sdk/openai-compatible', async () => {
    const provider = createOpenAICompatible({ name: 'local', baseURL: `${live.url}/v1`, fetch: recordingFetch });
    await aiSdkLoop(provider.chatModel('q'));
  });

  it('AI SDK generateText through @ai-sdk/openai (chat model)', async () => {
    const provider = createOpenAI({ baseURL: `${live.url}/v1`, apiKey: 'unused', fetch: recordingFetch });
    await aiSdkLoop(provider.chat('q'));
  });

  it('OpenAI Agents SDK with a chat-completions model', async () => {
    const client = new OpenAI({ baseURL: `${live.url}/v1`, apiKey: 'unused', maxRetries: 0, fetch: recordingFetch });
    const agent = new Agent({
      name: 'weather',
      instructions: 'Answer with the lookup tool.',
      // The Agents SDK pins an openai version of its own; the client's shape is the same.
      model: new OpenAIChatCompletionsModel(client as unknown as ConstructorParameters<typeof OpenAIChatCompletionsModel>[0], 'q'),
      tools: [agentTool({ name: 'lookup', description: DESCRIPTION, parameters: lookupSchema, execute: async () => RESULT })],
      // The SDK sets tool_choice back to auto after the call (resetToolChoice).
      modelSettings: { toolChoice: 'required', temperature: 0, maxTokens: CALL_TOKENS },
    });
    const result = await run(agent, 'Weather in Paris?', { maxTurns: 2 });
    expect(typeof result.finalOutput).toBe('string');
    await expectToolRoundTrip();
  });

  it('LangChain ChatOpenAI with bound tools and a ToolMessage back', async () => {
    const llm = (maxTokens: number) => new ChatOpenAI({ model: 'q', apiKey: 'unused', temperature: 0, maxTokens, maxRetries: 0, configuration: { baseURL: `${live.url}/v1`, fetch: recordingFetch } });
    const lookup = langchainTool(async () => RESULT, { name: 'lookup', description: DESCRIPTION, schema: lookupSchema });
    const question = new HumanMessage('Weather in Paris?');
    const reply = await llm(CALL_TOKENS).bindTools([lookup], { tool_choice: 'lookup' }).invoke([question]);
    expect(reply.tool_calls?.map((c) => c.name)).toEqual(['lookup']);
    const call = reply.tool_calls![0]!;
    const answer = await llm(ANSWER_TOKENS).bindTools([lookup]).invoke([question, reply, new ToolMessage({ content: await lookup.invoke(call.args as z.infer<typeof lookupSchema>), tool_call_id: call.id! })]);
    expect(typeof answer.content).toBe('string');
    await expectToolRoundTrip();
  });
});

describe('structured output on /v1/messages', () => {
  // Both clients rewrite what Claude's structured outputs lack (string and number bounds,
  // and for LangChain enums) into descriptions before sending: a date and a boolean keep
  // the document short.
  const pet = z.object({ born: z.iso.date(), tame: z.boolean() });

  /** The one Messages request carried the schema as output_config.format. */
  const expectOutputConfig = () => {
    const messages = exchanges.filter((e) => e.path === '/v1/messages');
    expect(messages).toHaveLength(1);
    expect(messages[0]!.body.output_config.format).toMatchObject({ type: 'json_schema', schema: { type: 'object', properties: { born: { type: 'string', format: 'date' } } } });
    expect(messages[0]!.response.stop_reason).toBe('end_turn');
  };

  it('AI SDK generateObject through @ai-sdk/anthropic', async () => {
    const anthropic = createAnthropic({ baseURL: `${live.url}/v1`, apiKey: 'unused', fetch: recordingFetch });
    // A Claude model id: the provider then asks for output_config.format on its own.
    const { object } = await generateObject({ model: anthropic('claude-sonnet-4-5'), schema: pet, prompt: 'A pet, please.', temperature: 0, maxOutputTokens: 32 });
    expect(pet.parse(object)).toEqual(object);
    expectOutputConfig();
  });

  it('LangChain ChatAnthropic.withStructuredOutput(schema, {method: "jsonSchema"})', async () => {
    const llm = new ChatAnthropic({ model: 'claude-sonnet-4-5', apiKey: 'unused', anthropicApiUrl: live.url, maxTokens: 32, temperature: 0, maxRetries: 0, clientOptions: { fetch: recordingFetch } });
    const object = await llm.withStructuredOutput(pet, { method: 'jsonSchema' }).invoke('A pet, please.');
    expect(pet.parse(object)).toEqual(object);
    expectOutputConfig();
  });
});
