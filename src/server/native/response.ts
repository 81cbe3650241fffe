// llama-server's /completion bodies: generation_settings (also /props'
// default_generation_settings.params), the final body (and a stream's last event, and the
// __verbose of OpenAI bodies), and response_fields' projection of it.
import type { TextGenerationResult } from '../../chat/text-generation.js';
import type { Engine } from '../../engine/engine.js';
import { PENALTY_WINDOW, XTC_THRESHOLD, type PromptProgress, type SamplingParams } from '../../engine/types.js';
import { samplingFrom } from '../generation-params.js';
import type { SamplingDefaults } from '../sampling-defaults.js';
import type { SamplingFields } from '../schemas.js';

/** llama.cpp's LLAMA_DEFAULT_SEED: what its settings show for "a random seed per request". */
const RANDOM_SEED = 4294967295;

/** The sampler chain in the order the engine applies it (../kernels/sample.wgsl). */
const SAMPLERS = ['penalties', 'dry', 'top_k', 'top_p', 'min_p', 'temperature', 'xtc'];

/** What a request settled on besides its sampler: the settings object's other fields. */
interface SettingsRequest {
  sampling: SamplingParams;
  /** The request's n_predict (or the server's -n); -1 = until the context is full. */
  nPredict: number;
  stop: readonly string[];
  stream: boolean;
  nProbs: number;
  timingsPerToken: boolean;
  postSamplingProbs: boolean;
  ignoreEos: boolean;
}

/**
 * llama-server's generation_settings in its field names: the effective values, after the
 * server's defaults, with the effective logit_bias as [{bias, token}] (a ban's -Infinity
 * is null in JSON, as in llama-server). DRY's fields are the server's while it is off.
 */
export function generationSettings(r: SettingsRequest, defaults: SamplingDefaults) {
  const s = r.sampling;
  const dry = s.dry;
  return {
    seed: s.seed ?? RANDOM_SEED,
    temperature: s.temperature,
    top_k: s.topK,
    top_p: s.topP,
    min_p: s.minP ?? 0,
    p_less: s.pLess ?? false,
    xtc_probability: s.xtcProbability ?? 0,
    xtc_threshold: s.xtcThreshold ?? XTC_THRESHOLD,
    repeat_last_n: s.repetitionContextSize ?? PENALTY_WINDOW,
    repeat_penalty: s.repetitionPenalty ?? 1,
    presence_penalty: s.presencePenalty ?? 0,
    frequency_penalty: s.frequencyPenalty ?? 0,
    dry_multiplier: dry?.multiplier ?? 0,
    dry_base: dry?.base ?? defaults.dry_base,
    dry_allowed_length: dry?.allowedLength ?? defaults.dry_allowed_length,
    dry_penalty_last_n: dry?.penaltyLastN ?? defaults.dry_penalty_last_n,
    ...(dry ? { dry_sequence_breakers: dry.sequenceBreakers } : {}),
    stop: r.stop,
    max_tokens: r.nPredict,
    n_predict: r.nPredict,
    ignore_eos: r.ignoreEos,
    stream: r.stream,
    logit_bias: [...(s.logitBias ?? new Map<number, number>())].map(([token, bias]) => ({ bias, token })),
    n_probs: r.nProbs,
    samplers: SAMPLERS,
    timings_per_token: r.timingsPerToken,
    post_sampling_probs: r.postSamplingProbs,
  };
}

type GenerationSettings = ReturnType<typeof generationSettings>;

/** llama-server's stop_type. */
function stopType(result: TextGenerationResult): 'word' | 'eos' | 'limit' {
  if (result.stopString !== undefined) return 'word';
  return result.finishReason === 'stop' ? 'eos' : 'limit';
}

/**
 * The non-streaming body, and (with empty content and no tokens) the last event of a
 * stream. `prompt` is the processed prompt, special tokens shown; `truncated` says the
 * completion ran into the end of the context, or a context shift dropped some of it (as
 * llama-server's slot.truncated).
 */
export function finalResponse(
  engine: Engine,
  result: TextGenerationResult,
  o: { content: string; tokens: number[]; prompt: string; settings: GenerationSettings },
) {
  const { prompt_tokens, completion_tokens } = result.usage;
  return {
    index: 0,
    content: o.content,
    tokens: o.tokens,
    stop: true,
    model: engine.info.id,
    tokens_predicted: completion_tokens,
    tokens_evaluated: prompt_tokens,
    generation_settings: o.settings,
    prompt: o.prompt,
    has_new_line: result.text.includes('\n'),
    truncated: result.contextShifted === true || (result.finishReason === 'length' && prompt_tokens + completion_tokens >= engine.info.contextSize),
    stop_type: stopType(result),
    stopping_word: result.stopString ?? '',
    // llama-server's names: the prompt tokens reused from the prompt cache; timings.prompt_n
    // counts only the ones evaluated.
    tokens_cached: result.cachedTokens,
    timings: { cache_n: result.cachedTokens, ...result.timings },
  };
}

/**
 * llama-server's `__verbose` (under -v) on an OpenAI completion or chat body: the native
 * final body of the same generation, with the prompt tokens decoded (special tokens shown,
 * as /completion's `prompt`) and the request's settings as /completion would report them.
 */
export function verboseBody(
  engine: Engine,
  result: TextGenerationResult,
  o: { promptTokens: number[]; body: SamplingFields; maxTokens: number | null | undefined; logitBias: Map<number, number> | undefined; defaults: SamplingDefaults; nProbs: number },
) {
  const settings = generationSettings(
    {
      sampling: samplingFrom(o.body, o.defaults, engine, o.logitBias),
      nPredict: o.maxTokens ?? o.defaults.n_predict,
      stop: o.body.stop == null ? [] : [o.body.stop].flat(),
      stream: o.body.stream === true,
      nProbs: o.nProbs,
      timingsPerToken: false,
      postSamplingProbs: false,
      ignoreEos: o.body.ignore_eos === true,
    },
    o.defaults,
  );
  return finalResponse(engine, result, { content: result.text, tokens: [], prompt: engine.tokenizer.decode(o.promptTokens, false), settings });
}

/** llama-server's prompt_progress (return_progress), on its native and OpenAI stream chunks. */
export function promptProgress(p: PromptProgress) {
  return { total: p.total, cache: p.cache, processed: p.processed, time_ms: p.timeMs };
}

/**
 * llama-server's response_fields: only the named fields, a path "a/b" reaching into
 * objects and keeping the full path as the key ({"generation_settings/n_predict": -1});
 * a path that leads nowhere is left out.
 */
export function projectFields(body: Record<string, unknown>, paths: readonly string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const path of paths) {
    let value: unknown = body;
    let found = true;
    for (const key of path.split('/')) {
      if (typeof value === 'object' && value !== null && !Array.isArray(value) && Object.hasOwn(value, key)) {
        value = (value as Record<string, unknown>)[key];
      } else {
        found = false;
        break;
      }
    }
    if (found) out[path] = value;
  }
  return out;
}
