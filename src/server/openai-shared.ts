// What chat and text completions share on the wire: response ids and heads, and the
// streaming sequence (chunks, finish chunk, optional usage chunk, [DONE]).
import { randomBytes } from 'node:crypto';
import type { Response } from 'express';
import type { GeneratedToken, TextGenerationEvent } from '../chat/text-generation.js';
import type { Engine } from '../engine/engine.js';
import type { FinishReason } from '../engine/types.js';
import { endSse, runSse, sendSse } from './sse.js';

export interface ResponseHead {
  id: string;
  created: number;
  model: string;
  system_fingerprint: null;
}

export function responseHead(engine: Engine, idPrefix: 'chatcmpl' | 'cmpl'): ResponseHead {
  return {
    id: `${idPrefix}-${randomBytes(12).toString('hex')}`,
    created: Math.floor(Date.now() / 1000),
    model: engine.info.id,
    system_fingerprint: null,
  };
}

export interface StreamShape {
  object: 'chat.completion.chunk' | 'text_completion';
  /** A chat stream opens with a chunk announcing the role. */
  opening?: Record<string, unknown>;
  /** One choice: a text delta (finishReason null) or the closing one; `logprobs` null when none. */
  choice(text: string, finishReason: FinishReason | null, logprobs?: unknown): Record<string, unknown>;
}

export async function streamOpenAI(
  res: Response,
  events: AsyncIterable<TextGenerationEvent>,
  head: ResponseHead,
  shape: StreamShape,
  includeUsage: boolean,
  /** The logprobs of one chunk's token, when the request asked for them. */
  logprobs?: (token: GeneratedToken) => unknown,
): Promise<void> {
  const chunk = (choices: unknown[], extra: Record<string, unknown> = {}) => ({
    ...head,
    object: shape.object,
    choices,
    ...extra,
  });
  await runSse(res, async () => {
    if (shape.opening) sendSse(res, chunk([shape.opening]));
    for await (const event of events) {
      if (event.type === 'text') {
        sendSse(res, chunk([shape.choice(event.text, null, logprobs && event.token ? logprobs(event.token) : null)]));
        continue;
      }
      sendSse(res, chunk([shape.choice('', event.result.finishReason)]));
      if (includeUsage) sendSse(res, chunk([], { usage: event.result.usage }));
      endSse(res, true);
    }
  });
}
