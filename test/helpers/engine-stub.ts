// What the engines the tests script (./fake-engine.ts, ./tool-golden.ts) have in
// common: no prompt cache, no slot files, never asleep, each of n choices a request of its own.
import type { Engine, SlotFileResult } from '../../src/engine/engine.js';
import { disabledCacheStats, type PromptCacheStats } from '../../src/engine/prompt-cache.js';
import type { EngineStats, GenerationEvent, GenerationRequest, ModelInfo } from '../../src/engine/types.js';
import type { TextTokenizer } from '../../src/models/tokenizer.js';

export abstract class EngineStub implements Engine {
  abstract readonly info: ModelInfo;
  abstract readonly tokenizer: TextTokenizer;
  abstract readonly adapterDescription: string;
  abstract generate(req: GenerationRequest): AsyncIterable<GenerationEvent>;
  abstract stats(): EngineStats;

  /** Each choice runs as a request of its own (nothing is shared without a GPU). */
  generateChoices(reqs: GenerationRequest[]): AsyncIterable<GenerationEvent>[] {
    return reqs.map((req) => this.generate(req));
  }

  /** No prompt cache here: the disabled snapshot. */
  cacheStats(): PromptCacheStats {
    return disabledCacheStats(16);
  }

  cacheReset(): PromptCacheStats {
    return disabledCacheStats(16);
  }

  saveSlot(): Promise<SlotFileResult> {
    throw new Error('no slots to save');
  }

  restoreSlot(): Promise<SlotFileResult> {
    throw new Error('no slots to restore');
  }

  async eraseSlot(): Promise<number> {
    return 0;
  }

  isSleeping(): boolean {
    return false;
  }

  async close(): Promise<void> {}
}
