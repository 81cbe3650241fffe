// Several choices in one response: OpenAI's n (choices of one prompt, which share its
// prefill: Engine.generateChoices) and several prompts in one request (batched
// completions), numbered prompt-major as OpenAI numbers them (prompt p's choice j is index
// p * n + j). Their streams are read together, each event tagged with its choice.
import type { Usage } from '../chat/text-generation.js';
import type { SamplingParams } from '../engine/types.js';
import type { RequestContext } from './request-context.js';

/** The most choices one request may ask for (n). */
export const MAX_CHOICES = 16;
/** The most results one request may ask for: prompts times n. */
export const MAX_RESULTS = 64;

/**
 * Choice `index`'s sampling: a seeded request's choice i draws from seed + i, as vLLM
 * seeds its choices, so each is reproducible and choice 0 is what n = 1 gets; without a
 * seed every choice gets a random one.
 */
export function choiceSampling(sampling: SamplingParams, index: number): SamplingParams {
  return sampling.seed === undefined || index === 0 ? sampling : { ...sampling, seed: sampling.seed + index };
}

/**
 * One usage for the choices of a request, in index order with `n` choices per prompt:
 * each prompt counted once (with its first choice's cached tokens), every choice's
 * completion tokens summed.
 */
export function combinedUsage(usages: readonly Usage[], n: number): Usage {
  let prompt = 0;
  let cached = 0;
  let completion = 0;
  usages.forEach((usage, i) => {
    if (i % n === 0) {
      prompt += usage.prompt_tokens;
      cached += usage.prompt_tokens_details.cached_tokens;
    }
    completion += usage.completion_tokens;
  });
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion, prompt_tokens_details: { cached_tokens: cached } };
}

/**
 * The events of every stream as they come, each with its stream's index. Ending the
 * iteration early, or a stream that fails, ends the others (which frees their sequences).
 */
export async function* mergeChoices<T>(streams: readonly AsyncIterable<T>[]): AsyncGenerator<{ index: number; event: T }> {
  const iterators = streams.map((s) => s[Symbol.asyncIterator]());
  const pending = new Map<number, Promise<{ index: number; result: IteratorResult<T> }>>();
  const pull = (index: number) => pending.set(index, iterators[index]!.next().then((result) => ({ index, result })));
  iterators.forEach((_, i) => pull(i));
  try {
    while (pending.size > 0) {
      const { index, result } = await Promise.race(pending.values());
      if (result.done) {
        pending.delete(index);
        continue;
      }
      pull(index);
      yield { index, event: result.value };
    }
  } finally {
    // Not awaited: a stream whose read is in flight closes when that read settles (at its
    // next token), and nobody waits for that.
    for (const read of pending.values()) read.catch(() => {});
    for (const it of iterators) it.return?.().catch(() => {});
  }
}

/** Drives every stream to its end: each one's value as `finish` picks it, or undefined when any ended without one (the client left). */
export async function collectChoices<T, R>(streams: readonly AsyncIterable<T>[], finish: (event: T) => R | undefined): Promise<R[] | undefined> {
  const results: Array<R | undefined> = streams.map(() => undefined);
  for await (const { index, event } of mergeChoices(streams)) results[index] = finish(event) ?? results[index];
  return results.every((r) => r !== undefined) ? (results as R[]) : undefined;
}

/**
 * The request's context for a route that queues several generations: its signal also
 * aborts when the route calls `close` (always, once it is done), so a batch refused half
 * way (a full queue) or a response that ended early leaves nothing queued or running.
 */
export function choicesScope(context: RequestContext): { context: RequestContext; close: () => void } {
  const controller = new AbortController();
  return { context: { ...context, signal: AbortSignal.any([context.signal, controller.signal]) }, close: () => controller.abort() };
}
