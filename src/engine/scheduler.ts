// Continuous batching. Requests wait in a priority queue for one of `slots` sequences; one
// pinned to a slot (id_slot) waits for that slot, and the requests behind it that can start
// go first.
// Each engine step is ONE forward pass holding every decoding sequence's next token plus
// up to the rest of the token budget of prompt chunks, so a long prompt delays running
// streams by at most one chunk. Every row's math is independent of the others in the
// pass, so a request's tokens do not depend on what it is batched with.
// A request for several choices (n > 1) prefills its prompt once: the choices admitted
// while it is prefilling wait in their slots (holding room for the prompt, as every
// admitted sequence does), and the step that finishes the prompt forks them (they give
// that room back, share its full KV blocks, copy the partly filled last one, and draw
// their first tokens from the same logits). A choice admitted later prefills on its own, through
// the prompt cache when that holds the prompt.
// A request with a context shift that fills its context drops the older half of its
// tokens after the ones it keeps, and re-prefills what follows them at their new positions
// (the KV of a token depends on its position through RoPE) before generating on.
// A model's sliding-window layers may keep only their window, in a ring per slot
// (./kv-rings.ts): a sequence then starts from a cached prefix only where its slot's rings
// hold that prefix's last window, and a context shift prefills from the start again.
// With speculative decoding (./speculative.ts) a decoding sequence may feed drafted tokens
// after its last one, sampled at every position in the same pass; the KV of the drafts
// that were not kept is left to be overwritten (a sequence's `written` stops before it).
// A draft model drafts in passes of its own before the step's pass, for all drafting
// sequences at once (./drafters/draft-model.ts).
import type { TextTokenizer } from '../models/tokenizer.js';
import type { Engine, SlotFileResult } from './engine.js';
import { Channel } from './channel.js';
import type { DraftModel, DraftRequest } from './drafters/draft-model.js';
import type { VisionEncoder } from '../models/vision-layers.js';
import { ForwardRunner, type ChunkImage, type Sampled, type SampleInput, type SeqChunk } from './forward.js';
import { isLooping } from './loop-detection.js';
import { hasPenalties, penalties, readsHistory } from './penalties.js';
import { BlockAllocator, KvRows, type BlockCopy } from './kv-cache.js';
import { KvRings } from './kv-rings.js';
import { PriorityQueue } from './priority-queue.js';
import { PromptCache, type PromptCacheOptions, type PromptCacheStats } from './prompt-cache.js';
import { randomSeed, Rng } from './rng.js';
import type { RequestMemory } from './memory-budget.js';
import { RecurrentStates } from './recurrent-state.js';
import { SlotStore } from './slot-store.js';
import { Speculation, StepCost, type SpeculativeOptions } from './speculative.js';
import {
  modelMemory,
  QueueFullError,
  XTC_THRESHOLD,
  zeroCounters,
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
  /** The slot it must run in (GenerationRequest.slot); undefined: any. */
  pinned?: number;
  events: Channel<GenerationEvent>;
  /** Its events are closed (finished, or cancelled by the client): an active one leaves at the next fill. */
  closed: boolean;
  /** Gives back its share of its request's memory reservation; cleared once called. */
  settle?: () => void;
  rng: Rng;
  /** KV blocks, in position order. */
  table: number[];
  /** Leading blocks of `table` borrowed from the prompt cache. */
  borrowed: number;
  /** Prompt tokens the prompt cache served (a fork reports its parent's). */
  cached: number;
  /** The token at each position: the prompt, then every emitted token. */
  tokens: number[];
  /** Positions of `tokens` scheduled into the KV cache. */
  prefilled: number;
  /** Positions whose KV has been written. */
  written: number;
  /** Positions its slot's recurrent state has gone through (a hybrid model's; `written` unless a verify round went past it). */
  stated: number;
  /** The prompt cache's snapshot of its recurrent state at the prompt's last block boundary, until it is cached. */
  promptSnapshot?: number;
  /** The last of `tokens` (the last sampled) is fed at the next step; false while prefilling. */
  decoding: boolean;
  /** A context shift has dropped some of its tokens: its later events say so. */
  shifted: boolean;
  /** Tokens emitted so far. */
  output: number[];
  generated: number;
  tStart: number;
  /** When it took its slot: prefill starts. */
  tAdmit: number;
  tFirst: number;
  /** Set on a further choice of an n > 1 request until it forks from (or gives up on) this first choice. */
  parent?: Sequence;
  /** Its drafter, when speculative decoding is on and the request can use it. */
  spec?: Speculation;
}

/** A decoding sequence's verify round in a step: its drafts, and its RNG after each position's draws. */
interface Round {
  drafts: number[];
  rng: Uint32Array[];
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
  /** How long the engine stays idle before the KV pool shrinks back (BlockAllocator.shrink). */
  kvShrinkIdleMs: number;
  cache: Omit<PromptCacheOptions, 'blockSize'>;
  /** Speculative decoding; absent = off. */
  speculative?: SpeculativeOptions;
  /** The model's image encoder (Engine.vision). */
  vision?: VisionEncoder;
  /** The draft model, when speculative.kind is 'draft-model'. */
  drafter?: DraftModel;
  /** Request memory admission: each request reserves its estimate until its last choice ends. */
  memory: RequestMemory;
}

export class Scheduler implements Engine {
  readonly vision?: VisionEncoder;
  private readonly waiting = new PriorityQueue<Sequence>();
  private readonly active: Sequence[] = [];
  private readonly blocks: BlockAllocator;
  private readonly cache: PromptCache;
  private readonly rows: KvRows;
  private readonly rings: KvRings;
  private readonly states: RecurrentStates;
  private readonly slotStore: SlotStore;
  private readonly eos: Set<number>;
  private readonly stepCost = new StepCost();
  /** The engine loop while it runs; cleared by the loop itself when it finds no work. */
  private loop: Promise<void> | undefined;
  /** The KV pool's shrink, pending while the engine is idle. */
  private shrinkTimer: NodeJS.Timeout | undefined;
  private closed = false;
  private readonly counters: EngineCounters = zeroCounters();

  constructor(
    readonly info: ModelInfo,
    readonly tokenizer: TextTokenizer,
    readonly adapterDescription: string,
    private readonly runner: ForwardRunner,
    private readonly options: SchedulerOptions,
  ) {
    this.vision = options.vision;
    const kv = runner.model.kv;
    this.blocks = new BlockAllocator(kv.blocks, kv.blockSize, { initial: kv.blocks, max: kv.maxBlocks, resize: (blocks) => this.rows.resize(blocks) });
    this.cache = new PromptCache({ ...options.cache, blockSize: kv.blockSize }, (block) => this.blocks.release([block]));
    this.blocks.reclaim = () => this.cache.evictForPool();
    this.rows = new KvRows(runner.model.ops.gpu.device, kv, runner.model.cfg.kvHeads * runner.model.cfg.headDim);
    this.states = new RecurrentStates(runner.model.ops.gpu.device, runner.model.states, options.cache.snapshots);
    const { cfg } = runner.model;
    this.rings = new KvRings(runner.model.ops.gpu.device, kv, cfg.layerKv);
    this.slotStore = new SlotStore(this.cache, this.blocks, this.rows, this.states, this.rings, {
      slots: options.slots,
      layout: {
        model: options.cache.modelIdentity,
        layers: cfg.layers,
        kv_heads: cfg.kvHeads,
        head_dim: cfg.headDim,
        kv_layout: kv.layers.map((l) => (!l ? '-' : l.ring ? 'r' : 'p')).join(''),
        state_bytes: this.states.snapshotBytes,
      },
      types: kv.types,
      contextSize: info.contextSize,
      blockBytes: options.cache.blockBytes,
      capacityBytes: options.cache.capacityBytes,
      busy: (slot) => this.active.some((s) => s.slot === slot),
    });
    this.eos = new Set(info.eosTokenIds);
  }

  generate(req: GenerationRequest): AsyncIterable<GenerationEvent> {
    return this.generateChoices([req])[0]!;
  }

  generateChoices(reqs: GenerationRequest[]): AsyncIterable<GenerationEvent>[] {
    if (this.closed) throw new Error('engine is closed');
    const prompt = reqs[0]?.promptTokens;
    if (!prompt) throw new Error('no choices');
    const free = this.options.slots - this.active.length;
    if (this.waiting.size + reqs.length - 1 - free >= this.options.maxQueue) throw new QueueFullError(this.waiting.size);
    if (prompt.length === 0) throw new Error('empty prompt');
    const { hidden } = this.runner.model.cfg;
    const image = reqs[0]!.images?.find((im) => im.rows.length / hidden > this.runner.model.maxTokens);
    if (image) throw new Error(`an image of ${image.rows.length / hidden} tokens does not fit one prefill chunk of ${this.runner.model.maxTokens} (--batch-size)`);
    if (prompt.length >= this.info.contextSize) {
      throw new Error(`prompt of ${prompt.length} tokens does not fit the context of ${this.info.contextSize}`);
    }
    if (reqs.some((r) => r.promptTokens.length !== prompt.length || r.promptTokens.some((t, i) => t !== prompt[i]))) {
      throw new Error('the choices of one request share one prompt');
    }
    const slot = reqs[0]!.slot;
    if (slot !== undefined && !(Number.isInteger(slot) && slot >= 0 && slot < this.options.slots)) throw new Error(`no slot ${slot}`);
    const maxTokens = Math.max(...reqs.map((r) => r.maxTokens));
    const release = this.options.memory.reserve(this.options.memory.estimate(prompt.length, maxTokens, reqs.length));
    let open = reqs.length;
    const settle = () => {
      if (--open === 0) release();
    };
    const first = this.enqueue(reqs[0]!, undefined, settle);
    const seqs = [first, ...reqs.slice(1).map((req) => this.enqueue(req, first, settle))];
    // Start on the next turn of the event loop, so requests that arrive together (a
    // burst of clients) are admitted into the same first step.
    clearTimeout(this.shrinkTimer);
    this.loop ??= new Promise<void>((resolve) => setImmediate(resolve)).then(() => this.run());
    return seqs.map((seq) => seq.events);
  }

  stats(): EngineStats {
    const queued = this.waiting.size;
    const running = this.active.filter((s) => !s.closed);
    const busy = new Set(running.map((s) => s.slot));
    const slotBlocks = Array.from({ length: this.options.slots }, () => 0);
    for (const seq of running) slotBlocks[seq.slot] = seq.table.length;
    const used = new Set(running.flatMap((s) => s.table));
    return {
      slots: this.options.slots,
      activeSequences: busy.size,
      queueDepth: queued,
      slotStates: [
        ...Array.from({ length: this.options.slots }, (_, i) => (busy.has(i) ? 'decoding' as const : 'idle' as const)),
        ...Array.from({ length: queued }, () => 'queued' as const),
      ],
      counters: { ...this.counters },
      memory: modelMemory([this.runner.model, ...(this.options.drafter ? [this.options.drafter.model] : [])]),
      requestMemory: { budgetBytes: this.options.memory.budgetBytes, inUseBytes: this.options.memory.inUseBytes },
      kv: { blockSize: this.blocks.blockSize, blocks: this.blocks.max, usedBlocks: used.size, slotBlocks },
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
    clearTimeout(this.shrinkTimer);
    for (const seq of [...this.waiting.drain(), ...this.active]) this.cancel(seq);
    await this.loop;
    await this.tokenizer.close();
  }

  private enqueue(req: GenerationRequest, parent: Sequence | undefined, settle: () => void): Sequence {
    const seq: Sequence = {
      req,
      settle,
      slot: -1,
      ...(!parent && req.slot !== undefined ? { pinned: req.slot } : {}),
      events: undefined as unknown as Channel<GenerationEvent>,
      closed: false,
      rng: new Rng(req.sampling.seed ?? randomSeed()),
      table: [],
      borrowed: 0,
      cached: 0,
      tokens: [...req.promptTokens],
      prefilled: 0,
      written: 0,
      stated: 0,
      decoding: false,
      shifted: false,
      output: [],
      generated: 0,
      tStart: performance.now(),
      tAdmit: 0,
      tFirst: 0,
      ...(parent ? { parent } : {}),
      // A grammar's state cannot be stepped ahead through drafts and back.
      ...(this.options.speculative && !req.constraint ? { spec: new Speculation(this.options.speculative) } : {}),
    };
    seq.events = new Channel(() => this.cancel(seq));
    this.waiting.push(seq, req.priority ?? 'normal');
    if (req.signal?.aborted) this.cancel(seq);
    else req.signal?.addEventListener('abort', () => this.cancel(seq), { once: true });
    return seq;
  }

  private cancel(seq: Sequence): void {
    if (seq.closed) return;
    seq.closed = true;
    this.settle(seq);
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
    if (this.active.length === 0 && this.waiting.size === 0) {
      this.shrinkTimer = setTimeout(() => this.shrinkKv(), this.options.kvShrinkIdleMs).unref();
    }
  }

  /**
   * Gives the KV pool's unused growth back while no sequence runs: the prompt cache's
   * blocks past the smaller size move below it first (unless a slot action holds them).
   */
  private shrinkKv(): void {
    if (this.loop || this.closed) return;
    this.blocks.shrink((moves) => {
      if (!this.cache.move(moves)) return false;
      this.rows.copyBlocks([...moves].map(([from, to]) => ({ from, to, rows: this.blocks.blockSize })));
      return true;
    });
  }

  /**
   * Drops closed sequences, fills free slots with the first queued sequences that can start
   * (a pinned one waits for its slot, letting those behind it pass); false when there is
   * nothing to run.
   */
  private admit(): boolean {
    for (let i = this.active.length - 1; i >= 0; i--) {
      if (this.active[i].closed) this.release(this.active.splice(i, 1)[0]);
    }
    while (this.active.length < this.options.slots) {
      const taken = new Set(this.active.map((a) => a.slot));
      let seq: Sequence | undefined;
      for (const s of this.waiting) {
        if (canStart(s, taken)) {
          seq = s;
          break;
        }
      }
      if (!seq || !this.roomFor(seq)) break;
      this.waiting.remove(seq);
      seq.slot = seq.pinned ?? this.freeSlot(seq, taken);
      // A choice that may still fork holds its prompt's blocks until then, as any other
      // sequence does (a unified pool admitted it for them); it gives them back when it forks.
      if (seq.parent && awaitsFork(seq.parent)) this.reserve(seq, seq.req.promptTokens.length);
      else this.startPrompt(seq);
      seq.tAdmit = performance.now();
      this.active.push(seq);
      this.counters.sequences_started++;
    }
    return this.active.length > 0;
  }

  /**
   * A slot not in `taken` (one exists) for `seq`, preferring one that no queued sequence is
   * pinned to, and of those, where ring layers keep their window per slot, the one whose
   * rings hold the most of its prompt.
   */
  private freeSlot(seq: Sequence, taken: Set<number>): number {
    const wanted = new Set<number>();
    for (const s of this.waiting) if (s.pinned !== undefined) wanted.add(s.pinned);
    const free = [...Array(this.options.slots).keys()].filter((i) => !taken.has(i));
    const open = free.filter((i) => !wanted.has(i));
    if (open.length === 0) return free[0]!;
    if (!this.rings.any || !this.usesCache(seq)) return open[0]!;
    const prompt = this.cacheTokens(seq, seq.req.promptTokens);
    const reach = open.map((slot) => this.rings.reusable(slot, prompt, prompt.length - 1));
    return open[reach.indexOf(Math.max(...reach))]!;
  }

  /** Takes the blocks of a sequence's prompt: the longest prefix the prompt cache holds, then fresh ones. */
  private startPrompt(seq: Sequence): void {
    seq.parent = undefined;
    if (this.usesCache(seq)) this.borrowPrefix(seq);
    this.rings.start(seq.slot, seq.cached);
    this.reserve(seq, seq.req.promptTokens.length);
  }

  /**
   * Starts a sequence from the longest cached prefix of its prompt: whole blocks shared,
   * then the rows of a partly matching block copied into a block of its own, and a hybrid
   * model's recurrent state from the prefix's snapshot. With ring layers, only a prefix
   * whose last window its slot's rings hold.
   */
  private borrowPrefix(seq: Sequence): void {
    const prompt = this.cacheTokens(seq, seq.req.promptTokens);
    const { blocks, partial, state } = this.cache.borrow(prompt.slice(0, this.rings.reusable(seq.slot, prompt, prompt.length - 1) + 1));
    const tokens = blocks.length * this.blocks.blockSize + (partial?.tokens ?? 0);
    if (tokens > 0 && this.rings.reusable(seq.slot, prompt, tokens) < tokens) {
      this.cache.release(partial ? [...blocks, partial.block] : blocks);
      return;
    }
    if (state !== undefined) this.states.load(state, seq.slot);
    seq.table.push(...blocks);
    seq.borrowed = blocks.length;
    seq.cached = blocks.length * this.blocks.blockSize;
    if (partial) {
      this.reserve(seq, seq.cached + partial.tokens);
      this.rows.copyBlocks([{ from: partial.block, to: seq.table[seq.borrowed]!, rows: partial.tokens }]);
      this.cache.release([partial.block]);
      seq.cached += partial.tokens;
    }
    seq.prefilled = seq.written = seq.stated = seq.cached;
  }

  /** Whether the KV pool can hold a queued sequence's prompt (always, unless --kv-unified). */
  private roomFor(seq: Sequence): boolean {
    if (!this.options.kvUnified) return true;
    // Blocks of the prompt the cache holds count as reclaimable: borrowing them uses them up.
    const reclaimable = this.cache.reclaimable((block) => !this.blocks.isShared(block));
    return Math.ceil(seq.req.promptTokens.length / this.blocks.blockSize) <= this.blocks.available + reclaimable;
  }

  private async step(): Promise<void> {
    const budget = this.runner.model.maxTokens;
    const batch: Array<{ seq: Sequence; chunk: SeqChunk; forks: Sequence[]; round?: Round }> = [];
    /** KV copies that follow the pass: the forks' copies of their prompt's partly filled last block. */
    const copies: BlockCopy[] = [];
    /** Decoding sequences the shared KV pool has no room for (--kv-unified). */
    const full: Sequence[] = [];
    let tokens = 0;
    let decodes = 0;
    let prefills = 0;
    const decoding = this.active.filter((s) => s.decoding);
    // Drafts take the budget the decoding sequences' own tokens leave.
    let spare = budget - decoding.length;
    const proposed = await this.propose(decoding, spare, this.stepCost.rho(decoding.length));
    for (const seq of decoding) {
      const pos = seq.tokens.length - 1;
      let drafts = (proposed.get(seq) ?? []).slice(0, spare);
      if (drafts.length > 0 && !this.blocks.ensure(seq.table, pos + 1 + drafts.length)) drafts = [];
      if (drafts.length === 0) this.options.drafter?.keep(seq, seq.tokens.length, 0);
      if (!this.blocks.ensure(seq.table, pos + 1)) {
        if (!this.options.kvUnified) throw new Error('KV cache exhausted');
        full.push(seq);
        continue;
      }
      if (drafts.length === 0) {
        batch.push({ seq, chunk: { tokens: [seq.tokens[pos]!], startPos: pos, table: seq.table, state: seq.slot, sample: this.draw(seq), seqImages: seq.req.images }, forks: [] });
      } else {
        // Each position draws as plain decode would after the drafts before it.
        const verify: SampleInput[] = [];
        const rng: Uint32Array[] = [];
        for (let i = 0; i < drafts.length; i++) {
          verify.push(this.draw(seq, drafts.slice(0, i)));
          rng.push(seq.rng.save());
        }
        const sample = this.draw(seq, drafts);
        rng.push(seq.rng.save());
        // A recurrent state advances through every drafted token: keep it to go back to.
        this.states.copy(seq.slot, [this.snapshotSlot(seq)]);
        batch.push({ seq, chunk: { tokens: [seq.tokens[pos]!, ...drafts], startPos: pos, table: seq.table, state: seq.slot, sample, verify, seqImages: seq.req.images }, forks: [], round: { drafts, rng } });
        spare -= drafts.length;
        tokens += drafts.length;
      }
      tokens++;
      decodes++;
    }
    for (const seq of this.active) {
      if (seq.decoding || tokens >= budget) continue;
      if (seq.parent) {
        if (awaitsFork(seq.parent)) continue;
        this.detach(seq);
      }
      // A fork between its fork and its first token.
      if (seq.prefilled === seq.tokens.length) continue;
      let end = this.chunkEnd(seq, Math.min(seq.prefilled + budget - tokens, seq.tokens.length));
      // A chunk stops where a hybrid model's state is to be snapshotted.
      const boundary = this.snapshotBoundary(seq);
      if (boundary > seq.prefilled && boundary < end) end = boundary;
      // An image that does not fit what this step has left waits for the next.
      if (end === seq.prefilled) continue;
      const n = end - seq.prefilled;
      const chunk: SeqChunk = { tokens: seq.tokens.slice(seq.prefilled, end), startPos: seq.prefilled, table: seq.table, state: seq.slot, seqImages: seq.req.images };
      const images = this.chunkImages(seq, end);
      if (images.length > 0) chunk.images = images;
      let forks: Sequence[] = [];
      if (end === seq.tokens.length) {
        chunk.sample = this.draw(seq);
        forks = this.fork(seq, copies);
        if (forks.length > 0) chunk.forks = forks.map((f) => this.draw(f));
      }
      batch.push({ seq, chunk, forks });
      seq.prefilled = end;
      tokens += n;
      prefills++;
      this.counters.total_prefill_tokens += n;
    }
    for (const seq of full) if (!seq.closed) this.complete(seq, 'length');
    if (batch.length === 0) return;
    const t0 = performance.now();
    const sampled = await this.runner.run(batch.map((b) => b.chunk));
    if (prefills === 0) this.stepCost.observe(tokens, performance.now() - t0);
    // After the pass that wrote the blocks, states and rings they copy, before the next one reads them.
    this.rows.copyBlocks(copies);
    for (const { seq, chunk, forks } of batch) {
      this.rings.wrote(seq.slot, chunk.startPos + chunk.tokens.length);
      this.states.copy(seq.slot, forks.map((f) => f.slot));
      this.rings.copy(seq.slot, forks.map((f) => f.slot));
    }
    if (decodes > 0) this.counters.decode_steps_processed++;
    this.counters.prefill_chunks_processed += prefills;
    const now = performance.now();
    let i = 0;
    for (const { seq, chunk, forks, round } of batch) {
      seq.written = seq.stated = chunk.startPos + chunk.tokens.length;
      if (!round && seq.written === this.snapshotBoundary(seq)) this.snapshotPrompt(seq);
      if (round) {
        const results = sampled.slice(i, (i += round.drafts.length + 1));
        if (!seq.closed) this.acceptRound(seq, round, results);
        continue;
      }
      if (!seq.decoding) this.progress(seq, now);
      for (const f of forks) this.progress(f, now);
      if (!chunk.sample) continue;
      for (const s of [seq, ...forks]) {
        const result = sampled[i++]!;
        if (s.closed) continue;
        if (s.generated === 0) s.tFirst = now;
        this.accept(s, result);
      }
    }
  }

  /**
   * Forks the choices waiting for `parent`, whose prompt this step finishes: each gives back
   * the blocks it held for its prompt, shares the prompt's full blocks and gets a copy of
   * the partly filled last one, and of a recurrent model's state (copied after the pass
   * that writes them).
   */
  private fork(parent: Sequence, copies: BlockCopy[]): Sequence[] {
    const forks = this.active.filter((s) => s.parent === parent && !s.closed);
    const length = parent.tokens.length;
    const full = Math.floor(length / this.blocks.blockSize);
    const shared = parent.table.slice(0, full);
    const rows = length - full * this.blocks.blockSize;
    for (const f of forks) {
      f.parent = undefined;
      this.blocks.release(f.table.splice(0));
      this.blocks.share(shared);
      f.table.push(...shared);
      this.reserve(f, length);
      if (rows > 0) copies.push({ from: parent.table[full]!, to: f.table[full]!, rows });
      f.prefilled = f.written = f.stated = length;
      f.cached = parent.cached;
    }
    return forks;
  }

  /** A choice that can no longer fork (its first choice left) prefills on its own, through the prompt cache. */
  private detach(seq: Sequence): void {
    this.blocks.release(seq.table.splice(0));
    this.startPrompt(seq);
  }

  /** A 'progress' event after a prefill chunk of the prompt (not the re-prefill of a context shift), when asked for. */
  private progress(seq: Sequence, now: number): void {
    if (!seq.req.progress || seq.closed || seq.generated > 0) return;
    seq.events.push({ type: 'progress', total: seq.req.promptTokens.length, cache: seq.cached, processed: seq.written, timeMs: now - seq.tAdmit });
  }

  /**
   * The tokens each decoding sequence drafts this step: at most `spare` in all, and none
   * that could carry a sequence past its token limit or its context (the round's last
   * sample is one more token). `rho` is a verified token's cost in a decode step.
   */
  private async propose(decoding: Sequence[], spare: number, rho: number): Promise<Map<Sequence, number[]>> {
    const proposed = new Map<Sequence, number[]>();
    const { drafter } = this.options;
    // A draft-model pass over a plain step: what drafting one token costs, once both are measured.
    const passMs = drafter?.passCost();
    const stepMs = this.stepCost.stepMs(decoding.length);
    const delta = passMs !== undefined && stepMs !== undefined ? passMs / stepMs : 0;
    const requests: DraftRequest[] = [];
    for (const seq of decoding) {
      if (!seq.spec || seq.closed) continue;
      const room = Math.min(spare, seq.req.maxTokens - seq.generated - 1, this.info.contextSize - seq.tokens.length - 1);
      if (room <= 0) continue;
      if (drafter) {
        const k = seq.spec.draftLength(seq.generated, rho + delta, room);
        if (k > 0) requests.push({ key: seq, tokens: seq.tokens, k, sample: (drafted) => this.draftSample(seq, drafted) });
        spare -= k;
      } else {
        const drafts = seq.spec.draft(seq.tokens, seq.generated, rho, room);
        proposed.set(seq, drafts);
        spare -= drafts.length;
      }
    }
    if (drafter && requests.length > 0) {
      for (const [seq, drafts] of await drafter.draft(requests)) proposed.set(seq as Sequence, drafts);
    }
    return proposed;
  }

  /**
   * Keeps the longest prefix of a round's drafts that its samples reproduce, then the
   * sample after it, as plain decode would have emitted them one by one; rewinds the RNG
   * to after the last kept position's draws.
   */
  private acceptRound(seq: Sequence, round: Round, results: Sampled[]): void {
    const { drafts } = round;
    let kept = 0;
    while (kept < drafts.length && results[kept]!.token === drafts[kept]) kept++;
    // The last token and the kept drafts have their KV written; the rest are overwritten later.
    seq.written = seq.tokens.length + kept;
    seq.spec!.record(drafts.length, kept);
    this.options.drafter?.keep(seq, seq.tokens.length, kept);
    this.counters.draft_tokens += drafts.length;
    this.counters.draft_accepted_tokens += kept;
    seq.rng.restore(round.rng[kept]!);
    const start = seq.tokens.length - 1;
    for (let i = 0; i <= kept; i++) {
      this.accept(seq, results[i]!);
      if (seq.closed || !seq.decoding) break;
    }
    // A recurrent state went through the rejected drafts too: back to before the round, and
    // the kept tokens prefilled again (the last one's logits give the next token).
    if (kept < drafts.length && this.states.any && !seq.closed && seq.decoding) {
      this.states.copy(this.snapshotSlot(seq), [seq.slot]);
      seq.prefilled = seq.stated = start;
      seq.decoding = false;
    }
  }

  /** Where a speculating sequence's recurrent state waits out a verify round (LoadedModel state slots past the engine's). */
  private snapshotSlot(seq: Sequence): number {
    return this.options.slots + seq.slot;
  }

  /** Handles one sampled token: emit it, or finish the sequence. */
  private accept(seq: Sequence, { token, logprobs }: Sampled): void {
    if (this.eos.has(token)) return this.complete(seq, 'stop');
    seq.req.constraint?.accept(token);
    const event: GenerationEvent = logprobs ? { type: 'token', id: token, logprobs } : { type: 'token', id: token };
    if (seq.generated === 0) event.cachedTokens = seq.cached;
    if (seq.shifted) event.contextShifted = true;
    const draft = seq.spec?.stats();
    if (draft) event.draft = draft;
    seq.events.push(event);
    seq.generated++;
    seq.output.push(token);
    seq.tokens.push(token);
    seq.decoding = true;
    this.counters.total_decode_tokens++;
    if (seq.req.loopDetection && isLooping(seq.output, seq.req.loopDetection)) this.complete(seq, 'stop');
    else if (seq.generated >= seq.req.maxTokens) this.complete(seq, 'length');
    else if (seq.tokens.length >= this.info.contextSize && !this.shift(seq)) this.complete(seq, 'length');
  }

  /**
   * Frees half of a full context, as llama-server's context shift does: of the positions
   * written, the first `keep` stay and half of the rest, the oldest, go. The blocks wholly
   * inside the kept start are kept (none where ring layers keep their window: their rings
   * no longer hold the window before the kept start); the tokens after them are prefilled
   * again at their new positions, the last sampled one included, whose logits give the
   * next token. False when there is nothing to drop (no shift asked for, or it keeps
   * everything) or, in a unified pool, no room for the tokens to prefill again.
   */
  private shift(seq: Sequence): boolean {
    const shift = seq.req.contextShift;
    if (!shift || seq.req.images?.length) return false;
    const written = seq.tokens.length - 1;
    const keep = Math.min(Math.max(shift.keep, 0), written);
    const discard = Math.floor((written - keep) / 2);
    if (discard === 0) return false;
    seq.tokens.splice(keep, discard);
    this.options.drafter?.truncate(seq, keep);
    const kept = this.rings.any ? 0 : Math.floor(keep / this.blocks.blockSize);
    this.rings.start(seq.slot, 0);
    const dropped = seq.table.splice(kept);
    // Borrowed blocks go back to the prompt cache, owned (or shared) ones to the pool.
    this.cache.release(dropped.slice(0, Math.max(0, seq.borrowed - kept)));
    this.blocks.release(dropped.slice(Math.max(0, seq.borrowed - kept)));
    seq.borrowed = Math.min(seq.borrowed, kept);
    seq.prefilled = seq.written = kept * this.blocks.blockSize;
    seq.decoding = false;
    seq.shifted = true;
    // Fewer blocks than it gave back; only a unified pool can have handed them on since.
    if (this.blocks.ensure(seq.table, seq.tokens.length)) return true;
    if (!this.options.kvUnified) throw new Error('KV cache exhausted');
    return false;
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
      timings: { ...timings(promptN - seq.cached, seq.tFirst - seq.tStart, seq.generated, end - seq.tFirst), ...seq.spec?.stats() },
      ...(seq.shifted ? { contextShifted: true } : {}),
    });
    this.counters.sequences_completed++;
    this.finish(seq);
  }

  private finish(seq: Sequence, error?: unknown): void {
    const i = this.active.indexOf(seq);
    if (i >= 0) this.active.splice(i, 1);
    // A failed pass may have left its state anywhere.
    if (error !== undefined) seq.stated = -1;
    this.release(seq);
    seq.events.close(error);
    seq.closed = true;
    this.settle(seq);
  }

  /** Gives back a closed sequence's share of its request's memory reservation (once). */
  private settle(seq: Sequence): void {
    const settle = seq.settle;
    seq.settle = undefined;
    settle?.();
  }

  private usesCache(seq: Sequence): boolean {
    return this.cache.enabled && seq.req.cachePrompt !== false;
  }

  /** `tokens` as the prompt cache knows them: each image's tokens as ids past the vocabulary, from its key. */
  private cacheTokens(seq: Sequence, tokens: number[]): number[] {
    const images = seq.req.images;
    if (!images?.length) return tokens;
    const { hidden, vocab } = this.runner.model.cfg;
    const keyed = [...tokens];
    for (const im of images) {
      for (let i = 0; i < im.rows.length / hidden && im.start + i < keyed.length; i++) keyed[im.start + i] = vocab + ((im.key + i) % 2 ** 30);
    }
    return keyed;
  }

  /** Where a prefill chunk that could run to `end` stops: before an image it would cut in two. */
  private chunkEnd(seq: Sequence, end: number): number {
    const { hidden } = this.runner.model.cfg;
    const cut = seq.req.images?.find((im) => Math.max(im.start, seq.prefilled) < end && im.start + im.rows.length / hidden > end);
    return cut ? Math.max(seq.prefilled, Math.min(end, cut.start)) : end;
  }

  /** The images whose tokens lie in the chunk from seq.prefilled to `end`: an image partly served by the prompt cache, its rest. */
  private chunkImages(seq: Sequence, end: number): ChunkImage[] {
    const { hidden } = this.runner.model.cfg;
    const from = seq.prefilled;
    return (seq.req.images ?? [])
      .filter((im) => im.start < end && im.start + im.rows.length / hidden > from)
      .map((im) => (im.start >= from ? { at: im.start - from, rows: im.rows } : { at: 0, rows: im.rows.subarray((from - im.start) * hidden) }));
  }

  /**
   * Returns a sequence's blocks: those with written KV go to the prompt cache, and become
   * its slot's cache; then whoever waits for the slot goes on.
   */
  private release(seq: Sequence): void {
    this.options.drafter?.release(seq);
    const table = seq.table.splice(0);
    if (!this.usesCache(seq)) {
      this.blocks.release(table);
      this.rings.finished(seq.slot, []);
      return this.slotStore.finished(seq.slot, []);
    }
    const history = this.cacheTokens(seq, seq.tokens.slice(0, seq.written));
    this.blocks.release(this.cache.donate(history, table, seq.borrowed));
    this.keepSnapshots(seq, history);
    this.rings.finished(seq.slot, history);
    this.slotStore.finished(seq.slot, history);
  }

  /**
   * Where a hybrid model's prompt is snapshotted: its last block boundary before its last
   * token, past what the cache served; 0 for none (a transformer, no prompt cache, a short
   * prompt, or a sequence past its prompt).
   */
  private snapshotBoundary(seq: Sequence): number {
    if (!this.states.any || !this.usesCache(seq) || seq.generated > 0 || seq.promptSnapshot !== undefined) return 0;
    const at = promptBoundary(seq.req.promptTokens.length, this.blocks.blockSize);
    return at > seq.cached ? at : 0;
  }

  /** Snapshots the state at the prompt's last block boundary, which its pass just reached (queued after it). */
  private snapshotPrompt(seq: Sequence): void {
    const snapshot = this.cache.takeSnapshot();
    if (snapshot === undefined) return;
    this.states.save(seq.slot, snapshot);
    seq.promptSnapshot = snapshot;
  }

  /**
   * Gives the prompt cache a finished hybrid sequence's snapshots, for the blocks it just
   * donated: the one at its prompt's last block boundary, and its state at the end of its
   * history (what a next turn extends), copied from its slot now.
   */
  private keepSnapshots(seq: Sequence, history: number[]): void {
    const keep = (tokens: number[], snapshot: number) => {
      if (!this.cache.attachSnapshot(tokens, snapshot)) this.cache.freeSnapshot(snapshot);
    };
    if (seq.promptSnapshot !== undefined) keep(history.slice(0, promptBoundary(seq.req.promptTokens.length, this.blocks.blockSize)), seq.promptSnapshot);
    seq.promptSnapshot = undefined;
    if (!this.states.any || seq.stated !== seq.written || seq.written <= seq.cached) return;
    const snapshot = this.cache.takeSnapshot();
    if (snapshot === undefined) return;
    this.states.save(seq.slot, snapshot);
    keep(history, snapshot);
  }

  /**
   * This step's sampler input. Every random draw comes from the request's own stream, in
   * a fixed order per step, so a seed reproduces the same tokens in any batch.
   */
  private draw(seq: Sequence, drafted: number[] = []): SampleInput {
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
      penalties: this.penalties(seq, drafted),
      topLogprobs: seq.req.logprobs,
      postSampling: seq.req.postSamplingProbs,
    };
  }

  /** A draft model's sampler input after `drafted`: its argmax under the request's penalties. */
  private draftSample(seq: Sequence, drafted: number[]): SampleInput {
    return { temperature: 0, topK: 0, topP: 1, minP: 0, pLess: false, xtcThreshold: 0, u: 0, penalties: this.penalties(seq, drafted) };
  }

  private penalties(seq: Sequence, drafted: number[]): SampleInput['penalties'] {
    const s = seq.req.sampling;
    return hasPenalties(s) ? penalties(readsHistory(s) ? [...seq.req.promptTokens, ...seq.output, ...drafted] : [], s) : undefined;
  }

  private reserve(seq: Sequence, tokens: number): void {
    // Blocks are sized for every slot's full context, and a unified pool admits a prompt
    // only when it has room, so this only fails on a bug.
    if (!this.blocks.ensure(seq.table, tokens)) throw new Error('KV cache exhausted');
  }
}

/**
 * Whether a queued sequence can take a slot now (`taken` are busy): a pinned one when its
 * slot is free; a further choice once its first choice has a slot (or has left), so that it
 * never holds a slot while the first waits for its own.
 */
function canStart(seq: Sequence, taken: Set<number>): boolean {
  if (seq.pinned !== undefined) return !taken.has(seq.pinned);
  return !seq.parent || seq.parent.slot >= 0 || seq.parent.closed;
}

/** The last block boundary before a prompt's last token: the furthest a later request with this prompt can resume from. */
function promptBoundary(promptTokens: number, blockSize: number): number {
  return Math.floor((promptTokens - 1) / blockSize) * blockSize;
}

/** Whether a choice waiting for `parent` can still fork from it: its prompt is not yet all scheduled. */
function awaitsFork(parent: Sequence): boolean {
  return !parent.closed && parent.generated === 0 && parent.prefilled < parent.tokens.length;
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
