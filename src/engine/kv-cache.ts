// Paged KV cache bookkeeping: fixed-size blocks handed to sequences as they grow and
// returned when they end. The KV tensors themselves live in the model's buffers. A block
// is reference-counted: the choices forked from one prefill (n > 1) share its full prompt
// blocks, and the prompt cache holds one reference to each block it keeps.
export class BlockAllocator {
  private readonly free: number[];
  /** References per block; a block with none is on the free list. */
  private readonly refs: Uint32Array;
  /** Drops the prompt cache's reference to one of its blocks when the free list runs dry. */
  reclaim: () => number | undefined = () => undefined;

  constructor(readonly blocks: number, readonly blockSize: number) {
    // Popped from the end: low ids first, which keeps small runs compact.
    this.free = Array.from({ length: blocks }, (_, i) => blocks - 1 - i);
    this.refs = new Uint32Array(blocks);
  }

  get available(): number {
    return this.free.length;
  }

  /** Grows `table` to cover `tokens` positions; false if blocks ran out. */
  ensure(table: number[], tokens: number): boolean {
    const need = Math.ceil(tokens / this.blockSize) - table.length;
    for (let i = 0; i < need; i++) {
      const block = this.take();
      if (block === undefined) return false;
      table.push(block);
    }
    return true;
  }

  /** One more reference to each of `blocks` (a forked sequence sharing its parent's). */
  share(blocks: readonly number[]): void {
    for (const block of blocks) this.refs[block]++;
  }

  /** Drops one reference to each of `blocks`; a block nobody holds is free again. */
  release(blocks: readonly number[]): void {
    for (let i = blocks.length - 1; i >= 0; i--) {
      const block = blocks[i]!;
      if (--this.refs[block] === 0) this.free.push(block);
    }
  }

  private take(): number | undefined {
    let block = this.free.pop();
    // A block the cache gives up may still be shared by a running sequence: evict on.
    while (block === undefined) {
      const evicted = this.reclaim();
      if (evicted === undefined) return undefined;
      if (--this.refs[evicted] === 0) block = evicted;
    }
    this.refs[block] = 1;
    return block;
  }
}
