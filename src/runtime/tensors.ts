// GPU buffers for activations and weights. A weight whose bytes exceed one binding is
// split by rows into parts, each its own buffer (float formats, MXFP4) or texture (packed
// affine); ops dispatch once per part.
import { AFFINE_BITS, isAffine, type AffineFormat, type WeightFormat } from './kernel-source.js';
import './webgpu-globals.js';

const STORAGE = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC;

/** Buffer sizes are padded to 16 bytes: vec4 views and uniform structs need it. */
export function padded(bytes: number): number {
  return Math.max(16, Math.ceil(bytes / 16) * 16);
}

/** Activations: also bindable as a uniform, which matvec_q reads its input through. */
export function storageBuffer(device: GPUDevice, bytes: number, label: string): GPUBuffer {
  return device.createBuffer({ label, size: padded(bytes), usage: STORAGE | GPUBufferUsage.UNIFORM });
}

/**
 * A storage buffer created mapped, filled by `fill` straight into GPU-visible memory;
 * `uniform`: also bindable as a uniform (small vectors a kernel may read that way).
 */
export function filledBuffer(device: GPUDevice, bytes: number, label: string, fill: (dst: Uint8Array) => void, uniform = false): GPUBuffer {
  const usage = uniform ? STORAGE | GPUBufferUsage.UNIFORM : STORAGE;
  const buffer = device.createBuffer({ label, size: padded(bytes), usage, mappedAtCreation: true });
  fill(new Uint8Array(buffer.getMappedRange(), 0, bytes));
  buffer.unmap();
  return buffer;
}

/** A uniform buffer holding `data` (wgsl-struct.ts packStruct). */
export function uniformBuffer(device: GPUDevice, data: ArrayBuffer, label = 'params'): GPUBuffer {
  const buffer = device.createBuffer({ label, size: padded(data.byteLength), usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
  device.queue.writeBuffer(buffer, 0, data);
  return buffer;
}

export interface WeightPart {
  rowStart: number;
  rows: number;
  /** Float formats and MXFP4 (its blocks): a storage buffer. Affine: an rgba32uint texture (packedTexture). */
  data: GPUBuffer | GPUTexture;
  /** Affine: each group's scale and bias side by side (interleaveAffine), in an rgba32uint texture (affineTexture). */
  affine?: GPUTexture;
  /** MXFP4: each block's e8m0 scale byte, in block order (formats/mxfp4.wgsl). */
  scales?: GPUBuffer;
  /**
   * A stack of affine matrices at different bit widths or group sizes (loadMatrix): this
   * part's own, each part one matrix's rows; absent where it is the weight's (partWeight).
   */
  format?: AffineFormat;
  groupSize?: number;
}

/** How affine scales and biases are stored (formats/affine.wgsl SCALE_FORMAT): as the checkpoint has them. */
export type ScaleFormat = 'f32' | 'f16' | 'bf16';
/** Bytes of one stored scale (or bias) value. */
export const SCALE_BYTES: Record<ScaleFormat, 2 | 4> = { f32: 4, f16: 2, bf16: 2 };

/** A [rows, cols] matrix in one of the weight formats, resident on the GPU. */
export interface GpuWeight {
  format: WeightFormat;
  rows: number;
  cols: number;
  groupSize: number;
  /** Affine formats only. */
  scaleFormat?: ScaleFormat;
  /**
   * Experts stacked from matrices of different bit widths or group sizes (loaded at the
   * widest and the smallest, exactly): what the checkpoint stores, e.g. "q3 g64+q6 g64";
   * absent when that is `format` and `groupSize`.
   */
  stored?: string;
  parts: WeightPart[];
  /** Rows of each matrix this one stacks (q/k/v, gate/up), in order; absent for one matrix. */
  segments?: number[];
  /**
   * A gate/up weight whose two matrices' rows alternate in blocks of GLU_BLOCK_ROWS (gate
   * rows 0-15, up rows 0-15, gate rows 16-31, ...), for kernels that apply the SwiGLU to
   * their own output rows (Ops.gatedLinear); absent when the rows are stacked.
   */
  gluBlock?: number;
}

/** Part `part` of `w` as a weight of its own format and group size (WeightPart.format), for choosing its kernels. */
export function partWeight(w: GpuWeight, part: WeightPart): GpuWeight {
  return part.format ? { ...w, format: part.format, groupSize: part.groupSize! } : w;
}

/**
 * Rows per block of an interleaved gate/up weight (GpuWeight.gluBlock): half the 32 rows a
 * matvec_q or matmul_q invocation owns, so each invocation holds matching gate and up rows.
 */
export const GLU_BLOCK_ROWS = 16;

/**
 * Bytes of one row of data in each format as loaded: an affine row's bit stream padded to
 * whole 16-byte texels (formats/affine.wgsl w_row_texels), which only rows of 2-, 3-, 5- and
 * 6-bit values whose width is not a multiple of 128 (64 for 2- and 6-bit) need; MXFP4 its
 * blocks (a scale byte per 32 values beside them).
 */
export function rowBytes(format: WeightFormat, cols: number): number {
  if (isAffine(format)) return Math.ceil((cols * AFFINE_BITS[format]) / 128) * 16;
  if (format === 'mxfp4') return cols / 2;
  return format === 'f32' ? cols * 4 : cols * 2;
}

/** Values per MXFP4 block (one e8m0 scale each). */
export const MXFP4_BLOCK = 32;

/**
 * Texels per row of a packed-weight texture (formats/affine.wgsl PACKED_WIDTH, set from
 * here): a power of two (kernels shift and mask), and small (8 KiB rows) so that a matrix's
 * last texture row wastes little; the bench model's matrices fill theirs exactly.
 */
export const PACKED_TEXTURE_WIDTH = 512;
const PACKED_TEXTURE_ROW_BYTES = PACKED_TEXTURE_WIDTH * 16;

/**
 * Rows of a packed weight stored side by side (formats/affine.wgsl PACKED_TILE_ROWS, set
 * from here): texel c of rows 8t .. 8t + 7 are consecutive, so 8 rows a kernel reads
 * together are one sequential stream instead of 8.
 */
export const PACKED_TILE_ROWS = 8;

/**
 * The height of a texture a kernel reads, for at least `rows` rows: never a power of two.
 * llvmpipe compiles a kernel once per class of the textures bound to it (each side a power
 * of two or not), so one class for every texture keeps it to one compile per kernel, shared
 * by every model through the shader cache. (The widths are fixed powers of two.)
 */
export function textureRows(rows: number): number {
  const n = Math.max(3, rows);
  return (n & (n - 1)) === 0 ? n + 1 : n;
}

/** Rows per part so that each part's data fits one binding (a buffer, or a texture's height). */
export function rowsPerPart(format: WeightFormat, cols: number, limits: { maxBinding: number; maxTextureRows: number }): number {
  if (!isAffine(format)) return Math.max(1, Math.floor(limits.maxBinding / rowBytes(format, cols)));
  // One texture row short of the limit (textureRows may add one), whole tiles.
  const bytes = Math.min(limits.maxBinding, (limits.maxTextureRows - 1) * PACKED_TEXTURE_ROW_BYTES);
  return Math.max(PACKED_TILE_ROWS, Math.floor(bytes / rowBytes(format, cols) / PACKED_TILE_ROWS) * PACKED_TILE_ROWS);
}

/** Texture rows per writeTexture while uploading packed weights (16 KiB). */
const UPLOAD_SLICE_ROWS = 2;
/** packedTexture's upload slice, reused across calls (writeTexture copies it before returning). */
let uploadSlice: Uint8Array | undefined;

/** Row-major source bytes: fills dst from byte `offset` of the rows on. */
export type RowReader = (dst: Uint8Array, offset: number) => void;

/**
 * `bytes` of data (read: filled from a byte offset on) in an rgba32uint texture
 * PACKED_TEXTURE_WIDTH texels wide: vec4<u32> i of the data is texel (i % width, i / width),
 * and the texels past the data are zeros. Why a texture: on llvmpipe a texel fetch is one
 * vectorised gather, where a storage load whose address differs per invocation is a
 * per-lane scalar loop (bench/linear-q.ts). The data goes up in small slices, so loading
 * needs no staging copy of the whole part (whose garbage would stay resident).
 */
function flatTexture(device: GPUDevice, bytes: number, label: string, read: RowReader): GPUTexture {
  const height = textureRows(Math.ceil(bytes / PACKED_TEXTURE_ROW_BYTES));
  const texture = device.createTexture({
    label,
    size: [PACKED_TEXTURE_WIDTH, height],
    format: 'rgba32uint',
    // Bound as a sampled or a read-only storage texture, by kernel (formats/affine.wgsl W_READ; Ops.affineRead).
    usage: GPUTextureUsage.TEXTURE_BINDING | GPUTextureUsage.STORAGE_BINDING | GPUTextureUsage.COPY_DST,
  });
  const slice = (uploadSlice ??= new Uint8Array(UPLOAD_SLICE_ROWS * PACKED_TEXTURE_ROW_BYTES));
  for (let row = 0; row < height; row += UPLOAD_SLICE_ROWS) {
    const sliceRows = Math.min(UPLOAD_SLICE_ROWS, height - row);
    const offset = row * PACKED_TEXTURE_ROW_BYTES;
    const n = Math.max(0, Math.min(sliceRows * PACKED_TEXTURE_ROW_BYTES, bytes - offset));
    slice.fill(0, n);
    if (n > 0) read(slice.subarray(0, n), offset);
    device.queue.writeTexture({ texture, origin: [0, row] }, slice, { bytesPerRow: PACKED_TEXTURE_ROW_BYTES, rowsPerImage: sliceRows }, [PACKED_TEXTURE_WIDTH, sliceRows]);
  }
  return texture;
}

/**
 * Packed affine weight words in a flat texture (flatTexture), in tiles of PACKED_TILE_ROWS
 * rows: texel c of row n is vec4<u32> (n / 8) * 8 * row_texels + c * 8 + n % 8 of the
 * data; rows past `rows` are zeros.
 */
export function packedTexture(device: GPUDevice, rows: number, bytesPerRow: number, label: string, read: RowReader): GPUTexture {
  const tileBytes = PACKED_TILE_ROWS * bytesPerRow;
  const texelsPerRow = bytesPerRow / 16;
  const rowMajor = new Uint8Array(tileBytes);
  const src = new Uint32Array(rowMajor.buffer);
  const tiles = unitReader(tileBytes, (t, tiled) => {
    const first = t * PACKED_TILE_ROWS;
    const have = Math.min(PACKED_TILE_ROWS, rows - first) * bytesPerRow;
    rowMajor.fill(0, have);
    read(rowMajor.subarray(0, have), first * bytesPerRow);
    const out = new Uint32Array(tiled.buffer, tiled.byteOffset, tiled.byteLength / 4);
    let o = 0;
    for (let c = 0; c < texelsPerRow; c++) {
      for (let r = 0; r < PACKED_TILE_ROWS; r++, o += 4) {
        const from = (r * texelsPerRow + c) * 4;
        out[o] = src[from]!;
        out[o + 1] = src[from + 1]!;
        out[o + 2] = src[from + 2]!;
        out[o + 3] = src[from + 3]!;
      }
    }
  });
  return flatTexture(device, Math.ceil(rows / PACKED_TILE_ROWS) * tileBytes, label, tiles);
}

/**
 * A reader of data built in units of `unitBytes` (fill(u, dst) writes all of unit u): it
 * fills dst from any offset on, building each unit once when the reads are consecutive, as
 * flatTexture's are.
 */
function unitReader(unitBytes: number, fill: (unit: number, dst: Uint8Array) => void): RowReader {
  const unit = new Uint8Array(unitBytes);
  let loaded = -1;
  return (dst, offset) => {
    for (let o = 0; o < dst.length;) {
      const u = Math.floor((offset + o) / unitBytes);
      if (u !== loaded) {
        fill(u, unit);
        loaded = u;
      }
      const within = offset + o - u * unitBytes;
      const n = Math.min(unitBytes - within, dst.length - o);
      dst.set(unit.subarray(within, within + n), o);
      o += n;
    }
  };
}

/** Fills dst's start with `rows` rows of a part's scales (or biases), from its row `first` on. */
export type AffineReader = (dst: Uint8Array, first: number, rows: number) => void;

/** Rows of scales and biases affineTexture interleaves at a time: whole quads (the layout's unit). */
const AFFINE_SLICE_ROWS = 64;

/**
 * An affine part's scales and biases (stored dtype: `valueBytes` each, `groupsPerRow` per
 * row) in formats/affine.wgsl's layout (interleaveAffine), in a flat texture. They are read
 * and interleaved AFFINE_SLICE_ROWS rows at a time through small reused slices (whole-part
 * copies leave garbage that stays resident while serving).
 */
export function affineTexture(device: GPUDevice, rows: number, groupsPerRow: number, valueBytes: 2 | 4, label: string, scales: AffineReader, biases: AffineReader): GPUTexture {
  const bytesPerRow = groupsPerRow * valueBytes;
  const [s, b] = [new Uint8Array(AFFINE_SLICE_ROWS * bytesPerRow), new Uint8Array(AFFINE_SLICE_ROWS * bytesPerRow)];
  const slices = unitReader(affineBytes(AFFINE_SLICE_ROWS, groupsPerRow, valueBytes), (u, dst) => {
    const first = u * AFFINE_SLICE_ROWS;
    const n = Math.min(AFFINE_SLICE_ROWS, rows - first);
    scales(s, first, n);
    biases(b, first, n);
    // The last slice's rows past `rows` (the padding of its last quad and beyond) stay zeros.
    dst.fill(0);
    interleaveAffine(s.subarray(0, n * bytesPerRow), b.subarray(0, n * bytesPerRow), valueBytes, groupsPerRow, dst);
  });
  return flatTexture(device, affineBytes(rows, groupsPerRow, valueBytes), `${label}.affine`, slices);
}

/** Bytes of an affine part's scales and biases for `rows` rows (interleaveAffine: rows padded to a quad). */
function affineBytes(rows: number, groupsPerRow: number, valueBytes: 2 | 4): number {
  return Math.ceil(rows / 4) * 4 * groupsPerRow * 2 * valueBytes;
}

/**
 * Writes the scales and biases of whole rows (`groupsPerRow` each, `valueBytes` each: their
 * stored dtype) into dst in formats/affine.wgsl's layout: each group's scale and bias side
 * by side as one entry (one 32-bit word for 16-bit values, two for f32), the entries of a
 * group for four consecutive rows adjacent, so that one 16-byte load gives matvec_q four
 * rows' entries. The rows of a last partial quad are left as dst has them (zeros).
 */
function interleaveAffine(scales: Uint8Array, biases: Uint8Array, valueBytes: 2 | 4, groupsPerRow: number, dst: Uint8Array): void {
  const view = (a: Uint8Array) =>
    valueBytes === 2 ? new Uint16Array(a.buffer, a.byteOffset, a.byteLength / 2) : new Uint32Array(a.buffer, a.byteOffset, a.byteLength / 4);
  const [s, b, d] = [view(scales), view(biases), view(dst)];
  for (let i = 0; i < s.length; i++) {
    const n = Math.floor(i / groupsPerRow);
    const e = ((n >> 2) * groupsPerRow + (i % groupsPerRow)) * 4 + (n & 3);
    d[2 * e] = s[i]!;
    d[2 * e + 1] = b[i]!;
  }
}

/** A weight part's rows in the binding their format is read through (read: row-major bytes). */
export function weightData(device: GPUDevice, format: WeightFormat, rows: number, cols: number, label: string, read: RowReader): GPUBuffer | GPUTexture {
  const bytesPerRow = rowBytes(format, cols);
  return isAffine(format) ? packedTexture(device, rows, bytesPerRow, label, read) : filledBuffer(device, rows * bytesPerRow, label, (dst) => read(dst, 0));
}

/** Texels per row of a KV cache texture (kv_cache.wgsl KV_WIDTH): a power of two, at most WebGPU's smallest maxTextureDimension2D. */
export const KV_TEXTURE_WIDTH = 4096;

/** How the KV cache stores keys or values (--cache-type-k / --cache-type-v). */
export type KvType = 'f32' | 'f16';
export const KV_TYPES: readonly KvType[] = ['f32', 'f16'];

/** The texture format of each KV type: four values per texel (kv_cache.wgsl). */
const KV_TEXEL_FORMAT: Record<KvType, GPUTextureFormat> = { f32: 'rgba32float', f16: 'rgba16float' };
/** Bytes of one KV texel (four values) of each type. */
export const KV_TEXEL_BYTES: Record<KvType, number> = { f32: 16, f16: 8 };

/** Texture rows of a KV cache texture holding `vec4s` texels (kvCacheTexture). */
export function kvTextureRows(vec4s: number): number {
  return textureRows(Math.ceil(vec4s / KV_TEXTURE_WIDTH));
}

/**
 * One layer's keys or values: `vec4s` texels of four values of `type`, flat in a texture
 * (kv_cache.wgsl), written through storage bindings, read through storage or sampled ones
 * (attention_io.wgsl KV_READ), and moved by copies (growth, block copies, slot files).
 */
export function kvCacheTexture(device: GPUDevice, vec4s: number, type: KvType, label: string): GPUTexture {
  const rows = kvTextureRows(vec4s);
  const max = device.limits.maxTextureDimension2D;
  if (rows > max) throw new Error(`${label}: ${vec4s} texels need ${rows} rows of ${KV_TEXTURE_WIDTH}, past this adapter's ${max}; lower --ctx-size or --parallel`);
  return device.createTexture({
    label,
    size: [KV_TEXTURE_WIDTH, rows],
    format: KV_TEXEL_FORMAT[type],
    usage: GPUTextureUsage.STORAGE_BINDING | GPUTextureUsage.TEXTURE_BINDING | GPUTextureUsage.COPY_SRC | GPUTextureUsage.COPY_DST,
  });
}

/** The KV type a KV cache texture stores. */
export function kvTypeOf(texture: GPUTexture): KvType {
  return texture.format === KV_TEXEL_FORMAT.f16 ? 'f16' : 'f32';
}
