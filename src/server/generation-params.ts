// Request fields -> engine-level generation parameters, with the defaults and the
// context check every API family shares.
import type { TextGenerationParams } from '../chat/text-generation.js';
import type { Engine } from '../engine/engine.js';
import type { SamplingParams } from '../engine/types.js';
import { ApiError, badRequest } from './errors.js';
import { banEndOfGeneration } from './logit-bias.js';
import { requestLoopDetection } from './loop-policy.js';
import type { RequestContext } from './request-context.js';
import { tokenBudget, type SamplingDefaults } from './sampling-defaults.js';
import type { SamplingFields } from './schemas.js';
import { defaultDryBreakers } from './token-pieces.js';

/**
 * A request's fields over the server's defaults (./sampling-defaults.ts, set by the CLI).
 * The engine applies them in llama.cpp's order (see ../kernels/sample.wgsl): penalties
 * (repetition, frequency, presence) -> DRY -> grammar mask -> top-k -> top-p -> min-p ->
 * p-less -> temperature -> XTC -> draw. Ranges were checked by the schemas. `logitBias` is
 * the request's logit_bias (./logit-bias.ts); ignore_eos bans the end-of-generation tokens
 * on top of it.
 */
export function samplingFrom(
  body: SamplingFields,
  defaults: SamplingDefaults,
  engine: Pick<Engine, 'tokenizer' | 'info'>,
  logitBias?: Map<number, number>,
): SamplingParams {
  const sampling: SamplingParams = {
    temperature: body.temperature ?? defaults.temperature,
    // 0 keeps every token; a negative top_k is refused by the schemas.
    topK: body.top_k ?? defaults.top_k,
    topP: body.top_p ?? defaults.top_p,
    minP: body.min_p ?? defaults.min_p,
    pLess: body.p_less ?? false,
    repetitionPenalty: body.repetition_penalty ?? body.repeat_penalty ?? defaults.repeat_penalty,
    repetitionContextSize: body.repetition_context_size ?? body.repeat_last_n ?? defaults.repeat_last_n,
    frequencyPenalty: body.frequency_penalty ?? defaults.frequency_penalty,
    presencePenalty: body.presence_penalty ?? defaults.presence_penalty,
    xtcProbability: body.xtc_probability ?? defaults.xtc_probability,
    xtcThreshold: body.xtc_threshold ?? defaults.xtc_threshold,
  };
  const dryMultiplier = body.dry_multiplier ?? defaults.dry_multiplier;
  if (dryMultiplier > 0) {
    sampling.dry = {
      multiplier: dryMultiplier,
      base: body.dry_base ?? defaults.dry_base,
      allowedLength: body.dry_allowed_length ?? defaults.dry_allowed_length,
      // llama-server's -1 and the REST reference's 0 both mean the whole context.
      penaltyLastN: Math.max(0, body.dry_penalty_last_n ?? defaults.dry_penalty_last_n),
      sequenceBreakers: body.dry_sequence_breakers ?? defaultDryBreakers(engine.tokenizer),
    };
  }
  // A negative seed is llama.cpp's "random", like an absent one; then the server's
  // --seed applies, if set.
  const seed = body.seed != null && body.seed >= 0 ? body.seed : defaults.seed;
  if (seed >= 0) sampling.seed = seed;
  const bias = body.ignore_eos === true ? banEndOfGeneration(logitBias, engine.info.eosTokenIds) : logitBias;
  if (bias) sampling.logitBias = bias;
  return sampling;
}

/** cache_prompt at the root (or flattened from the OpenAI SDK's extra_body), else nested in extra_body. */
export function cachePromptFrom(body: SamplingFields): boolean | undefined {
  const nested = body.extra_body?.cache_prompt;
  return body.cache_prompt ?? (typeof nested === 'boolean' ? nested : undefined);
}

function stopList(stop: SamplingFields['stop']): string[] {
  if (stop == null) return [];
  return typeof stop === 'string' ? [stop] : stop;
}

/**
 * Request text as token ids, long texts off the event loop. A text of more than `limit`
 * tokens (by default, one that leaves no room in the context) is refused from its byte
 * length alone (no token spans more than the tokenizer's maxTokenBytes), before any of it
 * is tokenized.
 */
export async function tokenizeText(engine: Pick<Engine, 'tokenizer'> & { info: { contextSize: number } }, text: string, addSpecial: boolean, limit?: number): Promise<number[]> {
  const { maxTokenBytes } = engine.tokenizer;
  const contextSize = engine.info.contextSize;
  const most = limit ?? contextSize - 1;
  if (maxTokenBytes !== undefined && text.length > most) {
    // Every UTF-16 unit is at least one UTF-8 byte: a text refused on its length alone is
    // not encoded (a rendered prompt would first be flattened) to count its bytes.
    const fromLength = Math.ceil(text.length / maxTokenBytes);
    const atLeast = fromLength > most ? fromLength : Math.ceil(Buffer.byteLength(text, 'utf8') / maxTokenBytes);
    if (atLeast > most) {
      if (limit === undefined) throw contextExceeded(`at least ${atLeast}`, atLeast, contextSize);
      throw badRequest(`the text has at least ${atLeast} tokens; at most ${limit} are taken (${limit / contextSize} context windows)`);
    }
  }
  return engine.tokenizer.encodeAsync(text, addSpecial);
}

/** llama-server's wording and fields, in the reference's envelope. */
export function contextExceeded(count: string, tokens: number, contextSize: number): ApiError {
  return badRequest(
    `request (${count} tokens) exceeds the available context size (${contextSize} tokens), try increasing it`,
    'context_length_exceeded',
    { n_prompt_tokens: tokens, n_ctx: contextSize },
  );
}

/**
 * Everything the shared generator needs, after rejecting a prompt that leaves no room in
 * the context (before any work is queued). `maxTokens` absent means the server's
 * n_predict, by default "until the context is full", as in llama-server; any budget is
 * capped at the context's end and then ends with 'length'. `logitBias` is the request's
 * logit_bias (./logit-bias.ts), which only the routes whose API has one read.
 */
export function generationParams(
  engine: Engine,
  promptTokens: number[],
  body: SamplingFields,
  maxTokens: number | null | undefined,
  context: RequestContext,
  defaults: SamplingDefaults,
  logitBias?: Map<number, number>,
): TextGenerationParams {
  const contextSize = engine.info.contextSize;
  if (promptTokens.length === 0) throw badRequest('the prompt is empty');
  if (promptTokens.length >= contextSize) throw contextExceeded(`${promptTokens.length}`, promptTokens.length, contextSize);
  const room = contextSize - promptTokens.length;
  const budget = tokenBudget(maxTokens ?? undefined, defaults.n_predict);
  if (defaults.context_shift && engine.info.recurrent) {
    throw badRequest(`context shift (--context-shift) cannot be applied to ${engine.info.architecture}: its recurrent layers' state holds the whole context and cannot drop tokens from it; restart the server with --no-context-shift`);
  }
  // A shifting context has room for any number of tokens, as in llama-server.
  const contextShift = defaults.context_shift ? { keep: keptTokens(body.n_keep ?? defaults.n_keep, promptTokens, engine.tokenizer.bosId) } : undefined;
  if (body.min_pattern_size != null && body.max_pattern_size != null && body.max_pattern_size > 0 && body.min_pattern_size > body.max_pattern_size) {
    throw badRequest(`min_pattern_size (${body.min_pattern_size}) must not exceed max_pattern_size (${body.max_pattern_size})`);
  }
  const loopDetection = requestLoopDetection(body, defaults.loop_detection, engine.info.architecture);
  const cachePrompt = cachePromptFrom(body);
  const slot = slotFrom(engine, body.id_slot);
  return {
    promptTokens,
    maxTokens: contextShift ? (budget ?? Infinity) : Math.min(budget ?? room, room),
    sampling: samplingFrom(body, defaults, engine, logitBias),
    stop: stopList(body.stop),
    ...(loopDetection ? { loopDetection } : {}),
    ...(cachePrompt === undefined ? {} : { cachePrompt }),
    ...(contextShift ? { contextShift } : {}),
    ...(slot === undefined ? {} : { slot }),
    ...context,
  };
}

/** id_slot as the engine's slot: undefined for -1 or absent (any slot); 400 for a slot the server does not have. */
function slotFrom(engine: Engine, idSlot: number | null | undefined): number | undefined {
  if (idSlot == null || idSlot === -1) return undefined;
  const { slots } = engine.stats();
  if (idSlot >= slots) throw badRequest(`id_slot ${idSlot} does not exist: the slots are 0 to ${slots - 1} (-1 for any)`);
  return idSlot;
}

/** n_keep as prompt positions: -1 keeps the whole prompt; otherwise BOS is kept on top, as llama-server counts. */
function keptTokens(nKeep: number, promptTokens: number[], bosId: number | undefined): number {
  if (nKeep < 0) return promptTokens.length;
  return Math.min(nKeep + (bosId !== undefined && promptTokens[0] === bosId ? 1 : 0), promptTokens.length);
}
