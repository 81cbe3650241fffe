// Prefix cache over the paged KV cache. A prompt is cut into blocks of the KV block size;
// each block's key is SHA-256 over the previous block's key, the model identity and this
// block's tokens, so a key names a whole prefix and equal prefixes share blocks across
// requests and slots. Finished sequences donate their blocks, the last one even when
// partly written; a new request borrows the longest cached run of whole blocks
// (reference-counted while in use), then the cached block after that run which shares
// the most leading tokens with the prompt's next ones: the scheduler copies that block's
// shared rows into a block of its own (copy-on-write), so reuse is exact to the token.
// Unreferenced blocks are evicted LRU when the pool needs them, past their TTL, or over
// the capacity and entry bounds. The cache holds one reference to each of its blocks in the
// block allocator (./kv-cache.ts): a block a fork still shares outlives its eviction.
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
  /** The key of the prefix this block follows (the model identity for a first block). */
  parent: string;
  /** The block's tokens: blockSize of them, or fewer for a partly written last block. */
  tokens: number[];
  block: number;
  refs: number;
  lastUsed: number;
}

/**
 * The most blocks a cache may keep: its entry bound, and its byte capacity's worth of blocks
 * (a model whose every layer keeps a ring has blocks of no bytes: the entry bound alone).
 */
export function cacheBlockBound(o: Pick<PromptCacheOptions, 'maxEntries' | 'capacityBytes' | 'blockBytes'>): number {
  return o.blockBytes > 0 ? Math.min(o.maxEntries, Math.floor(o.capacityBytes / o.blockBytes)) : o.maxEntries;
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

/** The disabled snapshot: the engine's block size and hash, every bound and counter 0. */
export function disabledCacheStats(blockSize: number): PromptCacheStats {
  return {
    enabled: false,
    apc_enabled: false,
    block_size: blockSize,
    hash: 'sha256',
    entries: 0,
    bytes: 0,
    capacity_bytes: 0,
    max_entries: 0,
    hits: 0,
    lookups: 0,
    hit_rate: 0,
    inserts: 0,
    evictions_lru: 0,
    evictions_ttl: 0,
    rejections_oversized: 0,
    total_blocks_stored: 0,
    unique_block_hashes: 0,
    apc_active_entries: 0,
  };
}

export interface Borrowed {
  /** Cached whole blocks covering the prompt's first blocks.length * blockSize tokens. */
  blocks: number[];
  /**
   * The cached block whose first `tokens` rows hold the prompt's next tokens: the caller
   * copies those rows into a block of its own, then gives this one back with `release`.
   */
  partial?: { block: number; tokens: number };
}

export class PromptCache {
  /** Insertion order doubles as LRU order: a use moves the entry to the end. */
  private readonly entries = new Map<string, Entry>();
  private readonly byBlock = new Map<number, Entry>();
  /** Entries by the key of the prefix they follow: where a partial match looks. */
  private readonly children = new Map<string, Set<Entry>>();
  /** Blocks a reset dropped while requests held them, with their holders: freed at the last release. */
  private readonly detached = new Map<number, number>();
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

  /** Chained keys of the first `blocks` blocks of `tokens` (the last one may be partial). */
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
   * (its logits are needed): whole blocks, then the best partial match after them. The
   * caller returns every block it got with `release` (or `donate`).
   */
  borrow(prompt: number[]): Borrowed {
    this.expire();
    this.lookups++;
    const { whole, partial, shared } = this.match(prompt, prompt.length - 1);
    if (whole.length > 0 || partial) this.hits++;
    return { blocks: whole.map((e) => e.block), ...(partial ? { partial: { block: partial.block, tokens: shared } } : {}) };
  }

  /**
   * Holds the blocks that cache the longest prefix of `tokens` (a slot's history, to be
   * read back): their ids in position order and the tokens they cover. Not a lookup in the
   * statistics. The caller returns the blocks with `release`.
   */
  hold(tokens: number[]): { blocks: number[]; tokens: number } {
    this.expire();
    const { whole, partial, shared } = this.match(tokens, tokens.length);
    return { blocks: [...whole, ...(partial ? [partial] : [])].map((e) => e.block), tokens: whole.length * this.options.blockSize + shared };
  }

  /**
   * Drops the entries that cache the longest prefix of `tokens` (erasing a slot), as reset
   * drops everything; returns the tokens they covered.
   */
  drop(tokens: number[]): number {
    const { whole, partial, shared } = this.match(tokens, tokens.length);
    const chain = partial ? [...whole, partial] : whole;
    for (const e of chain) e.refs--;
    this.clear(chain);
    return whole.length * this.options.blockSize + shared;
  }

  /**
   * The cached whole blocks of the first `usable` tokens, then the child of the last one
   * that shares the most (`shared`) of the next tokens, each referenced once more.
   */
  private match(tokens: number[], usable: number): { whole: Entry[]; partial?: Entry; shared: number } {
    const bs = this.options.blockSize;
    const whole: Entry[] = [];
    let parent = this.options.modelIdentity;
    for (const key of this.keys(tokens, Math.floor(usable / bs))) {
      const e = this.entries.get(key);
      if (!e) break;
      e.refs++;
      whole.push(e);
      parent = key;
    }
    const start = whole.length * bs;
    const next = tokens.slice(start, Math.min(usable, start + bs));
    let partial: Entry | undefined;
    let shared = 0;
    for (const e of this.children.get(parent) ?? []) {
      const n = commonPrefix(e.tokens, next);
      if (n > shared) [partial, shared] = [e, n];
    }
    if (partial) partial.refs++;
    this.touchChain(partial ? [...whole, partial] : whole);
    return { whole, partial, shared };
  }

  /** Drops a borrower's references; the blocks stay cached (a block a reset dropped is freed by its last holder). */
  release(blocks: number[]): void {
    for (const block of blocks) {
      const e = this.byBlock.get(block);
      if (e) {
        if (e.refs > 0) e.refs--;
        continue;
      }
      const holders = this.detached.get(block);
      if (holders === undefined) continue;
      if (holders > 1) this.detached.set(block, holders - 1);
      else {
        this.detached.delete(block);
        this.freeBlock(block);
      }
    }
  }

  /**
   * Offers a finished sequence's blocks: `tokens` are the positions whose KV is written,
   * `table` their blocks (the first `borrowed` of them borrowed from this cache). Returns
   * the blocks the caller still owns and must free: unwritten, duplicates, rejections.
   */
  donate(tokens: number[], table: number[], borrowed: number): number[] {
    this.release(table.slice(0, borrowed));
    const owned = table.slice(borrowed);
    const bs = this.options.blockSize;
    const written = Math.min(table.length, Math.ceil(tokens.length / bs));
    const fresh = written - borrowed;
    if (fresh <= 0) return owned;
    if (fresh * this.options.blockBytes > this.options.capacityBytes) {
      this.rejectionsOversized++;
      return owned;
    }
    const keys = this.keys(tokens, written);
    const giveBack: number[] = [];
    for (let b = borrowed; b < table.length; b++) {
      const inserted = b < written && this.insert(keys[b], b === 0 ? this.options.modelIdentity : keys[b - 1], tokens.slice(b * bs, (b + 1) * bs), table[b]);
      if (!inserted) giveBack.push(table[b]);
    }
    this.touchChain(this.chain(keys));
    this.shrink();
    return giveBack;
  }

  /**
   * Moves cached blocks to other block ids (their KV copied there by the caller), when no
   * request holds any of them; false, and nothing moved, otherwise.
   */
  move(moves: ReadonlyMap<number, number>): boolean {
    const moved = [...moves.keys()].map((block) => this.byBlock.get(block));
    if (moved.some((e) => e === undefined || e.refs > 0)) return false;
    for (const e of moved as Entry[]) this.byBlock.delete(e.block);
    for (const e of moved as Entry[]) {
      e.block = moves.get(e.block)!;
      this.byBlock.set(e.block, e);
    }
    return true;
  }

  /** Blocks evictForPool could give the pool now: unborrowed ones that nobody else holds (`sole`). */
  reclaimable(sole: (block: number) => boolean): number {
    let n = 0;
    for (const e of this.entries.values()) if (e.refs === 0 && sole(e.block)) n++;
    return n;
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

  /**
   * Drops every entry and returns the snapshot of the cache taken just before: its
   * contents are what was cleared, its counters are the running totals at that moment
   * (a reset does not count as eviction, nor zero the counters). Blocks that running
   * requests hold are no longer found by lookups and return to the pool when released.
   */
  reset(): PromptCacheStats {
    const before = this.stats();
    this.clear([...this.entries.values()]);
    return before;
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
   * Adds one block under its prefix; false when it adds nothing: its key is cached, its
   * prefix is not (nothing could reach it), or it is a partial block whose tokens lead a
   * cached sibling's.
   */
  private insert(key: string, parent: string, tokens: number[], block: number): boolean {
    if (this.entries.has(key)) return false;
    if (parent !== this.options.modelIdentity && !this.entries.has(parent)) return false;
    const siblings = this.children.get(parent);
    if (tokens.length < this.options.blockSize && [...(siblings ?? [])].some((s) => commonPrefix(s.tokens, tokens) === tokens.length)) return false;
    const e: Entry = { key, parent, tokens, block, refs: 0, lastUsed: this.now() };
    this.entries.set(key, e);
    this.byBlock.set(block, e);
    if (siblings) siblings.add(e);
    else this.children.set(parent, new Set([e]));
    this.inserts++;
    return true;
  }

  /** Removes entries; a block a request holds is freed at its last release. */
  private clear(entries: Entry[]): void {
    for (const e of entries) {
      this.remove(e);
      if (e.refs > 0) this.detached.set(e.block, e.refs);
      else this.freeBlock(e.block);
    }
  }

  /** The cached entries of `keys` up to the first missing one. */
  private chain(keys: string[]): Entry[] {
    const out: Entry[] = [];
    for (const key of keys) {
      const e = this.entries.get(key);
      if (!e) break;
      out.push(e);
    }
    return out;
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
    const siblings = this.children.get(e.parent)!;
    siblings.delete(e);
    if (siblings.size === 0) this.children.delete(e.parent);
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
    const maxBlocks = cacheBlockBound(this.options);
    for (const e of [...this.entries.values()]) {
      if (this.entries.size <= maxBlocks) break;
      if (e.refs > 0) continue;
      this.evictionsLru++;
      this.freeBlock(this.remove(e));
    }
  }
}

/** How many leading tokens `a` and `b` share. */
function commonPrefix(a: number[], b: number[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}
