// What chat and text completions share on the wire: response ids and heads, and the
// stream's framing (chunks of one choice, the optional usage chunk, [DONE]).
import { randomBytes } from 'node:crypto';
import type { Response } from 'express';
import type { Usage } from '../../chat/text-generation.js';
import type { Engine } from '../../engine/engine.js';
import type { Timings } from '../../engine/types.js';
import { endSse, sendSse } from '../sse.js';

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

/**
 * A generation's top-level `timings` (llama-server's fields and the draft counters) when
 * speculative decoding ran a verify round for it; nothing on plain decode.
 */
export function draftTimings(timings: Timings): { timings?: Timings } {
  return timings.draft_rounds ? { timings } : {};
}

/**
 * A stream's framing: `send` writes a chunk of one choice (top-level `extra` fields after it); `end` the usage chunk (when
 * asked for) and [DONE]; `fail`, after the error event of a generation that failed, one
 * chunk closing the given choices with finish_reason "error", and [DONE].
 */
export function openAIStream(res: Response, head: ResponseHead, object: 'chat.completion.chunk' | 'text_completion', includeUsage: boolean) {
  const chunk = (choices: unknown[], extra: Record<string, unknown> = {}) => ({ ...head, object, choices, ...extra });
  return {
    send: (choice: Record<string, unknown>, extra: Record<string, unknown> = {}) => sendSse(res, chunk([choice], extra)),
    end(usage: Usage): void {
      if (includeUsage) sendSse(res, chunk([], { usage }));
      endSse(res, true);
    },
    fail(closing: Array<Record<string, unknown>>): void {
      sendSse(res, chunk(closing.map((choice) => ({ ...choice, finish_reason: 'error' }))));
      endSse(res, true);
    },
  };
}
