// The engine of a server whose -m model serves one job other than text generation:
// embeddings (--embeddings), reranking (--reranking), speech to text (a Whisper checkpoint)
// or text to speech (a Kokoro checkpoint). What the routes ask of an Engine (its id, tokenizer, context, stats for
// /health, /props and /v1/models) comes from that model's worker; generation throws
// GenerationDisabledError, which the server answers with 501 naming what turned it off, as
// llama-server's generation routes do in embedding mode.
import type { Engine, SlotFileResult } from './engine.js';
import type { TextTokenizer } from '../models/tokenizer.js';
import { zeroCounters, type EngineMemory, type EngineStats, type GenerationEvent } from './types.js';
import { disabledCacheStats } from './prompt-cache.js';

/** What turns generation off when -m is a Whisper checkpoint (AppOptions.generationDisabledBy). */
export const AUDIO_ONLY = 'a Whisper speech-to-text checkpoint';
/** What turns generation off when -m is a Kokoro checkpoint. */
export const SPEECH_ONLY = 'a Kokoro text-to-speech checkpoint';

/** Generation is off: the server answers 501, naming the flag (or the model kind) that turned it off. */
export class GenerationDisabledError extends Error {
  constructor(by: string) {
    super(by === AUDIO_ONLY
      ? `This server's model (-m) is ${AUDIO_ONLY}: it serves speech to text only (/v1/audio/transcriptions, /v1/audio/translations). Serve a chat model with -m and the Whisper checkpoint beside it with --stt-model for both.`
      : by === SPEECH_ONLY
      ? `This server's model (-m) is ${SPEECH_ONLY}: it serves text to speech only (/v1/audio/speech). Serve a chat model with -m and the Kokoro checkpoint beside it with --tts-model for both.`
      : `This server was started with \`${by}\`: it serves ${by === '--reranking' ? 'reranking' : 'embeddings'} only. Start it without \`${by}\` for text generation (--embedding-model / --reranker-model serve a second model beside a chat model).`);
  }
}

/** The worker of the one job (an Embedder, a Transcriber, a Speaker). */
export interface JobWorker {
  info: { id: string; path: string; architecture: string; vocabSize: number; contextSize: number };
  tokenizer: TextTokenizer;
  /** Requests waiting or running. */
  pending: number;
  /** The GPU memory it holds (EngineStats.memory). */
  memory(): EngineMemory;
  close(): Promise<void>;
}

export class EmbeddingOnlyEngine implements Engine {
  readonly info;
  readonly tokenizer;
  readonly adapterDescription: string;

  constructor(private readonly embedder: JobWorker, private readonly flag: string, adapterDescription: string) {
    const i = embedder.info;
    this.info = { id: i.id, path: i.path, architecture: i.architecture, vocabSize: i.vocabSize, contextSize: i.contextSize, eosTokenIds: [] };
    this.tokenizer = embedder.tokenizer;
    this.adapterDescription = adapterDescription;
  }

  generate(): AsyncIterable<GenerationEvent> {
    throw new GenerationDisabledError(this.flag);
  }

  generateChoices(): AsyncIterable<GenerationEvent>[] {
    throw new GenerationDisabledError(this.flag);
  }

  /** One slot: the worker; its queue is the requests waiting or running. */
  stats(): EngineStats {
    const pending = this.embedder.pending;
    return {
      slots: 1,
      activeSequences: pending > 0 ? 1 : 0,
      queueDepth: Math.max(0, pending - 1),
      slotStates: [pending > 0 ? 'decoding' : 'idle', ...Array.from({ length: Math.max(0, pending - 1) }, () => 'queued' as const)],
      counters: zeroCounters(),
      memory: this.embedder.memory(),
    };
  }

  cacheStats() {
    return disabledCacheStats(16);
  }

  cacheReset() {
    return disabledCacheStats(16);
  }

  saveSlot(): Promise<SlotFileResult> {
    return Promise.reject(new GenerationDisabledError(this.flag));
  }

  restoreSlot(): Promise<SlotFileResult> {
    return Promise.reject(new GenerationDisabledError(this.flag));
  }

  async eraseSlot(): Promise<number> {
    return 0;
  }

  isSleeping(): boolean {
    return false;
  }

  close(): Promise<void> {
    return this.embedder.close();
  }
}
