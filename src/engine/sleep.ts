// --sleep-idle-seconds: an Engine that lets go of the GPU after a spell without work. After
// `idleMs` with no request running (llama-server's sleep), it closes its scheduler and
// destroys the GPU device, which frees the weights, the KV cache and the pipelines; the
// next request (or slot action) loads the model again and waits for it, then runs as if
// nothing happened. The tokenizer and the model's facts stay, so the routes keep answering
// and /props tells it is asleep; counters carry across sleeps. The prompt cache and the
// slots' caches do not survive a sleep (their KV is gone).
import type { VisionEncoder } from '../models/vision-layers.js';
import type { TextTokenizer } from '../models/tokenizer.js';
import type { Engine, SlotFileResult } from './engine.js';
import type { PromptCacheStats } from './prompt-cache.js';
import { NO_MEMORY, type EngineCounters, type EngineStats, type KvStats, type GenerationEvent, type GenerationRequest, type ModelInfo } from './types.js';

/** A loaded engine and how to free its GPU device once it is closed. */
export interface Awake {
  engine: Engine;
  release(): void;
}

/** The cumulative fields of PromptCacheStats, carried across sleeps. */
const CACHE_COUNTERS = ['hits', 'lookups', 'inserts', 'evictions_lru', 'evictions_ttl', 'rejections_oversized'] as const;

export class SleepingEngine implements Engine {
  readonly info: ModelInfo;
  readonly tokenizer: TextTokenizer;
  readonly adapterDescription: string;
  readonly vision?: VisionEncoder;
  private awake: Awake | undefined;
  /** A sleep or a wake in progress; the other waits for it. */
  private transition: Promise<void> | undefined;
  /** Requests and slot actions running, or waiting for the model to load. */
  private busy = 0;
  private timer: NodeJS.Timeout | undefined;
  private closed = false;
  private readonly slots: number;
  /** The KV pool's shape, reported empty while asleep. */
  private readonly kv: Pick<KvStats, 'blockSize' | 'blocks'> | undefined;
  /** What the engines before the current one counted. */
  private readonly counted: EngineCounters;
  private readonly cacheCounted: Pick<PromptCacheStats, (typeof CACHE_COUNTERS)[number]>;
  /** While asleep: the last cache snapshot, its contents gone, its counters the totals. */
  private asleepCache: PromptCacheStats;

  constructor(
    first: Awake,
    private readonly load: () => Promise<Awake>,
    private readonly idleMs: number,
    private readonly log: (line: string) => void = () => {},
  ) {
    this.awake = first;
    ({ info: this.info, tokenizer: this.tokenizer, adapterDescription: this.adapterDescription } = first.engine);
    // Images encode on the awake engine's device, waking it as a request does.
    const vision = first.engine.vision;
    if (vision) this.vision = { ...vision, encode: (image) => this.whileAwake((engine) => engine.vision!.encode(image)) };
    const stats = first.engine.stats();
    this.slots = stats.slots;
    this.kv = stats.kv && { blockSize: stats.kv.blockSize, blocks: stats.kv.blocks };
    this.counted = zeroCounters(stats.counters);
    this.asleepCache = emptied(first.engine.cacheStats());
    this.cacheCounted = Object.fromEntries(CACHE_COUNTERS.map((k) => [k, 0])) as SleepingEngine['cacheCounted'];
    this.idle();
  }

  isSleeping(): boolean {
    return this.awake === undefined || this.transition !== undefined;
  }

  generate(req: GenerationRequest): AsyncIterable<GenerationEvent> {
    return this.generateChoices([req])[0]!;
  }

  generateChoices(reqs: GenerationRequest[]): AsyncIterable<GenerationEvent>[] {
    if (this.closed) throw new Error('engine is closed');
    // Awake: the scheduler's own checks (a full queue) throw here, before any response.
    if (this.awake && !this.transition) return this.awake.engine.generateChoices(reqs).map((events) => this.track(events));
    // Asleep: the first choice read wakes the model and queues them all.
    let queued: Promise<AsyncIterable<GenerationEvent>[]> | undefined;
    const queue = () => (queued ??= this.wake().then((engine) => engine.generateChoices(reqs)));
    return reqs.map((_, i) => this.track(this.afterWake(queue, i)));
  }

  stats(): EngineStats {
    const current = this.awake?.engine.stats();
    const counters = { ...this.counted };
    for (const k of Object.keys(counters) as Array<keyof EngineCounters>) counters[k] += current?.counters[k] ?? 0;
    return current
      ? { ...current, counters }
      : {
          slots: this.slots,
          activeSequences: 0,
          queueDepth: 0,
          slotStates: Array.from({ length: this.slots }, () => 'idle' as const),
          counters,
          memory: NO_MEMORY,
          ...(this.kv ? { kv: { ...this.kv, usedBlocks: 0, slotBlocks: Array.from({ length: this.slots }, () => 0) } } : {}),
        };
  }

  cacheStats(): PromptCacheStats {
    return this.awake ? this.withCounters(this.awake.engine.cacheStats()) : this.asleepCache;
  }

  /** Asleep, there is nothing to clear: the snapshot of the empty cache. */
  cacheReset(): PromptCacheStats {
    return this.awake && !this.transition ? this.withCounters(this.awake.engine.cacheReset()) : this.cacheStats();
  }

  saveSlot(slot: number, path: string): Promise<SlotFileResult> {
    return this.whileAwake((engine) => engine.saveSlot(slot, path));
  }

  restoreSlot(slot: number, path: string): Promise<SlotFileResult> {
    return this.whileAwake((engine) => engine.restoreSlot(slot, path));
  }

  eraseSlot(slot: number): Promise<number> {
    return this.whileAwake((engine) => engine.eraseSlot(slot));
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    await this.transition;
    if (!this.awake) return;
    await this.awake.engine.close();
    this.awake.release();
    this.awake = undefined;
  }

  private async *afterWake(queue: () => Promise<AsyncIterable<GenerationEvent>[]>, choice: number): AsyncGenerator<GenerationEvent> {
    yield* (await queue())[choice]!;
  }

  /** Counts a generation as work from its first read to its end. */
  private async *track(events: AsyncIterable<GenerationEvent>): AsyncGenerator<GenerationEvent> {
    this.busy++;
    clearTimeout(this.timer);
    try {
      yield* events;
    } finally {
      this.busy--;
      this.idle();
    }
  }

  private async whileAwake<T>(action: (engine: Engine) => Promise<T>): Promise<T> {
    this.busy++;
    clearTimeout(this.timer);
    try {
      return await action(await this.wake());
    } finally {
      this.busy--;
      this.idle();
    }
  }

  /** Starts the idle countdown when nothing runs. */
  private idle(): void {
    clearTimeout(this.timer);
    if (this.busy > 0 || this.closed || !this.awake) return;
    this.timer = setTimeout(() => void this.sleep(), this.idleMs);
    this.timer.unref();
  }

  private async sleep(): Promise<void> {
    await this.transition;
    const awake = this.awake;
    if (this.busy > 0 || this.closed || !awake) return;
    this.transition = (async () => {
      await awake.engine.close();
      // close() waited for the engine loop: nothing is in flight on the device.
      const { counters } = awake.engine.stats();
      for (const k of Object.keys(this.counted) as Array<keyof EngineCounters>) this.counted[k] += counters[k];
      const cache = awake.engine.cacheStats();
      for (const k of CACHE_COUNTERS) this.cacheCounted[k] += cache[k];
      this.asleepCache = emptied({ ...cache, ...this.cacheCounted, hit_rate: this.cacheCounted.lookups ? this.cacheCounted.hits / this.cacheCounted.lookups : 0 });
      awake.release();
      this.awake = undefined;
      this.log(`sleeping after ${this.idleMs / 1000} s idle: weights, KV cache and pipelines released`);
    })();
    try {
      await this.transition;
    } finally {
      this.transition = undefined;
    }
  }

  /** The awake engine, loading it first when asleep. */
  private async wake(): Promise<Engine> {
    while (this.transition) await this.transition;
    if (this.closed) throw new Error('engine is closed');
    if (this.awake) return this.awake.engine;
    const start = performance.now();
    this.transition = this.load().then((awake) => {
      this.awake = awake;
      this.log(`awake again in ${((performance.now() - start) / 1000).toFixed(1)} s`);
    });
    try {
      await this.transition;
    } finally {
      this.transition = undefined;
    }
    return this.awake!.engine;
  }

  /** A snapshot with the counters of the engines before the current one added. */
  private withCounters(stats: PromptCacheStats): PromptCacheStats {
    const out = { ...stats };
    for (const k of CACHE_COUNTERS) out[k] += this.cacheCounted[k];
    out.hit_rate = out.lookups ? out.hits / out.lookups : 0;
    return out;
  }
}

function zeroCounters(c: EngineCounters): EngineCounters {
  return Object.fromEntries(Object.keys(c).map((k) => [k, 0])) as unknown as EngineCounters;
}

/** A cache snapshot with its contents gone (what a slept engine holds), counters kept. */
function emptied(stats: PromptCacheStats): PromptCacheStats {
  return { ...stats, entries: 0, bytes: 0, total_blocks_stored: 0, unique_block_hashes: 0, apc_active_entries: 0, ...(stats.state_snapshots !== undefined ? { state_snapshots: 0 } : {}) };
}
