// Shared harness for the GPU kernel unit tests: one Dawn device (llvmpipe through OpenGL ES
// on a machine without a GPU) per test file, host <-> GPU buffers, replaying recorded
// dispatches with a step shape, weights in every format, and comparison helpers that
// report the worst element rather than the first.
import { expect } from 'vitest';
import { mapRead, openGpu, type Gpu } from '../../src/runtime/gpu.js';
import { Ops } from '../../src/runtime/ops.js';
import { Program, type Dispatch, type StepShape } from '../../src/runtime/program.js';
import { affineTexture, filledBuffer, KV_TEXEL_BYTES, KV_TEXTURE_WIDTH, kvCacheTexture, kvTypeOf, MXFP4_BLOCK, rowBytes, SCALE_BYTES, storageBuffer, weightData, type GpuWeight, type KvType, type ScaleFormat, type WeightPart } from '../../src/runtime/tensors.js';
import { AFFINE_BITS, isAffine, type WeightFormat } from '../../src/runtime/kernel-source.js';
import { bf16ToF32, f16ToF32, f32ToBf16, f32ToF16 } from '../../src/models/half.js';
import { quantizeAffine, type QuantBits } from '../../src/models/quantize.js';
import { TEST_BACKEND } from '../helpers/model-harness.js';
import { decodeMxfp4, quantizeMxfp4, type Mxfp4 } from '../helpers/mxfp4.js';

/** A quiet NaN with a payload: a poisoned word that a kernel rewrote (even with NaN) shows up. */
export const POISON_BITS = 0x7fc0dead;
export const POISON_U32 = 0xdeadbeef;

// ---------------------------------------------------------------------------------------
// Deterministic random inputs.

export { rng } from '../helpers/rng.js';

/** `data` as a KV cache of `type` holds it: f16 rounds each value to nearest even (NaNs become one NaN). */
export function kvRound(data: Float32Array, type: KvType): Float32Array {
  return type === 'f16' ? f16ToF32(f32ToF16(data)) : data;
}

export function randomF32(rand: () => number, n: number, lo = -1, hi = 1): Float32Array {
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = lo + (hi - lo) * rand();
  return out;
}

export function randomInts(rand: () => number, n: number, below: number): Uint32Array {
  const out = new Uint32Array(n);
  for (let i = 0; i < n; i++) out[i] = Math.floor(rand() * below);
  return out;
}

// ---------------------------------------------------------------------------------------
// The device.

export class Harness {
  readonly device: GPUDevice;
  readonly ops: Ops;
  private readonly staging = new Map<number, GPUBuffer>();

  private constructor(readonly gpu: Gpu) {
    this.device = gpu.device;
    this.ops = new Ops(gpu);
  }

  /**
   * Opens TEST_BACKEND (llvmpipe through OpenGL ES unless MLXCEL_TEST_BACKEND says
   * otherwise). With `asGpu`, Ops is told the adapter is not a CPU, so it records the kernel
   * layouts meant for GPUs (matvec_q_workgroup, attention_decode_workgroup) whatever it is.
   * With `noStorageTextureReads`, Ops is told WGSL cannot read storage textures, so it
   * declares sampled bindings where it would read through storage ones.
   */
  static async open(o: { asGpu?: boolean; noStorageTextureReads?: boolean } = {}): Promise<Harness> {
    const gpu = await openGpu(TEST_BACKEND);
    return new Harness({ ...gpu, ...(o.asGpu ? { isCpu: false } : {}), ...(o.noStorageTextureReads ? { readOnlyStorageTextures: false } : {}) });
  }

  uploadF32(data: ArrayLike<number>, label = 'f32'): GPUBuffer {
    const a = data instanceof Float32Array ? data : Float32Array.from(data);
    return this.uploadBytes(new Uint8Array(a.buffer, a.byteOffset, a.byteLength), label);
  }

  uploadU32(data: ArrayLike<number>, label = 'u32'): GPUBuffer {
    const a = data instanceof Uint32Array ? data : Uint32Array.from(data);
    return this.uploadBytes(new Uint8Array(a.buffer, a.byteOffset, a.byteLength), label);
  }

  uploadBytes(bytes: Uint8Array, label = 'bytes'): GPUBuffer {
    return filledBuffer(this.device, bytes.byteLength, label, (dst) => dst.set(bytes));
  }

  /** Overwrites a buffer's start with host data (queue order puts it before later runs). */
  write(buffer: GPUBuffer, data: Float32Array | Uint32Array): void {
    this.device.queue.writeBuffer(buffer, 0, data.buffer, data.byteOffset, data.byteLength);
  }

  /** Refills the first `words` words of a buffer with the poison bits. */
  poison(buffer: GPUBuffer, words: number, bits = POISON_BITS): void {
    this.write(buffer, new Uint32Array(words).fill(bits));
  }

  /**
   * An activation buffer as the engine allocates them (storage and uniform usage, so
   * matvec_q reads it through a uniform binding), poisoned.
   */
  activation(words: number, label = 'activation'): GPUBuffer {
    const buffer = storageBuffer(this.device, words * 4, label);
    this.write(buffer, new Uint32Array(words).fill(POISON_BITS));
    return buffer;
  }

  /** A storage buffer of `words` 32-bit words, each set to `bits` (the NaN poison by default). */
  poisoned(words: number, bits = POISON_BITS, label = 'poisoned'): GPUBuffer {
    return this.uploadU32(new Uint32Array(words).fill(bits), label);
  }

  /**
   * Writes the step uniform, replays the dispatches with that shape in one submission.
   * Step fields a test does not name (e.g. penalty entries) are 0.
   */
  async run(dispatches: Dispatch | Dispatch[], partial: TestShape): Promise<void> {
    const shape = { bias: 0, ...partial } as unknown as StepShape;
    const program = new Program();
    program.add(...(Array.isArray(dispatches) ? dispatches : [dispatches]));
    this.device.pushErrorScope('validation');
    this.device.pushErrorScope('internal');
    this.ops.writeStep(shape);
    const encoder = this.device.createCommandEncoder();
    program.encode(encoder, shape);
    this.device.queue.submit([encoder.finish()]);
    const internal = await this.device.popErrorScope();
    const validation = await this.device.popErrorScope();
    const err = validation ?? internal;
    if (err) throw new Error(`GPU error: ${err.message}`);
  }

  /** A KV cache texture of `type` as the engine allocates them (kvCacheTexture), holding `data` ([slots, kv_dim], flat; f16 rounds it, kvRound). */
  kvCache(data: Float32Array, label = 'kv_cache', type: KvType = 'f32'): GPUTexture {
    const texture = kvCacheTexture(this.device, data.length / 4, type, label);
    this.writeKvCache(texture, data);
    return texture;
  }

  /** Overwrites a KV cache texture's first rows with `data` (in its type), and the rest of the last of them with zeros. */
  writeKvCache(texture: GPUTexture, data: Float32Array): void {
    const rowFloats = KV_TEXTURE_WIDTH * 4;
    const padded = new Float32Array(Math.ceil(data.length / rowFloats) * rowFloats);
    padded.set(data);
    const f16 = kvTypeOf(texture) === 'f16';
    const bytes = f16 ? f32ToF16(padded) : padded;
    this.device.queue.writeTexture({ texture }, bytes, { bytesPerRow: KV_TEXTURE_WIDTH * KV_TEXEL_BYTES[kvTypeOf(texture)] }, [KV_TEXTURE_WIDTH, padded.length / rowFloats]);
  }

  /** Reads back the first `floats` values of a KV cache texture, as f32. */
  async readKvCache(texture: GPUTexture, floats: number): Promise<Float32Array> {
    const type = kvTypeOf(texture);
    const rowBytes = KV_TEXTURE_WIDTH * KV_TEXEL_BYTES[type];
    const rows = Math.ceil(floats / (KV_TEXTURE_WIDTH * 4));
    const staging = this.device.createBuffer({ label: 'kv_readback', size: rows * rowBytes, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    const encoder = this.device.createCommandEncoder();
    encoder.copyTextureToBuffer({ texture }, { buffer: staging, bytesPerRow: rowBytes }, [KV_TEXTURE_WIDTH, rows]);
    this.device.queue.submit([encoder.finish()]);
    const raw = await mapRead(staging);
    const data = type === 'f16' ? f16ToF32(new Uint16Array(raw, 0, floats)) : new Float32Array(raw, 0, floats);
    staging.destroy();
    return data;
  }

  /** Copies the first `words` 32-bit words of a buffer back to the host. */
  async readWords(buffer: GPUBuffer, words: number): Promise<ArrayBuffer> {
    const bytes = Math.max(16, Math.ceil((words * 4) / 16) * 16);
    // A read still waiting on its map (a case that timed out goes on in the background)
    // keeps its buffer: this one gets another.
    let staging = this.staging.get(bytes);
    if (!staging || staging.mapState !== 'unmapped') {
      staging = this.device.createBuffer({ label: 'readback', size: bytes, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
      this.staging.set(bytes, staging);
    }
    const encoder = this.device.createCommandEncoder();
    encoder.copyBufferToBuffer(buffer, 0, staging, 0, bytes);
    this.device.queue.submit([encoder.finish()]);
    return (await mapRead(staging)).slice(0, words * 4);
  }

  async readF32(buffer: GPUBuffer, count: number): Promise<Float32Array> {
    return new Float32Array(await this.readWords(buffer, count));
  }

  async readU32(buffer: GPUBuffer, count: number): Promise<Uint32Array> {
    return new Uint32Array(await this.readWords(buffer, count));
  }

  /**
   * Uploads a row-major [rows, cols] f32 matrix in `format`, split into parts of the given
   * row counts (one part by default). Returns the weight and the values the kernel should
   * see after dequantization (`effective`), decoded independently of the kernels: halves
   * through src/models/half.ts, the affine formats by reading the bit stream bit by bit as
   * formats/affine.wgsl documents it, with scales and biases rounded to `scaleFormat` (bf16
   * by default, as mlx-lm stores them). Affine rows are uploaded as the loader uploads a
   * checkpoint's: padded to whole texels where their bit stream is not (rowBytes).
   * `mxfp4`: the blocks to upload as they are (else `host` quantized to MXFP4,
   * test/helpers/mxfp4.ts), decoded for the reference by that file's table.
   */
  weight(host: Float32Array, rows: number, cols: number, format: WeightFormat, opts: { groupSize?: number; parts?: number[]; scaleFormat?: ScaleFormat; mxfp4?: Mxfp4 } = {}): TestWeight {
    if (host.length !== rows * cols) throw new Error(`weight: ${host.length} values for [${rows}, ${cols}]`);
    const partRows = opts.parts ?? [rows];
    if (partRows.reduce((a, b) => a + b, 0) !== rows) throw new Error(`weight: parts ${partRows} do not sum to ${rows}`);
    const groupSize = isAffine(format) ? (opts.groupSize ?? 64) : 0;
    let bytes: Uint8Array;
    let effective: Float32Array;
    let bound: Float32Array | undefined;
    const scaleFormat = opts.scaleFormat ?? 'bf16';
    let scaleBytes: ((a: 'scales' | 'biases', from: number, to: number) => Uint8Array) | undefined;
    let mxfp4: Mxfp4 | undefined;
    switch (format) {
      case 'mxfp4':
        mxfp4 = opts.mxfp4 ?? quantizeMxfp4(host);
        bytes = mxfp4.blocks;
        effective = Float32Array.from(decodeMxfp4(mxfp4));
        break;
      case 'f32':
        bytes = new Uint8Array(host.slice().buffer);
        effective = host.slice();
        break;
      case 'f16': {
        const bits = f32ToF16(host);
        bytes = new Uint8Array(bits.buffer);
        effective = f16ToF32(bits);
        break;
      }
      case 'bf16': {
        const bits = f32ToBf16(host);
        bytes = new Uint8Array(bits.buffer);
        effective = bf16ToF32(bits);
        break;
      }
      default: {
        const bitsPer = AFFINE_BITS[format] as QuantBits;
        const q = quantizeAffine(host, rows, cols, bitsPer, groupSize);
        bytes = padRows(new Uint8Array(q.packed.buffer), rows, (cols * bitsPer) / 8, rowBytes(format, cols));
        effective = unpackAffine(q.packed, q.scales, q.biases, rows, cols, bitsPer, groupSize);
        // The quantizer itself: every element within one step of its group's grid.
        for (let i = 0; i < host.length; i++) {
          const s = Math.abs(q.scales[Math.floor(i / groupSize)]!);
          if (!(Math.abs(effective[i]! - host[i]!) <= s * 1.001 + 1e-7)) {
            throw new Error(`quantizer: element ${i} = ${host[i]} decodes to ${effective[i]} (scale ${s})`);
          }
        }
        // What the GPU holds: scales and biases in their stored format, and what they decode to.
        const stored = { scales: storeAs(q.scales, scaleFormat), biases: storeAs(q.biases, scaleFormat) };
        effective = unpackAffine(q.packed, stored.scales.values, stored.biases.values, rows, cols, bitsPer, groupSize);
        bound = new Float32Array(rows * cols);
        for (let i = 0; i < rows * cols; i++) {
          const b = stored.biases.values[Math.floor(i / groupSize)]!;
          bound[i] = Math.abs(effective[i]! - b) + Math.abs(b);
        }
        scaleBytes = (a, from, to) => stored[a].bytes.subarray(from * stored[a].size, to * stored[a].size);
        break;
      }
    }
    const perRow = rowBytes(format, cols);
    const groupsPerRow = groupSize ? cols / groupSize : 0;
    const parts: WeightPart[] = [];
    let rowStart = 0;
    for (const n of partRows) {
      const label = `w[${rowStart}:${rowStart + n}]`;
      const slice = bytes.subarray(rowStart * perRow, (rowStart + n) * perRow);
      const part: WeightPart = { rowStart, rows: n, data: weightData(this.device, format, n, cols, label, (dst, at) => dst.set(slice.subarray(at, at + dst.length))) };
      if (scaleBytes) {
        const reader = (which: 'scales' | 'biases', partStart: number) => (dst: Uint8Array, first: number, count: number) =>
          dst.set(scaleBytes!(which, (partStart + first) * groupsPerRow, (partStart + first + count) * groupsPerRow));
        part.affine = affineTexture(this.device, n, groupsPerRow, SCALE_BYTES[scaleFormat], label, reader('scales', rowStart), reader('biases', rowStart));
      }
      if (mxfp4) {
        const blocksPerRow = cols / MXFP4_BLOCK;
        part.scales = this.uploadBytes(mxfp4.scales.subarray(rowStart * blocksPerRow, (rowStart + n) * blocksPerRow), `${label}.scales`);
      }
      parts.push(part);
      rowStart += n;
    }
    return { gpu: { format, rows, cols, groupSize, scaleFormat: scaleBytes ? scaleFormat : undefined, parts }, effective, bound: bound ?? effective.map(Math.abs) };
  }

  destroy(): void {
    for (const b of this.staging.values()) b.destroy();
    this.device.destroy();
  }
}

export interface TestWeight {
  gpu: GpuWeight;
  /** [rows, cols] values the kernel decodes, for the CPU reference. */
  effective: Float32Array;
  /**
   * [rows, cols] magnitudes an f32 evaluation may round against: |w| for float formats;
   * |q * scale| + |bias| for the affine formats, whose kernels may sum scale * dot(q, x) and
   * bias * sum(x) separately (terms that can cancel).
   */
  bound: Float32Array;
}

/** `rows` rows of `from` bytes each, each zero-padded to `to` bytes. */
function padRows(data: Uint8Array, rows: number, from: number, to: number): Uint8Array {
  if (from === to) return data;
  const out = new Uint8Array(rows * to);
  for (let r = 0; r < rows; r++) out.set(data.subarray(r * from, (r + 1) * from), r * to);
  return out;
}

/** Values in a scale format: their bytes as uploaded (`size` per value) and what they decode to. */
function storeAs(values: Float32Array, format: ScaleFormat): { bytes: Uint8Array; size: number; values: Float32Array } {
  if (format === 'f32') return { bytes: new Uint8Array(values.slice().buffer), size: 4, values };
  const bits = format === 'f16' ? f32ToF16(values) : f32ToBf16(values);
  return { bytes: new Uint8Array(bits.buffer), size: 2, values: format === 'f16' ? f16ToF32(bits) : bf16ToF32(bits) };
}

/**
 * MLX affine layout: the row-major matrix is one little-endian bit stream of `bits`-bit
 * fields (element e at stream bits e * bits .. e * bits + bits - 1; bit i of the stream is
 * bit i % 32 of word i / 32), read here bit by bit; it decodes to q * scale[g] + bias[g]
 * with g = e / groupSize.
 */
function unpackAffine(packed: Uint32Array, scales: Float32Array, biases: Float32Array, rows: number, cols: number, bits: number, groupSize: number): Float32Array {
  const out = new Float32Array(rows * cols);
  for (let e = 0; e < rows * cols; e++) {
    let q = 0;
    for (let b = 0; b < bits; b++) {
      const i = e * bits + b;
      q |= ((packed[Math.floor(i / 32)]! >>> (i % 32)) & 1) << b;
    }
    const g = Math.floor(e / groupSize);
    out[e] = q * scales[g]! + biases[g]!;
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Comparisons.

/**
 * Asserts |got[i] - want[i]| <= tol(i) for i in [0, want.length), reporting the worst
 * offender (NaN counts as infinitely wrong).
 */
export function expectClose(what: string, got: ArrayLike<number>, want: ArrayLike<number>, tol: (i: number) => number): void {
  let worst = -1;
  let worstRatio = 0;
  let bad = 0;
  let maxRatio = 0;
  for (let i = 0; i < want.length; i++) {
    const err = Math.abs(got[i]! - want[i]!);
    const t = tol(i);
    const ratio = Number.isNaN(err) ? Infinity : err === 0 ? 0 : err / t;
    maxRatio = Math.max(maxRatio, ratio);
    if (!(err <= t)) {
      bad++;
      if (ratio >= worstRatio) { worstRatio = ratio; worst = i; }
    }
  }
  // KERNEL_TEST_VERBOSE=1 prints how much of each tolerance the kernels actually use.
  if (process.env.KERNEL_TEST_VERBOSE) console.log(`${what}: max |err|/tol = ${maxRatio.toExponential(2)} over ${want.length}`);
  if (bad > 0) {
    expect.fail(`${what}: ${bad}/${want.length} elements out of tolerance; worst at [${worst}]: got ${got[worst]}, want ${want[worst]}, ` +
      `|err| ${Math.abs(got[worst]! - want[worst]!)} > tol ${tol(worst)}`);
  }
}

/** Asserts words [from, to) of a buffer read back still hold the poison bits. */
export function expectPoisoned(what: string, words: Uint32Array | Float32Array, from: number, to: number, bits = POISON_BITS): void {
  const u = words instanceof Uint32Array ? words : new Uint32Array(words.buffer, words.byteOffset, words.length);
  for (let i = from; i < to; i++) {
    if (u[i] !== bits) expect.fail(`${what}: word ${i} was written (0x${u[i]!.toString(16)}), expected untouched poison 0x${bits.toString(16)}`);
  }
}

/** Asserts words [from, to) are bit-identical to `want` (for data a kernel must not touch). */
export function expectUnchanged(what: string, got: Float32Array, want: Float32Array, from: number, to: number): void {
  const g = new Uint32Array(got.buffer, got.byteOffset, got.length);
  const w = new Uint32Array(want.buffer, want.byteOffset, want.length);
  for (let i = from; i < to; i++) {
    if (g[i] !== w[i]) expect.fail(`${what}: word ${i} changed from ${want[i]} to ${got[i]}`);
  }
}

/** The step fields the kernels under test read; the rest of StepShape defaults to 0. */
export type TestShape = Pick<StepShape, 'tokens' | 'seqs'> & Partial<StepShape>;
