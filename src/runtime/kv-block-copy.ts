// Copies whole blocks of the paged KV cache (kv_cache.wgsl's layout: per layer, keys and
// values each flat in an rgba32float texture KV_TEXTURE_WIDTH texels wide, one block =
// `blockTexels` consecutive texels). A choice forked from another's prefill takes a copy
// of the prompt's partly filled last block, which both go on writing.
// WebGPU copies no region of a texture onto the same texture, so a block goes through a
// staging buffer: texture -> buffer -> texture, each way as at most three rectangles (a
// row's tail, whole rows, a row's head). Commands of one encoder run in order, so one
// staging block serves every copy.
import { KV_TEXTURE_WIDTH } from './tensors.js';

export interface BlockCopy {
  from: number;
  to: number;
}

const TEXEL_BYTES = 16;

/** One rectangle of a run of texels: its origin, size, and where it starts in the run. */
interface Rect {
  x: number;
  y: number;
  width: number;
  height: number;
  /** Texels of the run before this rectangle. */
  at: number;
}

/** The rectangles covering texels [start, start + count) of a texture `width` texels wide. */
function texelRects(start: number, count: number, width: number): Rect[] {
  const rects: Rect[] = [];
  let at = 0;
  while (at < count) {
    const i = start + at;
    const x = i % width;
    const y = Math.floor(i / width);
    const left = count - at;
    if (x === 0 && left >= width) {
      const height = Math.floor(left / width);
      rects.push({ x, y, width, height, at });
      at += height * width;
    } else {
      const w = Math.min(width - x, left);
      rects.push({ x, y, width: w, height: 1, at });
      at += w;
    }
  }
  return rects;
}

export class KvBlockCopier {
  private readonly staging: GPUBuffer;

  constructor(
    device: GPUDevice,
    /** Every layer's key and value textures. */
    private readonly textures: readonly GPUTexture[],
    private readonly blockTexels: number,
  ) {
    this.staging = device.createBuffer({ label: 'kv_block_staging', size: blockTexels * TEXEL_BYTES, usage: GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
  }

  encode(encoder: GPUCommandEncoder, copies: readonly BlockCopy[]): void {
    const layout = (at: number) => ({ buffer: this.staging, offset: at * TEXEL_BYTES, bytesPerRow: KV_TEXTURE_WIDTH * TEXEL_BYTES });
    for (const { from, to } of copies) {
      const src = texelRects(from * this.blockTexels, this.blockTexels, KV_TEXTURE_WIDTH);
      const dst = texelRects(to * this.blockTexels, this.blockTexels, KV_TEXTURE_WIDTH);
      for (const texture of this.textures) {
        for (const r of src) encoder.copyTextureToBuffer({ texture, origin: { x: r.x, y: r.y } }, layout(r.at), { width: r.width, height: r.height });
        for (const r of dst) encoder.copyBufferToTexture(layout(r.at), { texture, origin: { x: r.x, y: r.y } }, { width: r.width, height: r.height });
      }
    }
  }
}
