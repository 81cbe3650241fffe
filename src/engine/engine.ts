// What the server sees of the engine: one loaded model that turns prompt tokens into
// a stream of sampled tokens. Implemented by ./generator.ts.
import type { TextTokenizer } from '../models/tokenizer.js';
import type { GenerationEvent, GenerationRequest, ModelInfo } from './types.js';

export interface Engine {
  readonly info: ModelInfo;
  readonly tokenizer: TextTokenizer;
  /** e.g. "llvmpipe (LLVM 15, 256 bits) via opengles". */
  readonly adapterDescription: string;
  /**
   * Queues a request and streams its tokens. The prompt must fit the context
   * (callers check `info.contextSize` first and answer 400). Breaking out of the
   * iteration or aborting `req.signal` frees the sequence within one step.
   */
  generate(req: GenerationRequest): AsyncIterable<GenerationEvent>;
  close(): Promise<void>;
}

export interface EngineOptions {
  modelDir: string;
  /** Model id shown in responses; defaults to the directory name. */
  alias?: string;
  /** Tokens per sequence; defaults to the model's max_position_embeddings capped at 4096. */
  contextSize?: number;
  backend?: string;
}
