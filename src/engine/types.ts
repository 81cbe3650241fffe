// The engine's contract with the layers above it. The engine speaks token ids; text,
// stop strings and wire formats live above (src/chat, src/server).
import { kvCacheBytes, type LoadedModel } from '../models/model.js';

export interface DryParams {
  multiplier: number;
  base: number;
  allowedLength: number;
  /** Tokens of history scanned; 0 = the whole context. */
  penaltyLastN: number;
  /** Token ids that no repeated sequence may cross. */
  sequenceBreakers: number[];
}

export interface SamplingParams {
  /** 0 = greedy argmax. */
  temperature: number;
  /** 0, or >= vocab size, keeps every token. */
  topK: number;
  /** 1 keeps every token. */
  topP: number;
  /** 0 = off. */
  minP?: number;
  /** Keep tokens with p >= sum(p^2) (temperature-scaled); skipped when greedy. */
  pLess?: boolean;
  /** 1 = off. */
  repetitionPenalty?: number;
  /** History window for the repetition, frequency and presence penalties; -1 = whole context. Default PENALTY_WINDOW. */
  repetitionContextSize?: number;
  frequencyPenalty?: number;
  presencePenalty?: number;
  dry?: DryParams;
  xtcProbability?: number;
  /** Default XTC_THRESHOLD. */
  xtcThreshold?: number;
  /** Seeds this request's own RNG stream; absent = a random seed. */
  seed?: number;
  /**
   * Added to these tokens' logits after the penalties (OpenAI's and llama-server's
   * logit_bias); -Infinity bans a token. At most MAX_LOGIT_BIAS_TOKENS tokens.
   */
  logitBias?: Map<number, number>;
}

/** Stops generation when the tail repeats a pattern (vLLM's field names). */
export interface LoopDetection {
  minPatternSize: number;
  maxPatternSize: number;
  /** Consecutive repeats that trigger; below 2 disables detection. */
  minCount: number;
}

/** Restricts which tokens may be sampled: a grammar (structured output, forced tool calls). */
export interface TokenConstraint {
  /**
   * Tokens allowed next, as a bitmask over the vocabulary (bit t % 32 of word t >> 5),
   * or undefined when anything goes. End-of-generation ids are allowed only when the
   * document is complete. Must allow at least one token.
   */
  allowed(): Uint32Array | undefined;
  /** Advances past a sampled token (always one that was allowed). */
  accept(token: number): void;
}

/** The penalty window a request that sets none gets (llama-server's repeat_last_n). */
export const PENALTY_WINDOW = 64;
/** The XTC threshold a request that sets none gets (llama-server's xtc_threshold). */
export const XTC_THRESHOLD = 0.1;

export interface TokenLogprob {
  token: number;
  logprob: number;
}

/** The most top logprobs a sampled token can carry besides its own (the sampler's capacity). */
export { MAX_TOP_LOGPROBS } from '../runtime/ops/sampling.js';
/** The most distinct tokens one request's logit_bias may name. */
export { MAX_LOGIT_BIAS_TOKENS } from '../runtime/ops/sampling.js';

export interface GenerationRequest {
  /** Prompt token ids, already including any BOS the template or tokenizer adds. */
  promptTokens: number[];
  /** Upper bound on new tokens. */
  maxTokens: number;
  sampling: SamplingParams;
  /** Aborting stops generation within one engine step and frees the sequence. */
  signal?: AbortSignal;
  /** Prefill queue class (X-Priority); FIFO within a class. Default 'normal'. */
  priority?: Priority;
  /**
   * The slot to run in (llama-server's id_slot), 0 .. stats().slots - 1: the request waits
   * until that slot is free, and what it leaves cached becomes that slot's cache. Absent:
   * any free slot. Of generateChoices' requests only the first's is read: the further
   * choices take any free slot.
   */
  slot?: number;
  constraint?: TokenConstraint;
  /** false: prefill cold and donate nothing to the prompt cache (llama-server's cache_prompt). */
  cachePrompt?: boolean;
  /** Top logprobs per token besides the chosen one's (0-20); undefined = no logprobs. */
  logprobs?: number;
  loopDetection?: LoopDetection;
  /** A 'progress' event after each prefill chunk (llama-server's return_progress). */
  progress?: boolean;
  /**
   * The logprobs are of the distribution the token was drawn from (the kept tokens at the
   * request's temperature; a greedy pick has logprob 0, and its top tokens are the ones
   * top-k, top-p and min-p keep, the others at -Infinity), as llama-server's
   * post_sampling_probs, instead of the temperature-1 row.
   */
  postSamplingProbs?: boolean;
  /**
   * When the sequence fills its context, drop the older half of its tokens after the first
   * `keep` and go on (llama-server's context shift) instead of finishing with 'length'.
   */
  contextShift?: { keep: number };
  /**
   * Images' soft tokens (a vision-language model's), in prompt order: each replaces the
   * embeddings of its run of image tokens in promptTokens. The prompt cache knows an
   * image's tokens by the image's key (ids past the vocabulary), so only the same picture
   * reuses them; what is left of an image after a cached prefix is prefilled within one
   * chunk. A prompt with images is not context-shifted.
   */
  images?: PromptImage[];
}

/** One image in a prompt: rows [n, hidden] replace the embeddings of promptTokens[start .. start + n - 1]. */
export interface PromptImage {
  start: number;
  rows: Float32Array;
  /** 30 bits from a hash of the decoded pixels: the image's identity in the prompt cache. */
  key: number;
  /**
   * The rows' grid, h x w row-major, for a multimodal-RoPE model (LoadedModel.mropePositions):
   * the image's tokens take positions (p, p + row, p + column) from the position p its first
   * token would have had, and the text after it goes on from p + max(h, w).
   */
  grid?: { h: number; w: number };
}

/**
 * Prefill so far, in llama-server's prompt_progress terms: `processed` of the prompt's
 * `total` tokens are in the KV cache, `cache` of them served by the prompt cache, and
 * `timeMs` have passed since the sequence took its slot.
 */
export interface PromptProgress {
  total: number;
  cache: number;
  processed: number;
  timeMs: number;
}

export type Priority = 'high' | 'normal' | 'low';
export const PRIORITIES: Priority[] = ['high', 'normal', 'low'];

export type FinishReason = 'stop' | 'length';

export interface Timings extends Partial<DraftStats> {
  prompt_n: number;
  prompt_ms: number;
  prompt_per_token_ms: number;
  prompt_per_second: number;
  predicted_n: number;
  predicted_ms: number;
  predicted_per_token_ms: number;
  predicted_per_second: number;
}

/** Speculative decoding's totals for one sequence (llama-server's timings fields). */
export interface DraftStats {
  /** Tokens drafted. */
  draft_n: number;
  /** Drafted tokens the target model's samples kept. */
  draft_n_accepted: number;
  /** Verify passes. */
  draft_rounds: number;
  /** The drafter: 'prompt-lookup' or 'draft-model'. */
  draft_kind: string;
}

export type GenerationEvent =
  /**
   * `logprobs`: the chosen token's first, then the top ones, when the request asked.
   * `cachedTokens`, on the first token only: the prompt tokens the prompt cache served (also
   * in 'done', which a consumer that stops early on a stop string never reads).
   * `contextShifted`, on every token after the first context shift and on 'done': a
   * context shift dropped some of the sequence's tokens.
   * `draft`, on every token after the sequence's first verify round: its speculative
   * decoding totals so far (also in 'done''s timings).
   */
  | { type: 'token'; id: number; logprobs?: TokenLogprob[]; cachedTokens?: number; contextShifted?: true; draft?: DraftStats }
  /** After each prefill chunk, when the request asked for progress; the last one precedes the first token. */
  | ({ type: 'progress' } & PromptProgress)
  /** `reason` is 'stop' when an end-of-generation token was sampled (it is not emitted as a token). */
  /** `cachedTokens` of the prompt came from the prompt cache; timings.prompt_n counts the rest. */
  | { type: 'done'; reason: FinishReason; promptTokens: number; completionTokens: number; cachedTokens: number; timings: Timings; contextShifted?: true };

/** Thrown synchronously by Engine.generate when the prefill queue is full. */
export class QueueFullError extends Error {
  constructor(readonly depth: number) {
    super('All slots are busy and the queue is full. Please try again later.');
  }
}

export type SlotState = 'decoding' | 'idle' | 'queued';

/** Cumulative counters, as /health's "observability" reports them. */
export interface EngineCounters {
  sequences_started: number;
  sequences_completed: number;
  total_prefill_tokens: number;
  total_decode_tokens: number;
  decode_steps_processed: number;
  prefill_chunks_processed: number;
  /** Tokens drafted for speculative decoding, and those of them kept. */
  draft_tokens: number;
  draft_accepted_tokens: number;
}

/** Every counter at zero: a fresh engine's, or one that runs no generation. */
export const zeroCounters = (): EngineCounters => ({
  sequences_started: 0,
  sequences_completed: 0,
  total_prefill_tokens: 0,
  total_decode_tokens: 0,
  decode_steps_processed: 0,
  prefill_chunks_processed: 0,
  draft_tokens: 0,
  draft_accepted_tokens: 0,
});

export interface EngineStats {
  slots: number;
  activeSequences: number;
  queueDepth: number;
  /** One entry per slot, then one per queued request. */
  slotStates: SlotState[];
  counters: EngineCounters;
  memory: EngineMemory;
  /** Request memory admission (./memory-budget.ts): the budget, and the weights plus the requests' reservations. */
  requestMemory?: { budgetBytes: number; inUseBytes: number };
  /** The paged KV pool; absent for an engine without one (embedding only). */
  kv?: KvStats;
}

/** GPU memory in bytes (GET /props memory, the /metrics mlxcel_memory_* gauges, the startup line). */
export interface EngineMemory {
  /** The weights as uploaded (a draft model's included). */
  weights: number;
  /** The KV cache's textures now, and what the pool may grow to. */
  kv: number;
  kvMax: number;
  /** Positions the KV pool holds now, and may grow to (the main model's, across all sequences and the prompt cache). */
  kvTokens: number;
  kvMaxTokens: number;
  /** Every other buffer and texture on the device: activations, batch metadata, kernel parameters. */
  other: number;
}

/** No GPU memory held (an engine asleep, or none loaded). */
export const NO_MEMORY: EngineMemory = { weights: 0, kv: 0, kvMax: 0, kvTokens: 0, kvMaxTokens: 0, other: 0 };

/** The GPU memory of `models`, which share one device: their weights and KV caches, and the rest of the device's. */
export function modelMemory(models: LoadedModel[]): EngineMemory {
  const sum = (f: (m: LoadedModel) => number) => models.reduce((n, m) => n + f(m), 0);
  const weights = sum((m) => m.weightBytes);
  const kv = sum((m) => kvCacheBytes(m.kv));
  const { blocks, maxBlocks, blockSize } = models[0]!.kv;
  return {
    weights,
    kv,
    kvMax: sum((m) => kvCacheBytes(m.kv, m.kv.maxBlocks)),
    kvTokens: blocks * blockSize,
    kvMaxTokens: maxBlocks * blockSize,
    other: models[0]!.ops.gpu.memory.bytes() - weights - kv,
  };
}

/** The paged KV pool as the model server protocol's gauges report it. */
export interface KvStats {
  /** Tokens per block. */
  blockSize: number;
  /** Blocks the pool may grow to (its capacity; the textures may hold fewer now). */
  blocks: number;
  /** Blocks the running sequences hold (one shared by several counts once); blocks only the
   *  prompt cache keeps are reusable and not counted. */
  usedBlocks: number;
  /** Per slot, the blocks its sequence holds (0 when idle). */
  slotBlocks: number[];
}

export interface ModelInfo {
  /** Directory name or --alias: the id shown in responses. */
  id: string;
  /** The directory the checkpoint was loaded from (llama-server's model_path). */
  path: string;
  architecture: string;
  vocabSize: number;
  /** Context size in tokens that one sequence (one slot) may use: prompt + generated. */
  contextSize: number;
  /** Token ids that end generation (config + generation_config). */
  eosTokenIds: number[];
  /** Speculative decoding, when on: the drafter, the most tokens it drafts per round, and
   *  the draft model's directory when it is one. */
  speculative?: { kind: string; nMax: number; draftModel?: string };
  /**
   * The model carries recurrent state (hybrid state-space layers: Nemotron-H, LFM2, Granite
   * 4.0-H): context shift is refused for it, and the prompt cache resumes it from state
   * snapshots.
   */
  recurrent?: true;
}
