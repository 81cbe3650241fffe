// The engine of a server started with --embeddings (or --reranking): the -m model serves
// that job alone, through its Embedder. What the routes ask of an Engine (its id, tokenizer,
// context, stats for /health, /props and /v1/models) comes from the embedder; generation
// throws GenerationDisabledError, which the server answers with 501 naming the flag, as
// llama-server's generation routes do in embedding mode.
import type { Engine, SlotFileResult } from './engine.js';
import type { Embedder } from './embedder.js';
import { zeroCounters, type EngineStats, type GenerationEvent } from './types.js';
import { disabledCacheStats } from './prompt-cache.js';

/** Generation is off: the server answers 501, naming the flag that turned it off. */
export class GenerationDisabledError extends Error {
  constructor(flag: string) {
    super(`This server was started with \`${flag}\`: it serves ${flag === '--reranking' ? 'reranking' : 'embeddings'} only. Start it without \`${flag}\` for text generation (--embedding-model / --reranker-model serve a second model beside a chat model).`);
  }
}

export class EmbeddingOnlyEngine implements Engine {
  readonly info;
  readonly tokenizer;
  readonly adapterDescription: string;

  constructor(private readonly embedder: Embedder, private readonly flag: string, adapterDescription: string) {
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

  /** One slot: the embedder's worker; its queue is the requests waiting or running. */
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
