// Paged KV cache bookkeeping: fixed-size blocks handed to sequences as they grow and
// returned when they end. The KV tensors themselves live in the model's buffers.
export class BlockAllocator {
  private readonly free: number[];

  constructor(readonly blocks: number, readonly blockSize: number) {
    // Popped from the end: low ids first, which keeps small runs compact.
    this.free = Array.from({ length: blocks }, (_, i) => blocks - 1 - i);
  }

  get available(): number {
    return this.free.length;
  }

  /** Grows `table` to cover `tokens` positions; false (and no change) if blocks ran out. */
  ensure(table: number[], tokens: number): boolean {
    const need = Math.ceil(tokens / this.blockSize) - table.length;
    if (need <= 0) return true;
    if (need > this.free.length) return false;
    for (let i = 0; i < need; i++) table.push(this.free.pop()!);
    return true;
  }

  release(table: number[]): void {
    this.free.push(...table.reverse());
    table.length = 0;
  }
}
