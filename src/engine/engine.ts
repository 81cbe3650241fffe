// What the server sees of the engine: one loaded model that turns prompt tokens into
// a stream of sampled tokens. Implemented by ./scheduler.ts.
import type { VisionEncoder } from '../models/vision-layers.js';
import type { LoadOptions } from '../models/model.js';
import type { KvType } from '../runtime/tensors.js';
import type { TextTokenizer } from '../models/tokenizer.js';
import type { PromptCacheStats } from './prompt-cache.js';
import type { SpeculativeOptions } from './speculative.js';
import type { EngineStats, GenerationEvent, GenerationRequest, ModelInfo } from './types.js';

export interface Engine {
  readonly info: ModelInfo;
  readonly tokenizer: TextTokenizer;
  /** e.g. "llvmpipe (LLVM 15, 256 bits) via opengles". */
  readonly adapterDescription: string;
  /** A vision-language model's image encoder: its soft tokens go in GenerationRequest.images. */
  readonly vision?: VisionEncoder;
  /**
   * Queues a request and streams its tokens. The prompt must fit the context
   * (callers check `info.contextSize` first and answer 400). Throws QueueFullError
   * synchronously when the queue is full, so callers can answer 503 before any
   * header. Breaking out of the iteration or aborting `req.signal` frees the sequence
   * within one step.
   */
  generate(req: GenerationRequest): AsyncIterable<GenerationEvent>;
  /**
   * Several choices over one prompt (n > 1): one stream per request, in order. The
   * requests differ only in what each choice keeps for itself (its seed, its constraint);
   * the prompt is prefilled once for the choices that get a slot while it is prefilled.
   * Refused as a whole when the queue cannot take them all.
   */
  generateChoices(reqs: GenerationRequest[]): AsyncIterable<GenerationEvent>[];
  stats(): EngineStats;
  /** GET /v1/cache/stats. */
  cacheStats(): PromptCacheStats;
  /** POST /v1/cache/reset: drops every cached block; returns the snapshot it cleared. */
  cacheReset(): PromptCacheStats;
  /**
   * POST /slots/:id?action=save: writes the slot's cache (the tokens of the last request
   * it served that the prompt cache still holds, and their KV) to `path`. Waits for the
   * slot's running request, if any, to end. Slots are 0 .. stats().slots - 1.
   */
  saveSlot(slot: number, path: string): Promise<SlotFileResult>;
  /** ?action=restore: reads a saved slot into the prompt cache; throws SlotFileError for a bad file. */
  restoreSlot(slot: number, path: string): Promise<SlotFileResult>;
  /** ?action=erase: drops the slot's cache from the prompt cache; returns the tokens it held. */
  eraseSlot(slot: number): Promise<number>;
  /** --sleep-idle-seconds: whether the model is unloaded (or loading again) for want of work. */
  isSleeping(): boolean;
  close(): Promise<void>;
}

export interface SlotFileResult {
  /** Tokens saved or restored. */
  tokens: number;
  /** Bytes of the file written or read. */
  bytes: number;
}

export interface EngineOptions {
  modelDir: string;
  /** Model id shown in responses; defaults to the directory name. */
  alias?: string;
  /** Total KV tokens, divided among the slots; default: each slot gets the model's
   *  max_position_embeddings, capped so the total stays at most 8192. */
  contextSize?: number;
  /** MLXCEL_REQUEST_MEMORY_BUDGET in bytes: lowers the request memory budget (./memory-budget.ts). */
  requestMemoryBudget?: number;
  /** Decode slots (--parallel); default 4. */
  parallel?: number;
  /** --kv-unified: the slots share one KV pool, and one sequence may use all of it (the
   *  context is the total, not the per-slot share). Default off. */
  kvUnified?: boolean;
  /** --swa-full: sliding-window layers keep every position, paged as full-attention ones, instead of a ring of their window per slot. Default off. */
  swaFull?: boolean;
  /** How the KV cache stores keys and values (--cache-type-k, --cache-type-v); default ENGINE_DEFAULTS'. */
  cacheTypeK?: KvType;
  cacheTypeV?: KvType;
  /** KV positions allocated at load, and how long the engine stays idle before the pool shrinks back towards them; default ENGINE_DEFAULTS'. */
  kvInitialTokens?: number;
  kvShrinkIdleMs?: number;
  /** Tokens per forward pass: the prefill chunk (--batch-size); default 512. */
  batchSize?: number;
  /**
   * A dynamic-resolution vision tower's bounds on an image's tokens (--image-min-tokens,
   * --image-max-tokens), in place of its preprocessor_config.json's pixel bounds.
   */
  imageTokens?: { minTokens?: number; maxTokens?: number };
  /** Requests that may wait for a slot (--max-queue); default 64. */
  maxQueue?: number;
  /** Prompt cache (--no-cache-prompt turns it off); default on. */
  cachePrompt?: boolean;
  /** Default: as many bytes as the slots' own KV. */
  cacheCapacityBytes?: number;
  /** Default ENGINE_DEFAULTS.cacheMaxEntries blocks. */
  cacheMaxEntries?: number;
  /** Default ENGINE_DEFAULTS.cacheTtlSecs; 0 = no TTL. */
  cacheTtlSecs?: number;
  backend?: string;
  /** --sleep-idle-seconds: after this long without a request, release the GPU (weights, KV,
   *  pipelines) and load again on the next request. Default 0: never. */
  sleepIdleSeconds?: number;
  /** Run every kernel once before serving (ForwardRunner.warmUp); --no-warmup turns it off. Default on. */
  warmup?: boolean;
  /** Receives a line for each startup fact as it is known: adapter, model, context. Default: none. */
  log?: (line: string) => void;
  /** Keep Dawn's startup noise off stderr (openGpu's quietDawn). Default off. */
  quietDawn?: boolean;
  /** Speculative decoding (--spec-type and the --draft flags); absent = off. */
  speculative?: SpeculativeOptions;
  /** Hears the load's progress: tensors uploaded, pipelines compiled (warm-up's too). */
  onLoadProgress?: LoadOptions['onProgress'];
}

/** What loadEngine takes for the EngineOptions left out (the command line's defaults too). */
export const ENGINE_DEFAULTS = {
  /** Decode slots. */
  parallel: 4,
  /** Tokens per forward pass. */
  batchSize: 512,
  /** The KV cache's keys and values: f16, as llama-server's. */
  cacheTypeK: 'f16' as KvType,
  cacheTypeV: 'f16' as KvType,
  /** KV positions allocated at load (at most one sequence's context): the pool doubles from there as sequences need blocks. */
  kvInitialTokens: 1024,
  /** Idle milliseconds before the KV pool shrinks. */
  kvShrinkIdleMs: 5000,
  /** Requests waiting for a slot before QueueFullError. */
  maxQueue: 64,
  /** Prompt-cache blocks. */
  cacheMaxEntries: 1024,
  /** Seconds an unused prompt-cache block is kept. */
  cacheTtlSecs: 3600,
} as const;
