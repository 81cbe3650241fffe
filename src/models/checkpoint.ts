// Reads a checkpoint's tensors (single or sharded safetensors) straight into GPU buffers:
// each tensor's bytes go from the file into a buffer mapped at creation, with no second
// host copy. Quantized (MLX affine) weights stay packed; only their per-group scales and
// biases, and the small vectors (norms, biases), are widened to f32 on the host.
import { closeSync, existsSync, openSync, readFileSync, readSync } from 'node:fs';
import { join } from 'node:path';
import type { Quantization } from './config.js';
import { bf16ToF32, f16ToF32 } from './half.js';
import { readSafetensorsHeader } from './safetensors.js';
import type { WeightFormat } from '../runtime/kernel-source.js';
import { filledBuffer, rowBytes, rowsPerPart, type GpuWeight, type WeightPart } from '../runtime/tensors.js';

interface TensorEntry {
  file: string;
  dtype: string;
  shape: number[];
  offset: number;
  length: number;
}

export class Checkpoint {
  private readonly tensors = new Map<string, TensorEntry>();
  private readonly fds = new Map<string, number>();

  constructor(readonly dir: string) {
    const index = join(dir, 'model.safetensors.index.json');
    const files = existsSync(index)
      ? [...new Set(Object.values((JSON.parse(readFileSync(index, 'utf8')) as { weight_map: Record<string, string> }).weight_map))]
      : ['model.safetensors'];
    for (const f of files) {
      const path = join(dir, f);
      const { tensors, dataStart } = readSafetensorsHeader(path);
      for (const [name, t] of Object.entries(tensors)) {
        const [begin, end] = t.data_offsets;
        this.tensors.set(name, { file: path, dtype: t.dtype, shape: t.shape, offset: dataStart + begin, length: end - begin });
      }
    }
  }

  has(name: string): boolean {
    return this.tensors.has(name);
  }

  entry(name: string): TensorEntry {
    const t = this.tensors.get(name);
    if (!t) throw new Error(`${this.dir}: tensor ${name} not found`);
    return t;
  }

  /** Reads `length` bytes of tensor `name` starting at byte `start` into `dst`. */
  readInto(name: string, dst: Uint8Array, start = 0): void {
    const t = this.entry(name);
    let fd = this.fds.get(t.file);
    if (fd === undefined) {
      fd = openSync(t.file, 'r');
      this.fds.set(t.file, fd);
    }
    let done = 0;
    while (done < dst.length) {
      const n = readSync(fd, dst, done, dst.length - done, t.offset + start + done);
      if (n === 0) throw new Error(`${t.file}: unexpected end of file in ${name}`);
      done += n;
    }
  }

  /** A float tensor of any stored dtype, widened to f32. */
  readF32(name: string): Float32Array {
    const t = this.entry(name);
    const bytes = new Uint8Array(t.length);
    this.readInto(name, bytes);
    switch (t.dtype) {
      case 'F32': return new Float32Array(bytes.buffer);
      case 'F16': return f16ToF32(new Uint16Array(bytes.buffer));
      case 'BF16': return bf16ToF32(new Uint16Array(bytes.buffer));
      default: throw new Error(`${name}: dtype ${t.dtype} is not a float type`);
    }
  }

  close(): void {
    for (const fd of this.fds.values()) closeSync(fd);
    this.fds.clear();
  }
}

const FLOAT_FORMATS: Record<string, WeightFormat> = { F32: 'f32', F16: 'f16', BF16: 'bf16' };

/** Uploads an f32 vector (norm weight, bias). */
export function loadVector(device: GPUDevice, ckpt: Checkpoint, name: string): GPUBuffer {
  const data = ckpt.readF32(name);
  return filledBuffer(device, data.byteLength, name, (dst) => dst.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength)));
}

/**
 * Uploads the matrix `<prefix>.weight` ([rows, cols]) in its stored format: a float dtype,
 * or MLX affine packed uint32 with `<prefix>.scales` / `.biases` beside it.
 */
export function loadMatrix(device: GPUDevice, maxBinding: number, ckpt: Checkpoint, prefix: string, quant?: Quantization): GpuWeight {
  const name = `${prefix}.weight`;
  const t = ckpt.entry(name);
  const [rows, stored] = t.shape;
  let format: WeightFormat;
  let cols = stored;
  let groupSize = 0;
  if (t.dtype === 'U32') {
    if (!quant || !ckpt.has(`${prefix}.scales`)) throw new Error(`${name}: packed uint32 weight without quantization config and scales`);
    format = quant.bits === 4 ? 'q4' : 'q8';
    cols = (stored * 32) / quant.bits;
    groupSize = quant.groupSize;
  } else {
    const f = FLOAT_FORMATS[t.dtype];
    if (!f) throw new Error(`${name}: dtype ${t.dtype} is not supported`);
    format = f;
  }
  const perPart = rowsPerPart(format, cols, maxBinding);
  const bytesPerRow = rowBytes(format, cols);
  const scales = groupSize ? ckpt.readF32(`${prefix}.scales`) : undefined;
  const biases = groupSize ? ckpt.readF32(`${prefix}.biases`) : undefined;
  const groupsPerRow = groupSize ? cols / groupSize : 0;
  const parts: WeightPart[] = [];
  for (let rowStart = 0; rowStart < rows; rowStart += perPart) {
    const n = Math.min(perPart, rows - rowStart);
    const label = `${prefix}[${rowStart}:${rowStart + n}]`;
    const part: WeightPart = {
      rowStart,
      rows: n,
      data: filledBuffer(device, n * bytesPerRow, label, (dst) => ckpt.readInto(name, dst, rowStart * bytesPerRow)),
    };
    if (scales && biases) {
      const slice = (a: Float32Array) => a.subarray(rowStart * groupsPerRow, (rowStart + n) * groupsPerRow);
      const upload = (a: Float32Array, what: string) =>
        filledBuffer(device, a.byteLength, `${label}.${what}`, (dst) => dst.set(new Uint8Array(a.buffer, a.byteOffset, a.byteLength)));
      part.scales = upload(slice(scales), 'scales');
      part.biases = upload(slice(biases), 'biases');
    }
    parts.push(part);
  }
  return { format, rows, cols, groupSize, parts };
}
