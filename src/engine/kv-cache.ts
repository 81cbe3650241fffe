// Paged KV cache: the bookkeeping of fixed-size blocks handed to sequences as they grow
// and returned when they end (BlockAllocator), and the moves of KV rows between blocks and
// the host (KvRows). The KV tensors themselves live in the model's textures. A block is
// reference-counted: the choices forked from one prefill (n > 1) share its full prompt
// blocks, and the prompt cache holds one reference to each block it keeps.
import { mapRead } from '../runtime/gpu.js';
import { KV_TEXTURE_WIDTH } from '../runtime/tensors.js';
import type { KvCache } from '../models/model.js';

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

  /** Grows `table` to cover `tokens` positions; false if blocks ran out (the table keeps what it got). */
  ensure(table: number[], tokens: number): boolean {
    const need = Math.ceil(tokens / this.blockSize) - table.length;
    for (let i = 0; i < need; i++) {
      const block = this.take();
      if (block === undefined) return false;
      table.push(block);
    }
    return true;
  }

  /** Whether more than one holder references `block` (a fork, the prompt cache). */
  isShared(block: number): boolean {
    return this.refs[block]! > 1;
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

/** The first `rows` rows of block `from` copied into block `to`. */
export interface BlockCopy {
  from: number;
  to: number;
  rows: number;
}

/**
 * Moves KV rows (one row = one position's keys or values in one layer, kvDim f32) by GPU
 * copies. In a layer's texture, block b's rows are the texels [b * blockSize * rowTexels,
 * (b + 1) * blockSize * rowTexels), row-major across texture rows of KV_TEXTURE_WIDTH
 * texels (kv_cache.wgsl), so a run of rows within a block is one texel range, copied as
 * one segment per texture row it touches.
 */
export class KvRows {
  /** vec4 texels per row. */
  readonly rowTexels: number;
  private scratch: GPUBuffer | undefined;

  constructor(
    private readonly device: GPUDevice,
    private readonly kv: KvCache,
    /** kvHeads * headDim. */
    readonly rowFloats: number,
  ) {
    this.rowTexels = rowFloats / 4;
  }

  /** Bytes of `rows` rows across every layer's keys and values. */
  bytes(rows: number): number {
    return this.textures().length * rows * this.rowFloats * 4;
  }

  /**
   * Copies the first `rows` rows of block `from` into block `to`, in every layer, for each
   * copy in order. A texture cannot be copied into itself, so the rows pass through a
   * scratch buffer (commands of one encoder run in order, so one block of scratch serves
   * every copy); the copies are submitted now, ahead of any later pass.
   */
  copyBlocks(copies: readonly BlockCopy[]): void {
    if (copies.length === 0) return;
    this.scratch ??= this.device.createBuffer({ label: 'kv_rows_scratch', size: this.bytes(this.kv.blockSize), usage: GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
    const scratch = this.scratch;
    const encoder = this.device.createCommandEncoder();
    for (const { from, to, rows } of copies) {
      let offset = 0;
      for (const texture of this.textures()) {
        let o = offset;
        for (const s of this.segments(from, rows)) {
          encoder.copyTextureToBuffer({ texture, origin: { x: s.x, y: s.y } }, { buffer: scratch, offset: o }, [s.texels, 1]);
          o += s.texels * 16;
        }
        o = offset;
        for (const s of this.segments(to, rows)) {
          encoder.copyBufferToTexture({ buffer: scratch, offset: o }, { texture, origin: { x: s.x, y: s.y } }, [s.texels, 1]);
          o += s.texels * 16;
        }
        offset = o;
      }
    }
    this.device.queue.submit([encoder.finish()]);
  }

  /**
   * Reads positions 0 .. tokens - 1 of a sequence whose blocks are `table`: per layer, its
   * keys then its values, each [tokens, rowFloats].
   */
  async read(table: number[], tokens: number): Promise<Float32Array> {
    const out = this.device.createBuffer({ label: 'kv_rows_read', size: Math.max(16, this.bytes(tokens)), usage: GPUBufferUsage.COPY_DST | GPUBufferUsage.MAP_READ });
    const encoder = this.device.createCommandEncoder();
    let offset = 0;
    for (const texture of this.textures()) {
      for (const s of this.runs(table, tokens)) {
        encoder.copyTextureToBuffer({ texture, origin: { x: s.x, y: s.y } }, { buffer: out, offset }, [s.texels, 1]);
        offset += s.texels * 16;
      }
    }
    this.device.queue.submit([encoder.finish()]);
    try {
      return new Float32Array(await mapRead(out), 0, offset / 4);
    } finally {
      out.destroy();
    }
  }

  /** Writes what `read` returns back into the blocks of `table`. */
  write(table: number[], tokens: number, data: Float32Array): void {
    if (data.length !== this.bytes(tokens) / 4) throw new Error(`KV data of ${data.length} floats, expected ${this.bytes(tokens) / 4}`);
    let offset = 0;
    for (const texture of this.textures()) {
      for (const s of this.runs(table, tokens)) {
        this.device.queue.writeTexture({ texture, origin: { x: s.x, y: s.y } }, data, { offset }, [s.texels, 1]);
        offset += s.texels * 16;
      }
    }
  }

  private textures(): GPUTexture[] {
    return this.kv.k.flatMap((k, i) => [k, this.kv.v[i]]);
  }

  /** The segments of positions 0 .. tokens - 1 through the blocks of `table`. */
  private *runs(table: number[], tokens: number): Generator<Segment> {
    const bs = this.kv.blockSize;
    for (let b = 0; b * bs < tokens; b++) yield* this.segments(table[b], Math.min(bs, tokens - b * bs));
  }

  /** The first `rows` rows of `block`, split at texture rows. */
  private *segments(block: number, rows: number): Generator<Segment> {
    let start = block * this.kv.blockSize * this.rowTexels;
    let left = rows * this.rowTexels;
    while (left > 0) {
      const x = start % KV_TEXTURE_WIDTH;
      const texels = Math.min(left, KV_TEXTURE_WIDTH - x);
      yield { x, y: Math.floor(start / KV_TEXTURE_WIDTH), texels };
      start += texels;
      left -= texels;
    }
  }
}

interface Segment {
  x: number;
  y: number;
  texels: number;
}
