// The one place where engine tokens become response text: detokenizing, stop strings,
// usage and timings. Every API family consumes this and only reshapes its events.
import type { Engine } from '../engine/engine.js';
import type {
  DraftStats,
  FinishReason,
  GenerationEvent,
  GenerationRequest,
  LoopDetection,
  Priority,
  PromptImage,
  PromptProgress,
  SamplingParams,
  Timings,
  TokenConstraint,
  TokenLogprob,
} from '../engine/types.js';
import { IncrementalDetokenizer } from './detokenizer.js';
import { StopMatcher } from './stop-matcher.js';

export interface TextGenerationParams {
  promptTokens: number[];
  /** Already fitted to the context; 0 answers at once with no tokens. */
  maxTokens: number;
  sampling: SamplingParams;
  stop: readonly string[];
  /** The client's lifetime: aborting ends generation and the iteration without a 'done'. */
  signal?: AbortSignal;
  priority?: Priority;
  /** The slot to run in (GenerationRequest.slot); absent: any. */
  slot?: number;
  /** Restricts sampled tokens (a grammar, a reasoning budget). */
  constraint?: TokenConstraint;
  /** Special tokens whose text is kept (tool-call and reasoning markup); others are skipped. */
  keepSpecialIds?: ReadonlySet<number>;
  /** A 'text' event for every token, even an empty one: one event per generated token. */
  everyToken?: boolean;
  /** Top logprobs per token besides the chosen one's (0-20); undefined = none. Implies everyToken. */
  logprobs?: number;
  /** Logprobs of the distribution each token was drawn from (GenerationRequest.postSamplingProbs). */
  postSamplingProbs?: boolean;
  /** Keep every generated token in the result's `tokens` (implied by logprobs). */
  collectTokens?: boolean;
  /** Each token's 'text' event carries the timings so far (llama-server's timings_per_token). */
  timingsPerToken?: boolean;
  /** Called after each prefill chunk, before the first token (llama-server's return_progress). */
  onProgress?: (progress: PromptProgress) => void;
  loopDetection?: LoopDetection;
  /** false: no prompt-cache reuse or donation for this request. */
  cachePrompt?: boolean;
  /** --context-shift: a full context drops its older half after `keep` tokens (GenerationRequest.contextShift). */
  contextShift?: { keep: number };
  /** A vision-language model's image soft tokens in the prompt (GenerationRequest.images). */
  images?: PromptImage[];
}

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  /** OpenAI's split of the prompt: the tokens that came from the prompt cache. */
  prompt_tokens_details: { cached_tokens: number };
}

/** One generated token, with the logprobs the request asked for (chosen first, then the top ones). */
export interface GeneratedToken {
  id: number;
  logprobs?: TokenLogprob[];
}

export interface TextGenerationResult {
  finishReason: FinishReason;
  /** The stop string that ended generation, when one did. */
  stopString?: string;
  usage: Usage;
  timings: Timings;
  /** The whole completion: the concatenation of every 'text' event. */
  text: string;
  /** Prompt tokens reused from the prompt cache (timings.prompt_n counts the rest). */
  cachedTokens: number;
  /** Every generated token (with its logprobs, when asked for), when the request asked for logprobs or the tokens. */
  tokens?: GeneratedToken[];
  /** A context shift dropped some of the sequence's tokens (--context-shift). */
  contextShifted?: true;
}

/**
 * `token`: the generated token behind this text (absent for text released at the end);
 * `timings`: the generation's so far, after this token, when asked for (`cache_n` the
 * prompt tokens the prompt cache served, as in the final result's `cachedTokens`).
 */
export type TextGenerationEvent =
  | { type: 'text'; text: string; token?: GeneratedToken; timings?: Timings & { cache_n: number } }
  | { type: 'done'; result: TextGenerationResult };

/**
 * Queues a generation's choices right away (one, or n over one prompt:
 * Engine.generateChoices), so that the engine's synchronous refusal (a full queue) reaches
 * the caller before it commits to a response; iterating each stream yields its text. The
 * choices share the prompt, token budget and client; each brings its own sampling seed and
 * constraint.
 */
export function generateTexts(engine: Engine, choices: TextGenerationParams[]): AsyncGenerator<TextGenerationEvent>[] {
  const { maxTokens, signal } = choices[0]!;
  // No room for tokens, or nobody left to read them: the engine is not involved.
  const streams = maxTokens > 0 && !signal?.aborted ? engine.generateChoices(choices.map(engineRequest)) : undefined;
  return choices.map((params, i) => textEvents(engine, params, streams?.[i]));
}

function engineRequest(params: TextGenerationParams): GenerationRequest {
  const { promptTokens, maxTokens, sampling, signal, priority, slot, constraint, logprobs, postSamplingProbs, loopDetection, cachePrompt, contextShift, onProgress, images } = params;
  return {
    promptTokens,
    maxTokens,
    sampling,
    signal,
    priority,
    ...(slot === undefined ? {} : { slot }),
    ...(constraint ? { constraint } : {}),
    ...(logprobs === undefined ? {} : { logprobs }),
    ...(loopDetection ? { loopDetection } : {}),
    ...(cachePrompt === undefined ? {} : { cachePrompt }),
    ...(contextShift ? { contextShift } : {}),
    ...(onProgress ? { progress: true } : {}),
    ...(postSamplingProbs ? { postSamplingProbs: true } : {}),
    ...(images ? { images } : {}),
  };
}

async function* textEvents(
  engine: Engine,
  params: TextGenerationParams,
  events: AsyncIterable<GenerationEvent> | undefined,
): AsyncGenerator<TextGenerationEvent> {
  const { promptTokens, signal } = params;
  const clock = new Clock();
  const { tokenizer } = engine;
  const keep = params.keepSpecialIds;
  // Constrained text must be the tokens' exact bytes: no " ," -> "," clean-up (Llama 3's config asks for it).
  const cleanUp = params.constraint ? false : undefined;
  const decode = keep?.size
    ? (ids: number[]) => tokenizer.decode(ids.filter((id) => keep.has(id) || !tokenizer.isSpecial(id)), false, cleanUp)
    : (ids: number[]) => tokenizer.decode(ids, true, cleanUp);
  const detokenizer = new IncrementalDetokenizer(decode, promptTokens);
  const stops = new StopMatcher(params.stop);
  const wantLogprobs = params.logprobs !== undefined;
  const everyToken = params.everyToken || wantLogprobs;
  const tokens: GeneratedToken[] | undefined = wantLogprobs || params.collectTokens ? [] : undefined;
  let text = '';
  let completionTokens = 0;
  let cachedPrompt = 0;
  let contextShifted = false;
  /** Speculative decoding's totals, from the last token that carried them. */
  let draft: DraftStats | undefined;
  const done = (
    finishReason: FinishReason,
    stopString: string | undefined,
    timings: Timings,
    promptN = promptTokens.length,
    cachedTokens = 0,
  ): TextGenerationEvent => ({
    type: 'done',
    result: {
      finishReason,
      ...(stopString === undefined ? {} : { stopString }),
      usage: {
        prompt_tokens: promptN,
        completion_tokens: completionTokens,
        total_tokens: promptN + completionTokens,
        prompt_tokens_details: { cached_tokens: cachedTokens },
      },
      timings,
      text,
      cachedTokens,
      ...(tokens ? { tokens } : {}),
      ...(contextShifted ? { contextShifted: true as const } : {}),
    },
  });

  if (!events) {
    // No room for tokens, or the client is already gone.
    if (!signal?.aborted) yield done('length', undefined, clock.timings(promptTokens.length, 0));
    return;
  }

  // Leaving this loop early (stop string, consumer gone) returns the engine's iterator,
  // which frees the sequence.
  for await (const event of events) {
    if (event.type === 'progress') {
      const { total, cache, processed, timeMs } = event;
      params.onProgress?.({ total, cache, processed, timeMs });
      continue;
    }
    if (event.type === 'token') {
      clock.token();
      completionTokens++;
      if (event.cachedTokens !== undefined) cachedPrompt = event.cachedTokens;
      if (event.contextShifted) contextShifted = true;
      if (event.draft) draft = event.draft;
      const token: GeneratedToken = event.logprobs ? { id: event.id, logprobs: event.logprobs } : { id: event.id };
      tokens?.push(token);
      const match = stops.push(detokenizer.push(event.id));
      if (match.text || everyToken) {
        text += match.text;
        const timings = params.timingsPerToken
          ? { timings: { cache_n: cachedPrompt, ...clock.timings(promptTokens.length - cachedPrompt, completionTokens) } }
          : {};
        yield { type: 'text', text: match.text, token, ...timings };
      }
      if (match.stop !== undefined) {
        // A stop string pre-empts the engine's 'done': the cached count came with the first token.
        yield done('stop', match.stop, { ...clock.timings(promptTokens.length - cachedPrompt, completionTokens), ...draft }, promptTokens.length, cachedPrompt);
        return;
      }
      continue;
    }
    // The detokenizer may still hold an unfinished character, and the matcher a partial stop.
    const match = stops.push(detokenizer.flush());
    const rest = match.text + (match.stop === undefined ? stops.flush() : '');
    if (rest) {
      text += rest;
      yield { type: 'text', text: rest };
    }
    completionTokens = event.completionTokens;
    if (event.contextShifted) contextShifted = true;
    const reason = match.stop === undefined ? event.reason : 'stop';
    yield done(reason, match.stop, event.timings, event.promptTokens, event.cachedTokens ?? 0);
    return;
  }
  if (!signal?.aborted) throw new Error('engine ended a generation without a done event');
  // A client that left ends its generation quietly; a signal aborted with an error of its
  // own (the server's shutdown deadline) fails it with that error.
  if (signal.reason instanceof Error && signal.reason.name !== 'AbortError') throw signal.reason;
}

/** llama-server-style timings measured here, for generations this layer ends itself. */
class Clock {
  private readonly start = performance.now();
  private firstToken: number | undefined;
  private lastToken: number | undefined;

  token(): void {
    this.lastToken = performance.now();
    this.firstToken ??= this.lastToken;
  }

  timings(promptN: number, predictedN: number): Timings {
    const promptMs = (this.firstToken ?? performance.now()) - this.start;
    const predictedMs = this.lastToken === undefined || this.firstToken === undefined ? 0 : this.lastToken - this.firstToken;
    return {
      prompt_n: promptN,
      prompt_ms: promptMs,
      prompt_per_token_ms: promptN > 0 ? promptMs / promptN : 0,
      prompt_per_second: promptMs > 0 ? (promptN * 1000) / promptMs : 0,
      predicted_n: predictedN,
      predicted_ms: predictedMs,
      predicted_per_token_ms: predictedN > 0 ? predictedMs / predictedN : 0,
      predicted_per_second: predictedMs > 0 ? (predictedN * 1000) / predictedMs : 0,
    };
  }
}
