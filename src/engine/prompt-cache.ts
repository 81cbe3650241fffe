// Prefix cache over the paged KV cache. A prompt is cut into blocks of the KV block size;
// each block's key is SHA-256 over the previous block's key, the model identity and this
// block's tokens, so a key names a whole prefix and equal prefixes share blocks across
// requests and slots. Finished sequences donate their full blocks; a new request borrows
// the longest cached prefix (reference-counted while in use) and prefills only the rest.
// Unreferenced blocks are evicted LRU when the pool needs them, past their TTL, or over
// the capacity and entry bounds.
import { createHash } from 'node:crypto';

export interface PromptCacheOptions {
  enabled: boolean;
  blockSize: number;
  /** Bytes of KV one block holds across all layers. */
  blockBytes: number;
  capacityBytes: number;
  maxEntries: number;
  /** 0 = no TTL. */
  ttlMs: number;
  /** Distinguishes models: part of every key. */
  modelIdentity: string;
}

interface Entry {
  key: string;
  block: number;
  refs: number;
  lastUsed: number;
}

export interface PromptCacheStats {
  enabled: boolean;
  apc_enabled: boolean;
  block_size: number;
  hash: string;
  entries: number;
  bytes: number;
  capacity_bytes: number;
  max_entries: number;
  hits: number;
  lookups: number;
  hit_rate: number;
  inserts: number;
  evictions_lru: number;
  evictions_ttl: number;
  rejections_oversized: number;
  total_blocks_stored: number;
  unique_block_hashes: number;
  apc_active_entries: number;
}

export interface Borrowed {
  /** Cached blocks covering the prompt's first blocks.length * blockSize tokens. */
  blocks: number[];
}

export class PromptCache {
  /** Insertion order doubles as LRU order: a use moves the entry to the end. */
  private readonly entries = new Map<string, Entry>();
  private readonly byBlock = new Map<number, Entry>();
  private hits = 0;
  private lookups = 0;
  private inserts = 0;
  private evictionsLru = 0;
  private evictionsTtl = 0;
  private rejectionsOversized = 0;

  constructor(
    readonly options: PromptCacheOptions,
    /** Gives an evicted block back to the KV pool. */
    private readonly freeBlock: (block: number) => void,
    private readonly now: () => number = Date.now,
  ) {}

  get enabled(): boolean {
    return this.options.enabled;
  }

  /** Chained keys of the full blocks of `tokens`. */
  keys(tokens: number[], blocks: number): string[] {
    const out: string[] = [];
    let prev = this.options.modelIdentity;
    for (let b = 0; b < blocks; b++) {
      const h = createHash('sha256');
      h.update(prev);
      h.update(new Uint8Array(Uint32Array.from(tokens.slice(b * this.options.blockSize, (b + 1) * this.options.blockSize)).buffer));
      prev = h.digest('hex');
      out.push(prev);
    }
    return out;
  }

  /**
   * Borrows the longest cached prefix of `prompt`, leaving at least one token to prefill
   * (its logits are needed). The caller returns the blocks with `release`.
   */
  borrow(prompt: number[]): Borrowed {
    this.expire();
    this.lookups++;
    const usable = Math.floor((prompt.length - 1) / this.options.blockSize);
    const found: Entry[] = [];
    for (const key of this.keys(prompt, usable)) {
      const e = this.entries.get(key);
      if (!e) break;
      e.refs++;
      found.push(e);
    }
    this.touchChain(found);
    if (found.length > 0) this.hits++;
    return { blocks: found.map((e) => e.block) };
  }

  /** Drops a borrower's references; the blocks stay cached. */
  release(blocks: number[]): void {
    for (const block of blocks) {
      const e = this.byBlock.get(block);
      if (e && e.refs > 0) e.refs--;
    }
  }

  /**
   * Offers a finished sequence's blocks: `tokens` are the positions whose KV is written,
   * `table` their blocks (the first `borrowed` of them borrowed from this cache). Returns
   * the blocks the caller still owns and must free: tails, duplicates, rejections.
   */
  donate(tokens: number[], table: number[], borrowed: number): number[] {
    this.release(table.slice(0, borrowed));
    const owned = table.slice(borrowed);
    const full = Math.min(table.length, Math.floor(tokens.length / this.options.blockSize));
    const fresh = full - borrowed;
    if (fresh <= 0) return owned;
    if (fresh * this.options.blockBytes > this.options.capacityBytes) {
      this.rejectionsOversized++;
      return owned;
    }
    const keys = this.keys(tokens, full);
    const giveBack: number[] = [];
    for (let b = borrowed; b < table.length; b++) {
      const block = table[b];
      if (b >= full || this.entries.has(keys[b])) {
        giveBack.push(block);
        continue;
      }
      const e: Entry = { key: keys[b], block, refs: 0, lastUsed: this.now() };
      this.entries.set(e.key, e);
      this.byBlock.set(block, e);
      this.inserts++;
    }
    this.touchChain(keys.map((k) => this.entries.get(k)!));
    this.shrink();
    return giveBack;
  }

  /** Frees the least recently used unreferenced block for the pool; undefined if none. */
  evictForPool(): number | undefined {
    for (const e of this.entries.values()) {
      if (e.refs === 0) {
        this.evictionsLru++;
        return this.remove(e);
      }
    }
    return undefined;
  }

  /** Drops every unreferenced entry; returns the snapshot of what was freed. */
  reset(): PromptCacheStats {
    const freed = [...this.entries.values()].filter((e) => e.refs === 0);
    for (const e of freed) this.freeBlock(this.remove(e));
    return { ...this.stats(), entries: freed.length, bytes: freed.length * this.options.blockBytes, total_blocks_stored: freed.length, unique_block_hashes: freed.length };
  }

  stats(): PromptCacheStats {
    this.expire();
    const n = this.entries.size;
    return {
      enabled: this.options.enabled,
      apc_enabled: false,
      block_size: this.options.blockSize,
      hash: 'sha256',
      entries: n,
      bytes: n * this.options.blockBytes,
      capacity_bytes: this.options.enabled ? this.options.capacityBytes : 0,
      max_entries: this.options.enabled ? this.options.maxEntries : 0,
      hits: this.hits,
      lookups: this.lookups,
      hit_rate: this.lookups ? this.hits / this.lookups : 0,
      inserts: this.inserts,
      evictions_lru: this.evictionsLru,
      evictions_ttl: this.evictionsTtl,
      rejections_oversized: this.rejectionsOversized,
      total_blocks_stored: n,
      unique_block_hashes: n,
      apc_active_entries: 0,
    };
  }

  /**
   * Marks a prefix chain used, its first block most recently: LRU then evicts a prompt's
   * tail before its head, and a surviving head is still reachable (lookup walks from the
   * first block).
   */
  private touchChain(chain: Entry[]): void {
    const now = this.now();
    for (let i = chain.length - 1; i >= 0; i--) {
      const e = chain[i];
      e.lastUsed = now;
      this.entries.delete(e.key);
      this.entries.set(e.key, e);
    }
  }

  private remove(e: Entry): number {
    this.entries.delete(e.key);
    this.byBlock.delete(e.block);
    return e.block;
  }

  private expire(): void {
    if (this.options.ttlMs <= 0) return;
    const cutoff = this.now() - this.options.ttlMs;
    for (const e of [...this.entries.values()]) {
      if (e.refs === 0 && e.lastUsed < cutoff) {
        this.evictionsTtl++;
        this.freeBlock(this.remove(e));
      }
    }
  }

  /** Enforces the byte and entry bounds by LRU eviction of unreferenced blocks. */
  private shrink(): void {
    const maxBlocks = Math.min(this.options.maxEntries, Math.floor(this.options.capacityBytes / this.options.blockBytes));
    for (const e of [...this.entries.values()]) {
      if (this.entries.size <= maxBlocks) break;
      if (e.refs > 0) continue;
      this.evictionsLru++;
      this.freeBlock(this.remove(e));
    }
  }
}
