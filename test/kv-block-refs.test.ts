// The KV pool's reference counts under the prompt cache (src/engine/kv-cache.ts,
// src/engine/prompt-cache.ts), as the scheduler wires them: the cache holds one reference
// to each block it keeps, a forked choice one to each prompt block it shares, and a block
// returns to the pool only when its last holder lets go, whether the cache evicts it for
// the pool, drops it in a reset, or a borrower gives it back.
import { describe, expect, it } from 'vitest';
import { BlockAllocator } from '../src/engine/kv-cache.js';
import { PromptCache } from '../src/engine/prompt-cache.js';

const BLOCK = 2;

function pool(blocks: number) {
  const alloc = new BlockAllocator(blocks, BLOCK);
  const cache = new PromptCache(
    { enabled: true, blockSize: BLOCK, blockBytes: 1, capacityBytes: 1 << 20, maxEntries: 1 << 20, ttlMs: 0, modelIdentity: 'model' },
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
