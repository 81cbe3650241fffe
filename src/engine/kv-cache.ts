// Paged KV cache bookkeeping: fixed-size blocks handed to sequences as they grow and
// returned when they end. The KV tensors themselves live in the model's buffers.
export class BlockAllocator {
  private readonly free: number[];
  /** Reclaims a block held by the prompt cache when the free list runs dry. */
  reclaim: () => number | undefined = () => undefined;

  constructor(readonly blocks: number, readonly blockSize: number) {
    // Popped from the end: low ids first, which keeps small runs compact.
    this.free = Array.from({ length: blocks }, (_, i) => blocks - 1 - i);
  }

  get available(): number {
    return this.free.length;
  }

  /** Grows `table` to cover `tokens` positions; false if blocks ran out. */
  ensure(table: number[], tokens: number): boolean {
    const need = Math.ceil(tokens / this.blockSize) - table.length;
    for (let i = 0; i < need; i++) {
      const block = this.free.pop() ?? this.reclaim();
      if (block === undefined) return false;
      table.push(block);
    }
    return true;
  }

  release(blocks: number[]): void {
    for (let i = blocks.length - 1; i >= 0; i--) this.free.push(blocks[i]);
  }
}
