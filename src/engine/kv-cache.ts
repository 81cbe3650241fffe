// Paged KV cache: the bookkeeping of fixed-size blocks handed to sequences as they grow
// and returned when they end (BlockAllocator), and the moves of KV rows between blocks and
// the host (KvRows). The KV tensors themselves live in the model's textures, which KvRows
// replaces with larger or smaller ones as the pool grows and shrinks. A block is
// reference-counted: the choices forked from one prefill (n > 1) share its full prompt
// blocks, and the prompt cache holds one reference to each block it keeps.
import { mapRead } from '../runtime/gpu.js';
import { KV_TEXEL_BYTES, KV_TEXTURE_WIDTH, kvCacheTexture, kvTypeOf, padded } from '../runtime/tensors.js';
import type { KvCache } from '../models/model.js';
import type { KvLayer } from '../runtime/ops/attention.js';

/** How a pool of blocks grows and shrinks: the blocks it starts with and may grow to. */
export interface PoolGrowth {
  initial: number;
  max: number;
  /** Resizes the KV textures to hold `blocks` blocks, keeping blocks 0 .. min(old, new) - 1. */
  resize: (blocks: number) => void;
}

export class BlockAllocator {
  private readonly free: number[] = [];
  /** References per block; a block with none is on the free list (or past the capacity). */
  private readonly refs: Uint32Array;
  /** Blocks the KV textures hold now. */
  private capacityBlocks = 0;
  /** Drops the prompt cache's reference to one of its blocks when the pool is full. */
  reclaim: () => number | undefined = () => undefined;

  /**
   * A pool of `blocks` blocks (all allocated), or with `growth` one that starts at
   * growth.initial and doubles, as blocks run out, up to growth.max (the blocks a holder
   * keeps stay where they are: growth copies them into the larger textures).
   */
  constructor(blocks: number, readonly blockSize: number, private readonly growth?: PoolGrowth) {
    this.refs = new Uint32Array(growth?.max ?? blocks);
    this.extend(growth?.initial ?? blocks);
  }

  /** Blocks the KV textures hold now. */
  get capacity(): number {
    return this.capacityBlocks;
  }

  /** Blocks the pool may hold at most. */
  get max(): number {
    return this.refs.length;
  }

  /** Blocks that can be taken without evicting: free ones and those growth may add. */
  get available(): number {
    return this.free.length + this.max - this.capacityBlocks;
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

  /**
   * Shrinks a growable pool back towards its initial size, halving from its current one
   * while the held blocks fit. The held blocks past the new size are moved into free
   * blocks below it by `move` (which copies their KV and tells their holders, or refuses:
   * false leaves the pool as it was). Returns the blocks released.
   */
  shrink(move: (moves: ReadonlyMap<number, number>) => boolean): number {
    if (!this.growth) return 0;
    const held = this.capacityBlocks - this.free.length;
    let target = this.capacityBlocks;
    while (Math.ceil(target / 2) >= Math.max(this.growth.initial, held)) target = Math.ceil(target / 2);
    if (target >= this.capacityBlocks) return 0;
    const lowFree = this.free.filter((b) => b < target).sort((a, b) => b - a);
    const moves = new Map<number, number>();
    for (let b = target; b < this.capacityBlocks; b++) if (this.refs[b]! > 0) moves.set(b, lowFree.pop()!);
    if (moves.size > 0 && !move(moves)) return 0;
    for (const [from, to] of moves) {
      this.refs[to] = this.refs[from]!;
      this.refs[from] = 0;
    }
    this.free.length = 0;
    this.free.push(...lowFree);
    const released = this.capacityBlocks - target;
    this.capacityBlocks = target;
    this.growth.resize(target);
    return released;
  }

  private take(): number | undefined {
    if (this.free.length === 0 && this.growth && this.capacityBlocks < this.max) {
      const blocks = Math.min(this.max, this.capacityBlocks * 2);
      this.growth.resize(blocks);
      this.extend(blocks);
    }
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

  /** Blocks capacity .. blocks - 1 join the free list, popped low ids first (small runs stay compact). */
  private extend(blocks: number): void {
    const added: number[] = [];
    for (let b = blocks - 1; b >= this.capacityBlocks; b--) added.push(b);
    this.free.unshift(...added);
    this.capacityBlocks = blocks;
  }
}

/** The first `rows` rows of block `from` copied into block `to`. */
export interface BlockCopy {
  from: number;
  to: number;
  rows: number;
}

/**
 * Moves KV rows (one row = one position's keys or values in one layer, kvDim values of the
 * cache's type for them) of the paged layers by GPU copies, and resizes their textures
 * (the ring layers' rings are ./kv-rings.ts's). In a layer's
 * texture, block b's rows are the texels [b * blockSize * rowTexels, (b + 1) * blockSize *
 * rowTexels), row-major across texture rows of KV_TEXTURE_WIDTH texels (kv_cache.wgsl), so
 * a run of rows within a block is one texel range, copied as one segment per texture row
 * it touches. The host sees a texture's rows as their texels' bytes (f32 or f16 values).
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

  /** Bytes of `rows` rows across the paged layers' keys and values. */
  bytes(rows: number): number {
    return rows * this.kv.tokenBytes;
  }

  /**
   * Replaces every layer's textures with ones holding `blocks` blocks, the first
   * min(old, new) blocks copied over; the old textures are freed once the copies ran.
   */
  resize(blocks: number): void {
    const keep = Math.min(blocks, this.kv.blocks);
    const texels = blocks * this.kv.blockSize * this.rowTexels;
    const keptRows = Math.ceil((keep * this.kv.blockSize * this.rowTexels) / KV_TEXTURE_WIDTH);
    const encoder = this.device.createCommandEncoder();
    const old: GPUTexture[] = [];
    for (const layer of pagedLayers(this.kv)) {
      for (const side of ['k', 'v'] as const) {
        const from = layer[side];
        const to = kvCacheTexture(this.device, texels, kvTypeOf(from), from.label);
        if (keptRows > 0) encoder.copyTextureToTexture({ texture: from }, { texture: to }, [KV_TEXTURE_WIDTH, keptRows]);
        layer[side] = to;
        old.push(from);
      }
    }
    this.device.queue.submit([encoder.finish()]);
    for (const t of old) t.destroy();
    this.kv.blocks = blocks;
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
        const texel = KV_TEXEL_BYTES[kvTypeOf(texture)];
        let o = offset;
        for (const s of this.segments(from, rows)) {
          encoder.copyTextureToBuffer({ texture, origin: { x: s.x, y: s.y } }, { buffer: scratch, offset: o }, [s.texels, 1]);
          o += s.texels * texel;
        }
        o = offset;
        for (const s of this.segments(to, rows)) {
          encoder.copyBufferToTexture({ buffer: scratch, offset: o }, { texture, origin: { x: s.x, y: s.y } }, [s.texels, 1]);
          o += s.texels * texel;
        }
        offset = o;
      }
    }
    this.device.queue.submit([encoder.finish()]);
  }

  /**
   * Reads positions 0 .. tokens - 1 of a sequence whose blocks are `table`: per layer, its
   * keys then its values, each [tokens, rowFloats] values of their type, as bytes.
   */
  async read(table: number[], tokens: number): Promise<Uint8Array> {
    const out = this.device.createBuffer({ label: 'kv_rows_read', size: Math.max(16, padded(this.bytes(tokens))), usage: GPUBufferUsage.COPY_DST | GPUBufferUsage.MAP_READ });
    const encoder = this.device.createCommandEncoder();
    let offset = 0;
    for (const texture of this.textures()) {
      const texel = KV_TEXEL_BYTES[kvTypeOf(texture)];
      for (const s of this.runs(table, tokens)) {
        encoder.copyTextureToBuffer({ texture, origin: { x: s.x, y: s.y } }, { buffer: out, offset }, [s.texels, 1]);
        offset += s.texels * texel;
      }
    }
    this.device.queue.submit([encoder.finish()]);
    try {
      return new Uint8Array(await mapRead(out), 0, offset);
    } finally {
      out.destroy();
    }
  }

  /** Writes what `read` returns back into the blocks of `table`. */
  write(table: number[], tokens: number, data: Uint8Array): void {
    if (data.length !== this.bytes(tokens)) throw new Error(`KV data of ${data.length} bytes, expected ${this.bytes(tokens)}`);
    let offset = 0;
    for (const texture of this.textures()) {
      const texel = KV_TEXEL_BYTES[kvTypeOf(texture)];
      for (const s of this.runs(table, tokens)) {
        this.device.queue.writeTexture({ texture, origin: { x: s.x, y: s.y } }, data, { offset }, [s.texels, 1]);
        offset += s.texels * texel;
      }
    }
  }

  private textures(): GPUTexture[] {
    return pagedLayers(this.kv).flatMap((l) => [l.k, l.v]);
  }

  /** The segments of positions 0 .. tokens - 1 through the blocks of `table`. */
  private *runs(table: number[], tokens: number): Generator<Segment> {
    const bs = this.kv.blockSize;
    for (let b = 0; b * bs < tokens; b++) yield* this.segments(table[b]!, Math.min(bs, tokens - b * bs));
  }

  /** The first `rows` rows of `block`, split at texture rows. */
  private segments(block: number, rows: number): Generator<Segment> {
    return texelSegments(block * this.kv.blockSize * this.rowTexels, rows * this.rowTexels);
  }
}

/** Texels start .. start + texels - 1 of a KV texture, split at its rows. */
export function* texelSegments(start: number, texels: number): Generator<Segment> {
  let left = texels;
  while (left > 0) {
    const x = start % KV_TEXTURE_WIDTH;
    const n = Math.min(left, KV_TEXTURE_WIDTH - x);
    yield { x, y: Math.floor(start / KV_TEXTURE_WIDTH), texels: n };
    start += n;
    left -= n;
  }
}

/** The layers that keep every position in blocks. */
function pagedLayers(kv: KvCache): KvLayer[] {
  return kv.layers.filter((l): l is KvLayer => l !== undefined && !l.ring);
}

export interface Segment {
  x: number;
  y: number;
  texels: number;
}
