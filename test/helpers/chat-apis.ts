// One chat turn through every chat API of a live server, streamed and not, with the
// official clients, reduced to what each says: the text, the calls and how the turn ended.
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { expect } from 'vitest';

export interface SeenTurn {
  content: string;
  calls: Array<{ name: string; arguments: string; status?: string }>;
  finish: string | null;
}

export interface ChatTool {
  name: string;
  parameters: Record<string, unknown>;
}

export type ApiName = 'chat' | 'chat stream' | 'responses' | 'responses stream' | 'messages' | 'messages stream';

/**
 * "Weather in Paris?" with `tools` (tool_choice required/any when `forced`, else auto),
 * greedy, at most `maxTokens`, through chat completions, Responses and Anthropic Messages.
 * Anthropic calls show their input as JSON text.
 */
export async function everyApi(url: string, maxTokens: number, tools: ChatTool[], forced: boolean): Promise<Record<ApiName, SeenTurn>> {
  const openai = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
  const anthropic = new Anthropic({ baseURL: url, apiKey: 'unused', maxRetries: 0 });
  const chatParams = {
    model: 'q',
    messages: [{ role: 'user' as const, content: 'Weather in Paris?' }],
    tools: tools.map((t) => ({ type: 'function' as const, function: t })),
    tool_choice: forced ? ('required' as const) : ('auto' as const),
    max_tokens: maxTokens,
    temperature: 0,
  };
  const fromChat = (message: OpenAI.ChatCompletionMessage, finish: string | null): SeenTurn => ({
    content: message.content ?? '',
    calls: (message.tool_calls ?? []).flatMap((c) => (c.type === 'function' ? [{ name: c.function.name, arguments: c.function.arguments }] : [])),
    finish,
  });
  const chat = await openai.chat.completions.create(chatParams);
  const chatStream = await openai.chat.completions.stream(chatParams).finalChatCompletion();

  const responsesParams = {
    model: 'q',
    input: 'Weather in Paris?',
    tools: tools.map((t) => ({ type: 'function' as const, name: t.name, parameters: t.parameters, strict: false })),
    tool_choice: forced ? ('required' as const) : ('auto' as const),
    max_output_tokens: maxTokens,
    temperature: 0,
  };
  const fromResponse = (r: OpenAI.Responses.Response): SeenTurn => ({
    content: r.output_text,
    calls: r.output.flatMap((o) => (o.type === 'function_call' ? [{ name: o.name, arguments: o.arguments, status: o.status }] : [])),
    finish: `${r.status}:${r.incomplete_details?.reason}`,
  });
  const responses = await openai.responses.create(responsesParams);
  const responsesStream = await openai.responses.stream(responsesParams).finalResponse();

  const messagesParams = {
    model: 'q',
    max_tokens: maxTokens,
    temperature: 0,
    messages: [{ role: 'user' as const, content: 'Weather in Paris?' }],
    tools: tools.map((t) => ({ name: t.name, input_schema: t.parameters as Anthropic.Tool.InputSchema })),
    tool_choice: forced ? { type: 'any' as const } : { type: 'auto' as const },
  };
  const fromMessage = (m: Anthropic.Message): SeenTurn => ({
    content: m.content.map((b) => (b.type === 'text' ? b.text : '')).join(''),
    calls: m.content.flatMap((b) => (b.type === 'tool_use' ? [{ name: b.name, arguments: JSON.stringify(b.input) }] : [])),
    finish: m.stop_reason,
  });
  const message = await anthropic.messages.create(messagesParams);
  const messageStream = await anthropic.messages.stream(messagesParams).finalMessage();
  return {
    chat: fromChat(chat.choices[0]!.message, chat.choices[0]!.finish_reason),
    'chat stream': fromChat(chatStream.choices[0]!.message, chatStream.choices[0]!.finish_reason),
    responses: fromResponse(responses),
    'responses stream': fromResponse(responsesStream),
    messages: fromMessage(message),
    'messages stream': fromMessage(messageStream),
  };
}

/**
 * A turn cut off by the token limit with `calls` open: chat's finish_reason "length" with
 * the arguments so far, Responses incomplete with the calls incomplete, Anthropic
 * max_tokens with the input read so far (`input`, one JSON text per call; "{}" by default).
 */
export function expectCutOnEveryApi(seen: Record<ApiName, SeenTurn>, content: string, calls: Array<{ name: string; arguments: string }>, input?: string[]): void {
  for (const api of ['chat', 'chat stream'] as const) expect(seen[api], api).toEqual({ content, calls, finish: 'length' });
  for (const api of ['responses', 'responses stream'] as const) {
    expect(seen[api], api).toEqual({ content, calls: calls.map((c) => ({ ...c, status: 'incomplete' })), finish: 'incomplete:max_output_tokens' });
  }
  const inputs = calls.map((c, i) => ({ name: c.name, arguments: input?.[i] ?? '{}' }));
  for (const api of ['messages', 'messages stream'] as const) expect(seen[api], api).toEqual({ content, calls: inputs, finish: 'max_tokens' });
}
