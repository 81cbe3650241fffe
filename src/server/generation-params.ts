// Request fields -> engine-level generation parameters, with the defaults and the
// context check every API family shares.
import type { TextGenerationParams } from '../chat/text-generation.js';
import type { Engine } from '../engine/engine.js';
import type { SamplingParams } from '../engine/types.js';
import { badRequest } from './errors.js';
import type { RequestContext } from './request-context.js';
import { tokenBudget, type SamplingDefaults } from './sampling-defaults.js';
import type { SamplingFields } from './schemas.js';

/** A request's fields over the server's defaults (./sampling-defaults.ts, set by the CLI). */
function samplingFrom(body: SamplingFields, defaults: SamplingDefaults): SamplingParams {
  const sampling: SamplingParams = {
    temperature: body.temperature ?? defaults.temperature,
    // llama.cpp clients send top_k <= 0 for "disabled".
    topK: Math.max(0, body.top_k ?? defaults.top_k),
    topP: body.top_p ?? defaults.top_p,
  };
  // A negative seed is llama.cpp's "random", like an absent one; then the server's
  // --seed applies, if set.
  const seed = body.seed != null && body.seed >= 0 ? body.seed : defaults.seed;
  if (seed >= 0) sampling.seed = seed;
  return sampling;
}

function stopList(stop: SamplingFields['stop']): string[] {
  if (stop == null) return [];
  return typeof stop === 'string' ? [stop] : stop;
}

/**
 * A completion prompt as token ids. Text gets the tokenizer's special tokens (BOS), as
 * llama-server and vLLM do; ids a client sent are checked, since the engine indexes
 * embeddings with them.
 */
export function tokenizePrompt(engine: Engine, prompt: string | number[]): number[] {
  if (typeof prompt === 'string') return engine.tokenizer.encode(prompt, true);
  const vocabSize = engine.info.vocabSize;
  const bad = prompt.find((id) => id < 0 || id >= vocabSize);
  if (bad !== undefined) throw badRequest(`prompt token id ${bad} is out of vocabulary range (vocab_size ${vocabSize})`);
  return prompt;
}

/**
 * Everything the shared generator needs, after rejecting a prompt that leaves no room in
 * the context (before any work is queued). `maxTokens` absent means the server's
 * n_predict, by default "until the context is full", as in llama-server; a larger
 * request is capped there and ends with 'length'.
 */
export function generationParams(
  engine: Engine,
  promptTokens: number[],
  body: SamplingFields,
  maxTokens: number | null | undefined,
  context: RequestContext,
  defaults: SamplingDefaults,
): TextGenerationParams {
  const contextSize = engine.info.contextSize;
  if (promptTokens.length === 0) throw badRequest('the prompt is empty');
  if (promptTokens.length >= contextSize) {
    throw badRequest(
      `the prompt has ${promptTokens.length} tokens but the context size is ${contextSize} tokens, ` +
        'which leaves no room for a completion',
      'context_length_exceeded',
      { n_prompt_tokens: promptTokens.length, n_ctx: contextSize },
    );
  }
  const room = contextSize - promptTokens.length;
  const budget = tokenBudget(maxTokens ?? undefined, defaults.n_predict);
  return {
    promptTokens,
    maxTokens: Math.min(budget ?? room, room),
    sampling: samplingFrom(body, defaults),
    stop: stopList(body.stop),
    ...context,
  };
}
