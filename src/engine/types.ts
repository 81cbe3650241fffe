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
}

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

export interface ModelInfo {
  /** Directory name or --alias: the id shown in responses. */
  id: string;
  architecture: string;
  vocabSize: number;
  /** Context size in tokens that one sequence may use (prompt + generated). */
  contextSize: number;
  /** Token ids that end generation (config + generation_config). */
  eosTokenIds: number[];
}
