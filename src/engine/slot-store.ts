// The slots' caches (POST /slots/:id?action=save|restore|erase). A slot's cache is what the
// prompt cache holds of the last request the slot served: its tokens are remembered here,
// its KV lives in the shared pool, and the last window of it in the slot's rings where
// ring layers keep only their window (./kv-rings.ts). Save reads that KV back from the GPU
// into a slot file; restore writes a file's KV into fresh blocks and gives them to the
// prompt cache, and its ring layers' positions into the slot's rings; erase drops the
// slot's entries. A hybrid model's file also holds the recurrent state after its
// tokens: save keeps the slot's tokens up to the furthest cached snapshot of that state and
// writes the snapshot, restore gives the file's state to the cache as the snapshot of its
// last block. An action on a busy slot waits for its request to end.
import { readFile, writeFile } from 'node:fs/promises';
import type { SlotFileResult } from './engine.js';
import type { BlockAllocator, KvRows } from './kv-cache.js';
import type { KvRings } from './kv-rings.js';
import type { PromptCache } from './prompt-cache.js';
import type { RecurrentStates } from './recurrent-state.js';
import type { KvTypes } from '../models/model.js';
import { decodeSlotFile, encodeSlotFile, SlotFileError, type SlotLayout } from './slot-file.js';

export interface SlotStoreOptions {
  slots: number;
  /** What a slot file must match: the model and its KV layout. */
  layout: SlotLayout;
  /** The cache's KV types: what a file is written in, and what a file read is converted to. */
  types: KvTypes;
  /** A sequence's longest context: a longer file is refused. */
  contextSize: number;
  blockBytes: number;
  capacityBytes: number;
  /** Whether a request runs in the slot now. */
  busy: (slot: number) => boolean;
}

export class SlotStore {
  /** Per slot: the positions whose KV its last finished request wrote. */
  private readonly tokens: number[][];
  /** Per slot: actions waiting for the request it runs to end. */
  private readonly waiting = new Map<number, Array<() => void>>();

  constructor(
    private readonly cache: PromptCache,
    private readonly blocks: BlockAllocator,
    private readonly rows: KvRows,
    private readonly states: RecurrentStates,
    private readonly rings: KvRings,
    private readonly options: SlotStoreOptions,
  ) {
    this.tokens = Array.from({ length: options.slots }, () => []);
  }

  /** A request in `slot` ended, its KV written for `tokens` (empty: it left nothing cached). */
  finished(slot: number, tokens: number[]): void {
    this.tokens[slot] = tokens;
    const waiting = this.waiting.get(slot);
    this.waiting.delete(slot);
    for (const resolve of waiting ?? []) resolve();
  }

  async save(slot: number, path: string): Promise<SlotFileResult> {
    await this.idle(slot);
    const held = this.cache.hold(this.tokens[slot]);
    try {
      const tokens = this.tokens[slot].slice(0, held.tokens);
      const ringTokens = this.rings.kept(slot, held.tokens);
      // The reads are queued before any waits: a request that takes the slot meanwhile writes its rings and state after them.
      const [paged, ring, state] = await Promise.all([
        this.rows.read(held.blocks, held.tokens),
        this.rings.read(slot, held.tokens, ringTokens),
        held.state !== undefined ? this.states.read(held.state) : new Uint8Array(this.options.layout.state_bytes),
      ]);
      const { k, v } = this.options.types;
      const data = encodeSlotFile({ ...this.options.layout, k_dtype: k, v_dtype: v, tokens: tokens.length, ring_tokens: ringTokens }, tokens, paged, ring, state);
      await writeFile(path, data);
      return { tokens: tokens.length, bytes: data.length };
    } finally {
      this.cache.release(held.blocks);
    }
  }

  async restore(slot: number, path: string): Promise<SlotFileResult> {
    const data = await readFile(path);
    const { tokens, paged, ring, ringTokens, state } = decodeSlotFile(data, this.options.layout, this.options.types, this.rings.window);
    if (!this.cache.enabled) throw new SlotFileError('the prompt cache is off (--no-cache-prompt): a restored slot has nowhere to live');
    if (tokens.length > this.options.contextSize) throw new SlotFileError(`the slot file holds ${tokens.length} tokens, more than the context of ${this.options.contextSize}`);
    if (Math.ceil(tokens.length / this.blocks.blockSize) * this.options.blockBytes > this.options.capacityBytes) {
      throw new SlotFileError(`the slot file's ${tokens.length} tokens exceed the prompt cache's capacity`);
    }
    await this.idle(slot);
    const table: number[] = [];
    if (!this.blocks.ensure(table, tokens.length)) {
      this.blocks.release(table);
      throw new SlotFileError('no free KV space for the slot file');
    }
    this.rows.write(table, tokens.length, paged);
    this.blocks.release(this.cache.donate(tokens, table, 0));
    const snapshot = state.length > 0 && tokens.length > 0 ? this.cache.takeSnapshot() : undefined;
    if (snapshot !== undefined) {
      this.states.write(snapshot, state);
      if (!this.cache.attachSnapshot(tokens, snapshot)) this.cache.freeSnapshot(snapshot);
    }
    this.tokens[slot] = tokens;
    // A request admitted to the slot as it went idle owns its rings now.
    if (ringTokens > 0 && !this.options.busy(slot)) this.rings.write(slot, tokens, ringTokens, ring);
    return { tokens: tokens.length, bytes: data.length };
  }

  /** Drops the slot's cache; returns the tokens it held. */
  async erase(slot: number): Promise<number> {
    await this.idle(slot);
    const erased = this.cache.drop(this.tokens[slot]);
    this.tokens[slot] = [];
    return erased;
  }

  /** Resolves once no request runs in `slot` (at once when none does). */
  private idle(slot: number): Promise<void> {
    if (!this.options.busy(slot)) return Promise.resolve();
    return new Promise((resolve) => {
      const waiting = this.waiting.get(slot) ?? [];
      waiting.push(resolve);
      this.waiting.set(slot, waiting);
    });
  }
}
