// Continuous batching. Requests wait in a priority queue for one of `slots` sequences.
// Each engine step is ONE forward pass holding every decoding sequence's next token plus
// up to the rest of the token budget of prompt chunks, so a long prompt delays running
// streams by at most one chunk. Every row's math is independent of the others in the
// pass, so a request's tokens do not depend on what it is batched with.
import type { TextTokenizer } from '../models/tokenizer.js';
import type { Engine, SlotFileResult } from './engine.js';
import { Channel } from './channel.js';
import { ForwardRunner, type Sampled, type SampleInput, type SeqChunk } from './forward.js';
import { isLooping } from './loop-detection.js';
import { hasPenalties, penalties, readsHistory } from './penalties.js';
import { BlockAllocator, KvRows } from './kv-cache.js';
import { PriorityQueue } from './priority-queue.js';
import { PromptCache, type PromptCacheOptions, type PromptCacheStats } from './prompt-cache.js';
import { randomSeed, Rng } from './rng.js';
import { SlotStore } from './slot-store.js';
import {
  QueueFullError,
  XTC_THRESHOLD,
  type EngineCounters,
  type EngineStats,
  type FinishReason,
  type GenerationEvent,
  type GenerationRequest,
  type ModelInfo,
  type Timings,
} from './types.js';

interface Sequence {
  req: GenerationRequest;
  /** Slot index while active, -1 while queued. */
  slot: number;
  events: Channel<GenerationEvent>;
  /** Its events are closed (finished, or cancelled by the client): an active one leaves at the next fill. */
  closed: boolean;
  rng: Rng;
  /** KV blocks, in position order. */
  table: number[];
  /** Leading blocks of `table` borrowed from the prompt cache. */
  borrowed: number;
  /** Prompt tokens whose KV came from the prompt cache. */
  cached: number;
  /** Prompt tokens already in the KV cache. */
  prefilled: number;
  /** Positions whose KV has been written (prompt and fed tokens). */
  written: number;
  /** The last sampled token, fed at the next step; -1 while prefilling. */
  next: number;
  /** Tokens emitted so far. */
  output: number[];
  generated: number;
  tStart: number;
  /** When it took its slot: prefill starts. */
  tAdmit: number;
  tFirst: number;
}

export interface SchedulerOptions {
  slots: number;
  maxQueue: number;
  /**
   * --kv-unified: a sequence may use the whole KV pool (info.contextSize is the total), so
   * a request waits in the queue until the pool has room for its prompt, and one whose
   * next token finds no room ends with 'length'. Otherwise every slot's context is
   * reserved and neither happens.
   */
  kvUnified: boolean;
  cache: Omit<PromptCacheOptions, 'blockSize'>;
}

export class Scheduler implements Engine {
  private readonly waiting = new PriorityQueue<Sequence>();
  private readonly active: Sequence[] = [];
  private readonly blocks: BlockAllocator;
  private readonly cache: PromptCache;
  private readonly rows: KvRows;
  private readonly slotStore: SlotStore;
  private readonly eos: Set<number>;
  /** The engine loop while it runs; cleared by the loop itself when it finds no work. */
  private loop: Promise<void> | undefined;
  private closed = false;
  private readonly counters: EngineCounters = {
    sequences_started: 0,
    sequences_completed: 0,
    total_prefill_tokens: 0,
    total_decode_tokens: 0,
    decode_steps_processed: 0,
    prefill_chunks_processed: 0,
  };

  constructor(
    readonly info: ModelInfo,
    readonly tokenizer: TextTokenizer,
    readonly adapterDescription: string,
    private readonly runner: ForwardRunner,
    private readonly options: SchedulerOptions,
  ) {
    const kv = runner.model.kv;
    this.blocks = new BlockAllocator(kv.blocks, kv.blockSize);
    this.cache = new PromptCache({ ...options.cache, blockSize: kv.blockSize }, (block) => this.blocks.release([block]));
    this.blocks.reclaim = () => this.cache.evictForPool();
    this.rows = new KvRows(runner.model.ops.gpu.device, kv, runner.model.cfg.kvHeads * runner.model.cfg.headDim);
    const { cfg } = runner.model;
    this.slotStore = new SlotStore(this.cache, this.blocks, this.rows, {
      slots: options.slots,
      layout: { model: options.cache.modelIdentity, layers: cfg.layers, kv_heads: cfg.kvHeads, head_dim: cfg.headDim, dtype: 'f32' },
      contextSize: info.contextSize,
      blockBytes: options.cache.blockBytes,
      capacityBytes: options.cache.capacityBytes,
      busy: (slot) => this.active.some((s) => s.slot === slot),
    });
    this.eos = new Set(info.eosTokenIds);
  }

  generate(req: GenerationRequest): AsyncIterable<GenerationEvent> {
    if (this.closed) throw new Error('engine is closed');
    const free = this.options.slots - this.active.length;
    if (this.waiting.size - free >= this.options.maxQueue) throw new QueueFullError(this.waiting.size);
    if (req.promptTokens.length === 0) throw new Error('empty prompt');
    if (req.promptTokens.length >= this.info.contextSize) {
      throw new Error(`prompt of ${req.promptTokens.length} tokens does not fit the context of ${this.info.contextSize}`);
    }
    const seq: Sequence = {
      req,
      slot: -1,
      events: undefined as unknown as Channel<GenerationEvent>,
      closed: false,
      rng: new Rng(req.sampling.seed ?? randomSeed()),
      table: [],
      borrowed: 0,
      cached: 0,
      prefilled: 0,
      written: 0,
      next: -1,
      output: [],
      generated: 0,
      tStart: performance.now(),
      tAdmit: 0,
      tFirst: 0,
    };
    seq.events = new Channel(() => this.cancel(seq));
    this.waiting.push(seq, req.priority ?? 'normal');
    if (req.signal?.aborted) this.cancel(seq);
    else req.signal?.addEventListener('abort', () => this.cancel(seq), { once: true });
    // Start on the next turn of the event loop, so requests that arrive together (a
    // burst of clients) are admitted into the same first step.
    this.loop ??= new Promise<void>((resolve) => setImmediate(resolve)).then(() => this.run());
    return seq.events;
  }

  stats(): EngineStats {
    const queued = this.waiting.size;
    const busy = new Set(this.active.filter((s) => !s.closed).map((s) => s.slot));
    return {
      slots: this.options.slots,
      activeSequences: busy.size,
      queueDepth: queued,
      slotStates: [
        ...Array.from({ length: this.options.slots }, (_, i) => (busy.has(i) ? 'decoding' as const : 'idle' as const)),
        ...Array.from({ length: queued }, () => 'queued' as const),
      ],
      counters: { ...this.counters },
    };
  }

  cacheStats(): PromptCacheStats {
    return this.cache.stats();
  }

  cacheReset(): PromptCacheStats {
    return this.cache.reset();
  }

  saveSlot(slot: number, path: string): Promise<SlotFileResult> {
    return this.slotStore.save(slot, path);
  }

  restoreSlot(slot: number, path: string): Promise<SlotFileResult> {
    return this.slotStore.restore(slot, path);
  }

  eraseSlot(slot: number): Promise<number> {
    return this.slotStore.erase(slot);
  }

  isSleeping(): boolean {
    return false;
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const seq of [...this.waiting.drain(), ...this.active]) this.cancel(seq);
    await this.loop;
    await this.tokenizer.close();
  }

  private cancel(seq: Sequence): void {
    if (seq.closed) return;
    seq.closed = true;
    seq.events.close();
    // A waiting sequence holds nothing; an active one is dropped at the next step.
    this.waiting.remove(seq);
  }

  private async run(): Promise<void> {
    while (this.admit()) {
      try {
        await this.step();
      } catch (e) {
        // A failed pass poisons every sequence in it; fail them rather than hang.
        console.error('engine step failed:', e);
        for (const seq of [...this.active]) this.finish(seq, e);
      }
    }
    // No await between the last admit() and this line: a request queued after it starts
    // a new loop.
    this.loop = undefined;
  }

  /** Drops closed sequences, fills free slots; false when there is nothing to run. */
  private admit(): boolean {
    for (let i = this.active.length - 1; i >= 0; i--) {
      if (this.active[i].closed) this.release(this.active.splice(i, 1)[0]);
    }
    while (this.active.length < this.options.slots && this.waiting.size > 0) {
      if (!this.roomFor(this.waiting.peek()!)) break;
      const seq = this.waiting.shift()!;
      if (this.usesCache(seq)) this.borrowPrefix(seq);
      this.reserve(seq, seq.req.promptTokens.length);
      const taken = new Set(this.active.map((a) => a.slot));
      seq.slot = [...Array(this.options.slots).keys()].find((i) => !taken.has(i))!;
      seq.tAdmit = performance.now();
      this.active.push(seq);
      this.counters.sequences_started++;
    }
    return this.active.length > 0;
  }

  /**
   * Starts a sequence from the longest cached prefix of its prompt: whole blocks shared,
   * then the rows of a partly matching block copied into a block of its own.
   */
  private borrowPrefix(seq: Sequence): void {
    const { blocks, partial } = this.cache.borrow(seq.req.promptTokens);
    seq.table.push(...blocks);
    seq.borrowed = blocks.length;
    seq.cached = blocks.length * this.blocks.blockSize;
    if (partial) {
      this.reserve(seq, seq.cached + partial.tokens);
      this.rows.copyBlock(partial.block, seq.table[seq.borrowed], partial.tokens);
      this.cache.release([partial.block]);
      seq.cached += partial.tokens;
    }
    seq.prefilled = seq.written = seq.cached;
  }

  /** Whether the KV pool can hold a queued sequence's prompt (always, unless --kv-unified). */
  private roomFor(seq: Sequence): boolean {
    if (!this.options.kvUnified) return true;
    // Blocks of the prompt the cache holds count as reclaimable: borrowing them uses them up.
    return Math.ceil(seq.req.promptTokens.length / this.blocks.blockSize) <= this.blocks.available + this.cache.reclaimable;
  }

  private async step(): Promise<void> {
    const budget = this.runner.model.maxTokens;
    const batch: Array<{ seq: Sequence; chunk: SeqChunk }> = [];
    /** Decoding sequences the shared KV pool has no room for (--kv-unified). */
    const full: Sequence[] = [];
    let tokens = 0;
    let decodes = 0;
    let prefills = 0;
    for (const seq of this.active) {
      if (seq.next < 0) continue;
      const pos = seq.req.promptTokens.length + seq.generated - 1;
      if (!this.blocks.ensure(seq.table, pos + 1)) {
        if (!this.options.kvUnified) throw new Error('KV cache exhausted');
        full.push(seq);
        continue;
      }
      batch.push({ seq, chunk: { tokens: [seq.next], startPos: pos, table: seq.table, sample: this.draw(seq) } });
      tokens++;
      decodes++;
    }
    for (const seq of this.active) {
      if (seq.next >= 0 || tokens >= budget) continue;
      const prompt = seq.req.promptTokens;
      const n = Math.min(budget - tokens, prompt.length - seq.prefilled);
      const end = seq.prefilled + n;
      const last = end === prompt.length;
      batch.push({ seq, chunk: { tokens: prompt.slice(seq.prefilled, end), startPos: seq.prefilled, table: seq.table, sample: last ? this.draw(seq) : undefined } });
      seq.prefilled = end;
      tokens += n;
      prefills++;
      this.counters.total_prefill_tokens += n;
    }
    for (const seq of full) if (!seq.closed) this.complete(seq, 'length');
    if (batch.length === 0) return;
    const sampled = await this.runner.run(batch.map((b) => b.chunk));
    if (decodes > 0) this.counters.decode_steps_processed++;
    this.counters.prefill_chunks_processed += prefills;
    const now = performance.now();
    let i = 0;
    for (const { seq, chunk } of batch) {
      seq.written = chunk.startPos + chunk.tokens.length;
      if (seq.next < 0 && seq.req.progress && !seq.closed) {
        const total = seq.req.promptTokens.length;
        seq.events.push({ type: 'progress', total, cache: seq.borrowed * this.blocks.blockSize, processed: seq.written, timeMs: now - seq.tAdmit });
      }
      if (!chunk.sample) continue;
      const result = sampled[i++];
      if (seq.closed) continue;
      if (seq.next < 0) seq.tFirst = now;
      this.accept(seq, result);
    }
  }

  /** Handles one sampled token: emit it, or finish the sequence. */
  private accept(seq: Sequence, { token, logprobs }: Sampled): void {
    if (this.eos.has(token)) return this.complete(seq, 'stop');
    seq.req.constraint?.accept(token);
    const event: GenerationEvent = logprobs ? { type: 'token', id: token, logprobs } : { type: 'token', id: token };
    if (seq.generated === 0) event.cachedTokens = seq.cached;
    seq.events.push(event);
    seq.generated++;
    seq.output.push(token);
    seq.next = token;
    this.counters.total_decode_tokens++;
    const length = seq.req.promptTokens.length + seq.generated;
    if (seq.req.loopDetection && isLooping(seq.output, seq.req.loopDetection)) this.complete(seq, 'stop');
    else if (seq.generated >= seq.req.maxTokens || length >= this.info.contextSize) this.complete(seq, 'length');
  }

  private complete(seq: Sequence, reason: FinishReason): void {
    const promptN = seq.req.promptTokens.length;
    const end = performance.now();
    seq.events.push({
      type: 'done',
      reason,
      promptTokens: promptN,
      completionTokens: seq.generated,
      cachedTokens: seq.cached,
      timings: timings(promptN - seq.cached, seq.tFirst - seq.tStart, seq.generated, end - seq.tFirst),
    });
    this.counters.sequences_completed++;
    this.finish(seq);
  }

  private finish(seq: Sequence, error?: unknown): void {
    const i = this.active.indexOf(seq);
    if (i >= 0) this.active.splice(i, 1);
    this.release(seq);
    seq.events.close(error);
    seq.closed = true;
  }

  private usesCache(seq: Sequence): boolean {
    return this.cache.enabled && seq.req.cachePrompt !== false;
  }

  /**
   * Returns a sequence's blocks: those with written KV go to the prompt cache, and become
   * its slot's cache; then whoever waits for the slot goes on.
   */
  private release(seq: Sequence): void {
    const table = seq.table.splice(0);
    if (!this.usesCache(seq)) {
      this.blocks.release(table);
      return this.slotStore.finished(seq.slot, []);
    }
    const history = [...seq.req.promptTokens, ...seq.output].slice(0, seq.written);
    this.blocks.release(this.cache.donate(history, table, seq.borrowed));
    this.slotStore.finished(seq.slot, history);
  }

  /**
   * This step's sampler input. Every random draw comes from the request's own stream, in
   * a fixed order per step, so a seed reproduces the same tokens in any batch.
   */
  private draw(seq: Sequence): SampleInput {
    const s = seq.req.sampling;
    const u = seq.rng.next();
    const xtcFires = (s.xtcProbability ?? 0) > 0 && seq.rng.next() < s.xtcProbability!;
    return {
      temperature: s.temperature,
      topK: s.topK,
      topP: s.topP,
      minP: s.minP ?? 0,
      pLess: s.pLess ?? false,
      xtcThreshold: xtcFires ? s.xtcThreshold ?? XTC_THRESHOLD : 0,
      u,
      mask: seq.req.constraint?.allowed(),
      penalties: hasPenalties(s) ? penalties(readsHistory(s) ? [...seq.req.promptTokens, ...seq.output] : [], s) : undefined,
      topLogprobs: seq.req.logprobs,
      postSampling: seq.req.postSamplingProbs,
    };
  }

  private reserve(seq: Sequence, tokens: number): void {
    // Blocks are sized for every slot's full context, and a unified pool admits a prompt
    // only when it has room, so this only fails on a bug.
    if (!this.blocks.ensure(seq.table, tokens)) throw new Error('KV cache exhausted');
  }
}

function timings(promptN: number, promptMs: number, predictedN: number, predictedMs: number): Timings {
  return {
    prompt_n: promptN,
    prompt_ms: promptMs,
    prompt_per_token_ms: promptN ? promptMs / promptN : 0,
    prompt_per_second: promptMs ? (promptN * 1000) / promptMs : 0,
    predicted_n: predictedN,
    predicted_ms: predictedMs,
    predicted_per_token_ms: predictedN ? predictedMs / predictedN : 0,
    predicted_per_second: predictedMs ? (predictedN * 1000) / predictedMs : 0,
  };
}
