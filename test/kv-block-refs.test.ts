// The KV pool's reference counts under the prompt cache (src/engine/kv-cache.ts,
// src/engine/prompt-cache.ts), as the scheduler wires them: the cache holds one reference
// to each block it keeps, a forked choice one to each prompt block it shares, and a block
// returns to the pool only when its last holder lets go, whether the cache evicts it for
// the pool, drops it in a reset, or a borrower gives it back. And a pool that grows: it
// doubles before the cache evicts, refuses past its maximum, and halves back while what
// is held fits, the cache's blocks moved below the new size. And a hybrid model's state
// snapshots: a borrow resumes only where a block carries one, a new snapshot takes the least
// recently used one's place, and a dropped block gives its snapshot back.
import { describe, expect, it } from 'vitest';
import { BlockAllocator } from '../src/engine/kv-cache.js';
import { PromptCache } from '../src/engine/prompt-cache.js';

const BLOCK = 2;

function pool(blocks: number) {
  const alloc = new BlockAllocator(blocks, BLOCK);
  const cache = new PromptCache(
    { enabled: true, blockSize: BLOCK, blockBytes: 1, capacityBytes: 1 << 20, maxEntries: 1 << 20, ttlMs: 0, modelIdentity: 'model', snapshots: 0, snapshotBytes: 0 },
    (block) => alloc.release([block]),
  );
  alloc.reclaim = () => cache.evictForPool();
  const reclaimable = () => cache.reclaimable((block) => !alloc.isShared(block));
  return { alloc, cache, reclaimable };
}

/** A first choice that prefilled `tokens` and a fork sharing its full blocks. */
function parentAndFork(alloc: BlockAllocator, tokens: number[]) {
  const parent: number[] = [];
  expect(alloc.ensure(parent, tokens.length)).toBe(true);
  alloc.share(parent);
  return { parent, fork: [...parent] };
}

describe('KV block references', () => {
  const prompt = [1, 2, 3, 4];

  it('a block the cache evicts for the pool stays with the fork that shares it', () => {
    const { alloc, cache, reclaimable } = pool(4);
    const { parent, fork } = parentAndFork(alloc, prompt);
    // The first choice ends: the cache takes its blocks over.
    alloc.release(cache.donate(prompt, parent, 0));
    expect(cache.stats().entries).toBe(2);
    // Unborrowed, but the fork holds them: nothing the pool could get back.
    expect(reclaimable()).toBe(0);
    const other: number[] = [];
    expect(alloc.ensure(other, 4 * BLOCK)).toBe(false);
    // The free blocks only; the fork's were evicted from the cache but not handed out.
    expect(other.sort()).toEqual([2, 3]);
    expect(cache.stats().entries).toBe(0);
    alloc.release(other);
    // The fork ends and donates the prompt again; its last reference goes to the cache.
    alloc.release(cache.donate(prompt, fork, 0));
    expect(cache.stats().entries).toBe(2);
    expect(reclaimable()).toBe(2);
    const all: number[] = [];
    expect(alloc.ensure(all, 4 * BLOCK)).toBe(true);
    expect(all.sort()).toEqual([0, 1, 2, 3]);
  });

  it('a reset frees the blocks nobody else holds and leaves the shared ones to their holders', () => {
    const { alloc, cache } = pool(4);
    const { parent, fork } = parentAndFork(alloc, prompt);
    alloc.release(cache.donate(prompt, parent, 0));
    // A later request borrows the cached prompt's first block.
    const borrowed = cache.borrow([1, 2, 9]);
    expect(borrowed.blocks).toEqual([fork[0]]);
    cache.reset();
    expect(alloc.available).toBe(2);
    // The fork lets go: block 1 is free; block 0 still has the borrower.
    alloc.release(fork);
    expect(alloc.available).toBe(3);
    cache.release(borrowed.blocks);
    expect(alloc.available).toBe(4);
  });

  it('a fork that donates first leaves the first choice its blocks until it ends', () => {
    const { alloc, cache } = pool(4);
    const { parent, fork } = parentAndFork(alloc, prompt);
    alloc.release(cache.donate(prompt, fork, 0));
    expect(cache.stats().entries).toBe(2);
    // The duplicates the first choice brings are its own references, given back.
    expect(cache.donate(prompt, parent, 0)).toEqual(parent);
    alloc.release(parent);
    // The cache now holds the only references.
    expect(alloc.available).toBe(2);
    cache.reset();
    expect(alloc.available).toBe(4);
  });
});

describe('a growing KV pool', () => {
  /** A pool of at most 16 blocks that starts at 2, recording each resize. */
  function growing() {
    const sizes: number[] = [];
    const alloc = new BlockAllocator(2, BLOCK, { initial: 2, max: 16, resize: (blocks) => sizes.push(blocks) });
    const cache = new PromptCache(
      { enabled: true, blockSize: BLOCK, blockBytes: 1, capacityBytes: 1 << 20, maxEntries: 1 << 20, ttlMs: 0, modelIdentity: 'model', snapshots: 0, snapshotBytes: 0 },
      (block) => alloc.release([block]),
    );
    alloc.reclaim = () => cache.evictForPool();
    return { alloc, cache, sizes };
  }

  it('doubles before the cache evicts, counts the growth as available, and refuses past its maximum', () => {
    const { alloc, cache, sizes } = growing();
    expect(alloc.available).toBe(16);
    const first: number[] = [];
    expect(alloc.ensure(first, 6)).toBe(true); // 3 blocks: 2 -> 4
    expect(sizes).toEqual([4]);
    alloc.release(cache.donate([1, 2, 3, 4, 5, 6], first, 0));
    const second: number[] = [];
    expect(alloc.ensure(second, 12)).toBe(true); // 6 more: 4 -> 8 -> 16, nothing evicted
    expect(sizes).toEqual([4, 8, 16]);
    expect(cache.stats()).toMatchObject({ entries: 3, evictions_lru: 0 });
    expect(alloc.available).toBe(16 - 9);
    // At the maximum the cache gives its blocks up; past them the pool refuses.
    const third: number[] = [];
    expect(alloc.ensure(third, 2 * 10)).toBe(true);
    expect(cache.stats().entries).toBe(0);
    expect(alloc.ensure(third, 2 * 11)).toBe(false);
  });

  it('halves back while the held blocks fit, moving the high ones down, or not at all when a move is refused', () => {
    const { alloc, cache, sizes } = growing();
    const low: number[] = [];
    const high: number[] = [];
    expect(alloc.ensure(low, 8)).toBe(true); // blocks 0-3
    expect(alloc.ensure(high, 6)).toBe(true); // blocks 4-6, pool at 8
    expect(high).toEqual([4, 5, 6]);
    alloc.release(low);
    alloc.release(cache.donate([7, 8, 9, 10, 11, 12], high, 0));
    // A move refused (a request holds the blocks): nothing changes.
    expect(alloc.shrink(() => false)).toBe(0);
    expect(alloc.capacity).toBe(8);
    let moved: ReadonlyMap<number, number> | undefined;
    expect(alloc.shrink((moves) => {
      moved = moves;
      return cache.move(moves);
    })).toBe(4);
    expect(sizes.at(-1)).toBe(4);
    expect([...moved!.keys()]).toEqual([4, 5, 6]);
    expect([...moved!.values()].every((b) => b < 4)).toBe(true);
    // The cache serves the prompt from the blocks it was moved to, and the pool grows again.
    expect(cache.borrow([7, 8, 9, 10, 11, 12, 13]).blocks).toEqual([...moved!.values()]);
    const next: number[] = [];
    expect(alloc.ensure(next, 4)).toBe(true);
    expect(alloc.capacity).toBe(8);
  });
});

describe('recurrent state snapshots in the prompt cache', () => {
  /** A hybrid model's cache: blocks of 2 tokens (1 byte each), `snapshots` snapshots of 10 bytes. */
  function hybrid(snapshots: number) {
    const alloc = new BlockAllocator(16, BLOCK);
    const cache = new PromptCache(
      { enabled: true, blockSize: BLOCK, blockBytes: 1, capacityBytes: 100, maxEntries: 100, ttlMs: 0, modelIdentity: 'model', snapshots, snapshotBytes: 10 },
      (block) => alloc.release([block]),
    );
    /** A finished sequence's history donated, with a snapshot at each of `at` (token counts). */
    const finish = (history: number[], at: number[]) => {
      const table: number[] = [];
      expect(alloc.ensure(table, history.length)).toBe(true);
      alloc.release(cache.donate(history, table, 0));
      return at.map((n) => {
        const snapshot = cache.takeSnapshot()!;
        expect(cache.attachSnapshot(history.slice(0, n), snapshot)).toBe(true);
        return snapshot;
      });
    };
    return { alloc, cache, finish };
  }

  it('a borrow stops at the furthest block with a snapshot, a partly matching block only when the prompt holds all of it', () => {
    const { cache, finish } = hybrid(4);
    const [at4, at7] = finish([1, 2, 3, 4, 5, 6, 7], [4, 7]);
    // Blocks [1 2] [3 4] [5 6] [7]: the prompt matches all whole blocks, but only [3 4] ends at a snapshot.
    const borrowed = cache.borrow([1, 2, 3, 4, 5, 6, 9, 9]);
    expect(borrowed).toEqual({ blocks: [expect.any(Number), expect.any(Number)], state: at4 });
    cache.release(borrowed.blocks);
    // The partial block [7] ends the snapshotted history, and the prompt goes on past it.
    const extended = cache.borrow([1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect(extended.blocks).toHaveLength(3);
    expect(extended).toMatchObject({ partial: { tokens: 1 }, state: at7 });
    cache.release([...extended.blocks, extended.partial!.block]);
    // No snapshot within the prompt: nothing to resume from.
    expect(cache.borrow([1, 2, 3, 9])).toEqual({ blocks: [] });
    expect(cache.stats()).toMatchObject({ entries: 4, bytes: 4 + 2 * 10, state_snapshots: 2, hits: 2, lookups: 3 });
  });

  it('a new snapshot takes the least recently used one\'s place; an evicted block frees its snapshot; attach needs the block', () => {
    const { cache, finish } = hybrid(1);
    const [first] = finish([1, 2, 3, 4], [4]);
    expect(cache.stats().state_snapshots).toBe(1);
    // The only snapshot is taken from its block for a newer one.
    expect(cache.takeSnapshot()).toBe(first);
    expect(cache.borrow([1, 2, 3, 4, 5])).toEqual({ blocks: [] });
    // A prefix that is not cached takes no snapshot.
    expect(cache.attachSnapshot([7, 8], first!)).toBe(false);
    expect(cache.attachSnapshot([1, 2, 3, 4], first!)).toBe(true);
    // A reset drops the blocks and gives their snapshots back.
    cache.reset();
    expect(cache.stats()).toMatchObject({ entries: 0, bytes: 0, state_snapshots: 0 });
    expect(cache.takeSnapshot()).toBe(first);
  });
});
