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
// A hybrid model's recurrent state cannot be cut back to a shorter prefix, so for it a
// block is only a place to resume from when it carries a snapshot of that state after its
// last token (./recurrent-state.ts): a borrow stops at the furthest such block of the
// prompt's cached chain (a partly matching block only when the prompt holds all of its
// tokens). Snapshots live in a fixed pool; the cache's bytes are its blocks' plus its
// snapshots', and the blocks get the capacity the pool leaves. A snapshot goes with its
// block, or alone (the least recently used one) when a new one needs its place.
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
  /** Recurrent state snapshots the cache keeps (a hybrid model's; 0 for a transformer). */
  snapshots: number;
  /** Bytes of one snapshot (0 for a transformer: every block is a place to resume from). */
  snapshotBytes: number;
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
  /** The recurrent state snapshot after this block's last token, if one is kept. */
  snapshot?: number;
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
  /** A hybrid model's only: the recurrent state snapshots held, whose bytes are part of `bytes`. */
  state_snapshots?: number;
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
  /** The recurrent state snapshot after the borrowed tokens, to start from (a hybrid model's). */
  state?: number;
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
  /** Snapshot slots nobody holds. */
  private readonly freeSnapshots: number[];

  constructor(
    readonly options: PromptCacheOptions,
    /** Gives an evicted block back to the KV pool. */
    private readonly freeBlock: (block: number) => void,
    private readonly now: () => number = Date.now,
  ) {
    this.freeSnapshots = Array.from({ length: options.snapshots }, (_, i) => i);
  }

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
    const { whole, partial, shared, state } = this.resumable(this.match(prompt, prompt.length - 1));
    if (whole.length > 0 || partial) this.hits++;
    return { blocks: whole.map((e) => e.block), ...(partial ? { partial: { block: partial.block, tokens: shared } } : {}), ...(state !== undefined ? { state } : {}) };
  }

  /**
   * Holds the blocks that cache the longest prefix of `tokens` (a slot's history, to be
   * read back): their ids in position order and the tokens they cover. Not a lookup in the
   * statistics; for a hybrid model, up to the furthest snapshot (`state`). The caller
   * returns the blocks with `release`.
   */
  hold(tokens: number[]): { blocks: number[]; tokens: number; state?: number } {
    this.expire();
    const { whole, partial, shared, state } = this.resumable(this.match(tokens, tokens.length));
    return { blocks: [...whole, ...(partial ? [partial] : [])].map((e) => e.block), tokens: whole.length * this.options.blockSize + shared, ...(state !== undefined ? { state } : {}) };
  }

  /**
   * A matched chain cut back to where a hybrid model can resume: its furthest block with a
   * snapshot (a partial block only when all its tokens match), the references past it
   * dropped; the whole match for a transformer.
   */
  private resumable(m: Match): Match & { state?: number } {
    if (this.options.snapshotBytes === 0) return m;
    const { whole, partial, shared } = m;
    if (partial?.snapshot !== undefined && shared === partial.tokens.length) return { ...m, state: partial.snapshot };
    let end = whole.length;
    while (end > 0 && whole[end - 1]!.snapshot === undefined) end--;
    for (const e of [...whole.slice(end), ...(partial ? [partial] : [])]) e.refs--;
    const kept = whole.slice(0, end);
    return { whole: kept, shared: 0, ...(end > 0 ? { state: kept[end - 1]!.snapshot } : {}) };
  }

  /** A free snapshot slot, taking the least recently used block's snapshot when none is free; undefined if the cache keeps none. */
  takeSnapshot(): number | undefined {
    const free = this.freeSnapshots.pop();
    if (free !== undefined) return free;
    for (const e of this.entries.values()) {
      if (e.snapshot === undefined) continue;
      const taken = e.snapshot;
      e.snapshot = undefined;
      return taken;
    }
    return undefined;
  }

  /** Gives back a snapshot slot that `takeSnapshot` handed out and no block took. */
  freeSnapshot(snapshot: number): void {
    this.freeSnapshots.push(snapshot);
  }

  /**
   * Gives snapshot `snapshot` (the state after `tokens`) to the cached block that ends the
   * prefix `tokens`; false, and the caller keeps it, when that block is not cached or
   * already has one.
   */
  attachSnapshot(tokens: number[], snapshot: number): boolean {
    const bs = this.options.blockSize;
    const blocks = Math.ceil(tokens.length / bs);
    if (blocks === 0) return false;
    const e = this.entries.get(this.keys(tokens, blocks)[blocks - 1]!);
    if (!e || e.snapshot !== undefined || e.tokens.length !== tokens.length - (blocks - 1) * bs) return false;
    e.snapshot = snapshot;
    return true;
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
  private match(tokens: number[], usable: number): Match {
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
    if (fresh * this.options.blockBytes > this.blockCapacity()) {
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
      bytes: n * this.options.blockBytes + this.snapshotsHeld() * this.options.snapshotBytes,
      capacity_bytes: this.options.enabled ? this.options.capacityBytes : 0,
      max_entries: this.options.enabled ? this.options.maxEntries : 0,
      hits: this.hits,
      lookups: this.lookups,
      hit_rate: this.lookups ? this.hits / this.lookups : 0,
      inserts: this.inserts,
      evictions_lru: this.evictionsLru,
      evictions_ttl: this.evictionsTtl,
      rejections_oversized: this.rejectionsOversized,
      ...(this.options.snapshotBytes > 0 ? { state_snapshots: this.snapshotsHeld() } : {}),
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
    if (e.snapshot !== undefined) this.freeSnapshots.push(e.snapshot);
    e.snapshot = undefined;
    this.entries.delete(e.key);
    this.byBlock.delete(e.block);
    const siblings = this.children.get(e.parent)!;
    siblings.delete(e);
    if (siblings.size === 0) this.children.delete(e.parent);
    return e.block;
  }

  /** The bytes the blocks may take: the capacity less the snapshot pool's. */
  private blockCapacity(): number {
    return this.options.capacityBytes - this.options.snapshots * this.options.snapshotBytes;
  }

  private snapshotsHeld(): number {
    let n = 0;
    for (const e of this.entries.values()) if (e.snapshot !== undefined) n++;
    return n;
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
    const maxBlocks = cacheBlockBound({ ...this.options, capacityBytes: this.blockCapacity() });
    for (const e of [...this.entries.values()]) {
      if (this.entries.size <= maxBlocks) break;
      if (e.refs > 0) continue;
      this.evictionsLru++;
      this.freeBlock(this.remove(e));
    }
  }
}

/** A prompt's cached chain: whole blocks, then the block after them sharing the most (`shared`) of the next tokens. */
interface Match {
  whole: Entry[];
  partial?: Entry;
  shared: number;
}

/** How many leading tokens `a` and `b` share. */
function commonPrefix(a: number[], b: number[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}
