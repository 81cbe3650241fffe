// A chat turn (../chat-turn.ts) as a chat completion on the wire: the message (content,
// reasoning_content, tool_calls) as JSON, or the chunk sequence (SSE) with one chunk per
// turn event and each token's logprobs on the first chunk it produced. finish_reason is
// the turn's; reasoning_only marks a reply whose tokens all stayed in the reasoning channel.
// A generation that fails mid-stream ends with the error event, a finish_reason "error"
// chunk and [DONE].
import type { Response } from 'express';
import type { TextTokenizer } from '../../models/tokenizer.js';
import type { ChatEvent, FinishKind, OutputEvent, ToolCall, TurnResult } from '../chat-turn.js';
import { combinedUsage, mergeChoices } from '../choices.js';
import { chatLogprobs } from '../logprobs.js';
import { draftTimings, openAIStream, type ResponseHead } from './shared.js';
import { runSse } from '../sse.js';

/** Tokens were generated, but all of them stayed reasoning. */
function reasoningOnly(turn: TurnResult): boolean {
  return turn.generation.usage.completion_tokens > 0 && turn.content === '' && turn.toolCalls.length === 0 && turn.reasoning !== '';
}

const wireCall = (call: ToolCall) => ({ id: call.id, type: 'function', function: { name: call.name, arguments: call.arguments } });

/**
 * The turns as choices (several for n > 1, in index order) with their combined usage;
 * `tokenizer` renders the logprobs of turns started with them (generation.tokens);
 * `postSampling`: as post-sampling probabilities.
 */
export function chatCompletionBody(head: ResponseHead, turns: TurnResult[], tokenizer: TextTokenizer, postSampling = false): Record<string, unknown> {
  const choices = turns.map((turn, index) => {
    const called = turn.toolCalls.length > 0;
    const message: Record<string, unknown> = { role: 'assistant', content: turn.content === '' && called ? null : turn.content };
    if (turn.reasoning) message.reasoning_content = turn.reasoning;
    if (called) message.tool_calls = turn.toolCalls.map(wireCall);
    if (reasoningOnly(turn)) message.reasoning_only = true;
    const { tokens } = turn.generation;
    return { index, message, finish_reason: turn.finish, logprobs: tokens ? chatLogprobs(tokenizer, tokens, postSampling) : null };
  });
  // The first choice's timings, when it speculated.
  const timings = turns[0] ? draftTimings(turns[0].generation.timings) : {};
  return { ...head, object: 'chat.completion', choices, usage: combinedUsage(turns.map((t) => t.generation.usage), turns.length), ...timings };
}

/** The chunk delta of one event; a token that produced nothing gets empty content. */
export function chunkDelta(event: OutputEvent): Record<string, unknown> {
  switch (event.type) {
    case 'reasoning':
      return { reasoning_content: event.text };
    case 'content':
      return { content: event.text };
    case 'tool_call':
      return { tool_calls: [{ index: event.index, id: event.id, type: 'function', function: { name: event.name, arguments: '' } }] };
    case 'tool_arguments':
      return { tool_calls: [{ index: event.index, function: { arguments: event.delta } }] };
    case 'token':
      return { content: '' };
  }
}

/** The choices' chunks as their events come, each choice opened with its role; usage and [DONE] after the last one ends. */
export async function streamChatCompletion(
  res: Response,
  choices: AsyncIterable<ChatEvent>[],
  head: ResponseHead,
  includeUsage: boolean,
  tokenizer: TextTokenizer,
  postSampling = false,
): Promise<void> {
  const stream = openAIStream(res, head, 'chat.completion.chunk', includeUsage);
  const send = (index: number, delta: Record<string, unknown>, finish: FinishKind | null = null, logprobs: unknown = null, extra = {}) =>
    stream.send({ index, delta, finish_reason: finish, logprobs }, extra);
  const turns: Array<TurnResult | undefined> = choices.map(() => undefined);
  await runSse(res, async () => {
    choices.forEach((_, index) => send(index, { role: 'assistant' }));
    for await (const { index, event } of mergeChoices(choices)) {
      if (event.type !== 'done') {
        send(index, chunkDelta(event), null, event.token ? chatLogprobs(tokenizer, [event.token], postSampling) : null);
        continue;
      }
      send(index, reasoningOnly(event.turn) ? { reasoning_only: true } : {}, event.turn.finish, null, draftTimings(event.turn.generation.timings));
      turns[index] = event.turn;
    }
    if (turns.every((t) => t !== undefined)) stream.end(combinedUsage(turns.map((t) => t!.generation.usage), turns.length));
  }, () => stream.fail(turns.flatMap((t, index) => (t ? [] : [{ index, delta: {}, logprobs: null }]))));
}
