// The chat completion's reply on the wire: message.content / reasoning_content /
// tool_calls (JSON), or the chunk sequence (SSE) where reasoning, content and tool-call
// deltas each get their own chunks, finish_reason "tool_calls" when the reply called tools,
// and reasoning_only when everything stayed in the reasoning channel.
import type { Response } from 'express';
import { ChatOutput, parseChatOutput, type ChatReply, type OutputDelta } from '../chat/chat-output.js';
import type { TextGenerationEvent, TextGenerationResult } from '../chat/text-generation.js';
import type { TextTokenizer } from '../models/tokenizer.js';
import type { PreparedChat } from './chat-prepare.js';
import { chatLogprobs } from './logprobs.js';
import type { ResponseHead } from './openai-shared.js';
import { endSse, runSse, sendSse } from './sse.js';

type FinishReason = TextGenerationResult['finishReason'] | 'tool_calls';

function finishReason(result: TextGenerationResult, reply: ChatReply): FinishReason {
  return reply.toolCalls.length > 0 ? 'tool_calls' : result.finishReason;
}

/** Tokens were generated, but all of them stayed reasoning. */
function reasoningOnly(result: TextGenerationResult, reply: ChatReply): boolean {
  return result.usage.completion_tokens > 0 && reply.content === '' && reply.toolCalls.length === 0 && reply.reasoning !== '';
}

function checkForced(prepared: PreparedChat, reply: ChatReply, warn: (m: string) => void): void {
  if (prepared.forced && reply.toolCalls.length === 0) warn(`tool_choice forced a call (${prepared.forced.kind}) but the reply has none`);
}

/** `tokenizer` renders the logprobs of a request that asked for them (result.tokens). */
export function chatCompletionBody(
  head: ResponseHead,
  result: TextGenerationResult,
  prepared: PreparedChat,
  warn: (message: string) => void,
  tokenizer?: TextTokenizer,
): Record<string, unknown> {
  const reply = parseChatOutput(result.text, prepared.output);
  checkForced(prepared, reply, warn);
  const called = reply.toolCalls.length > 0;
  const message: Record<string, unknown> = { role: 'assistant', content: reply.content === '' && called ? null : reply.content };
  if (reply.reasoning) message.reasoning_content = reply.reasoning;
  if (called) message.tool_calls = reply.toolCalls;
  if (reasoningOnly(result, reply)) message.reasoning_only = true;
  return {
    ...head,
    object: 'chat.completion',
    choices: [{ index: 0, message, finish_reason: finishReason(result, reply), logprobs: result.tokens && tokenizer ? chatLogprobs(tokenizer, result.tokens) : null }],
    usage: result.usage,
  };
}

/** The chunks one delta becomes: reasoning, content, then each tool-call piece. */
export function deltaChunks(delta: OutputDelta): Array<Record<string, unknown>> {
  const out: Array<Record<string, unknown>> = [];
  if (delta.reasoning) out.push({ reasoning_content: delta.reasoning });
  if (delta.content) out.push({ content: delta.content });
  for (const call of delta.toolCalls) out.push({ tool_calls: [call] });
  return out;
}

export async function streamChatCompletion(
  res: Response,
  events: AsyncIterable<TextGenerationEvent>,
  head: ResponseHead,
  prepared: PreparedChat,
  includeUsage: boolean,
  warn: (message: string) => void,
  /** Set when the request asked for logprobs: each token's go on the first chunk it produced. */
  tokenizer?: TextTokenizer,
): Promise<void> {
  const output = new ChatOutput(prepared.output);
  const chunk = (choices: unknown[], extra: Record<string, unknown> = {}) => ({ ...head, object: 'chat.completion.chunk', choices, ...extra });
  const send = (delta: Record<string, unknown>, finish: FinishReason | null = null, logprobs: unknown = null) =>
    sendSse(res, chunk([{ index: 0, delta, finish_reason: finish, logprobs }]));
  await runSse(res, async () => {
    send({ role: 'assistant' });
    for await (const event of events) {
      if (event.type === 'text') {
        // One token's text: every part of what it decided goes out now.
        const deltas = deltaChunks(output.push(event.text));
        if (tokenizer && event.token?.logprobs) {
          // A token whose text was held back or suppressed (tool-call markup, a partial
          // stop string) still gets its chunk, with empty content, so chunks and tokens stay
          // one to one for clients that index logprobs by position.
          if (deltas.length === 0) deltas.push({ content: '' });
          const logprobs = chatLogprobs(tokenizer, [event.token]);
          deltas.forEach((delta, i) => send(delta, null, i === 0 ? logprobs : null));
          continue;
        }
        for (const delta of deltas) send(delta);
        continue;
      }
      const { delta, reply } = output.finish();
      for (const d of deltaChunks(delta)) send(d);
      checkForced(prepared, reply, warn);
      send(reasoningOnly(event.result, reply) ? { reasoning_only: true } : {}, finishReason(event.result, reply));
      if (includeUsage) sendSse(res, chunk([], { usage: event.result.usage }));
      endSse(res, true);
    }
  });
}
