// The engine's contract with the layers above it. The engine speaks token ids; text,
// stop strings and wire formats live above (src/chat, src/server).

export interface SamplingParams {
  /** 0 = greedy argmax. */
  temperature: number;
  /** 0, or >= vocab size, keeps every token. */
  topK: number;
  /** 1 keeps every token. */
  topP: number;
  /** Seeds this request's own RNG stream; absent = a random seed. */
  seed?: number;
}

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
}

export type Priority = 'high' | 'normal' | 'low';
export const PRIORITIES: Priority[] = ['high', 'normal', 'low'];

export type FinishReason = 'stop' | 'length';

export interface Timings {
  prompt_n: number;
  prompt_ms: number;
  prompt_per_token_ms: number;
  prompt_per_second: number;
  predicted_n: number;
  predicted_ms: number;
  predicted_per_token_ms: number;
  predicted_per_second: number;
}

export type GenerationEvent =
  | { type: 'token'; id: number }
  /** `reason` is 'stop' when an end-of-generation token was sampled (it is not emitted as a token). */
  | { type: 'done'; reason: FinishReason; promptTokens: number; completionTokens: number; timings: Timings };

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
}

export interface EngineStats {
  slots: number;
  activeSequences: number;
  queueDepth: number;
  /** One entry per slot, then one per queued request. */
  slotStates: SlotState[];
  counters: EngineCounters;
}

export interface ModelInfo {
  /** Directory name or --alias: the id shown in responses. */
  id: string;
  architecture: string;
  vocabSize: number;
  /** Context size in tokens that one sequence (one slot) may use: prompt + generated. */
  contextSize: number;
  /** Token ids that end generation (config + generation_config). */
  eosTokenIds: number[];
}
