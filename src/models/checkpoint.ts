// Reads a checkpoint's tensors (single or sharded safetensors) straight into GPU buffers:
// each tensor's bytes go from the file into a buffer mapped at creation, with no second
// host copy. Quantized (MLX affine) weights stay packed; only their per-group scales and
// biases, and the small vectors (norms, biases), are widened to f32 on the host.
import { closeSync, openSync, readSync } from 'node:fs';
import type { Quantization } from './config.js';
import { listCheckpointTensors, readTensorF32, type CheckpointTensor } from './safetensors.js';
import type { WeightFormat } from '../runtime/kernel-source.js';
import { filledBuffer, interleaveAffine, rowBytes, rowsPerPart, weightData, type GpuWeight, type ScaleFormat, type WeightPart } from '../runtime/tensors.js';

export class Checkpoint {
  private readonly tensors: Map<string, CheckpointTensor>;
  private readonly fds = new Map<string, number>();

  constructor(readonly dir: string) {
    this.tensors = listCheckpointTensors(dir);
  }

  has(name: string): boolean {
    return this.tensors.has(name);
  }

  entry(name: string): CheckpointTensor {
    const t = this.tensors.get(name);
    if (!t) throw new Error(`${this.dir}: tensor ${name} not found`);
    return t;
  }

  /** Reads `dst.length` bytes of tensor `name` starting at byte `start` into `dst`. */
  readInto(name: string, dst: Uint8Array, start = 0): void {
    const t = this.entry(name);
    let fd = this.fds.get(t.path);
    if (fd === undefined) {
      fd = openSync(t.path, 'r');
      this.fds.set(t.path, fd);
    }
    const offset = t.header.dataStart + t.info.data_offsets[0] + start;
    let done = 0;
    while (done < dst.length) {
      const n = readSync(fd, dst, done, dst.length - done, offset + done);
      if (n === 0) throw new Error(`${t.path}: unexpected end of file in ${name}`);
      done += n;
    }
  }

  /** A float tensor of any stored dtype, widened to f32. */
  readF32(name: string): Float32Array {
    return readTensorF32(this.entry(name));
  }

  close(): void {
    for (const fd of this.fds.values()) closeSync(fd);
    this.fds.clear();
  }
}

/** Float dtypes: of float weights, and of q4/q8 scales and biases. */
const FLOAT_FORMATS: Record<string, WeightFormat & ScaleFormat> = { F32: 'f32', F16: 'f16', BF16: 'bf16' };
/** Groups of scales and biases read at a time (loadMatrix), into two reused buffers. */
const AFFINE_SLICE_GROUPS = 1 << 16;
const [scaleSlice, biasSlice] = [new Uint8Array(AFFINE_SLICE_GROUPS * 4), new Uint8Array(AFFINE_SLICE_GROUPS * 4)];

/** Uploads an f32 vector (norm weight, bias). */
export function loadVector(device: GPUDevice, ckpt: Checkpoint, name: string): GPUBuffer {
  const data = ckpt.readF32(name);
  return filledBuffer(device, data.byteLength, name, (dst) => dst.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength)));
}

/**
 * Uploads the matrix `<prefix>.weight` ([rows, cols]) in its stored format: a float dtype,
 * or MLX affine packed uint32 with `<prefix>.scales` / `.biases` beside it.
 */
export function loadMatrix(device: GPUDevice, limits: { maxBinding: number; maxTextureRows: number }, ckpt: Checkpoint, prefix: string, quant?: Quantization): GpuWeight {
  const name = `${prefix}.weight`;
  const t = ckpt.entry(name).info;
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
  const perPart = rowsPerPart(format, cols, limits);
  const bytesPerRow = rowBytes(format, cols);
  const groupsPerRow = groupSize ? cols / groupSize : 0;
  let scaleFormat: ScaleFormat | undefined;
  if (groupSize) {
    const dtypes = ['scales', 'biases'].map((what) => ckpt.entry(`${prefix}.${what}`).info.dtype);
    scaleFormat = FLOAT_FORMATS[dtypes[0]!];
    if (!scaleFormat || dtypes[1] !== dtypes[0]) throw new Error(`${prefix}: scales / biases dtypes ${dtypes.join(' / ')} are not one of F32, F16, BF16`);
  }
  const parts: WeightPart[] = [];
  for (let rowStart = 0; rowStart < rows; rowStart += perPart) {
    const n = Math.min(perPart, rows - rowStart);
    const label = `${prefix}[${rowStart}:${rowStart + n}]`;
    const part: WeightPart = {
      rowStart,
      rows: n,
      data: weightData(device, format, n, cols, label, (dst, offset) => ckpt.readInto(name, dst, rowStart * bytesPerRow + offset)),
    };
    if (scaleFormat) {
      // Kept in their stored dtype (formats/affine.wgsl decodes it), scale and bias side by
      // side, read through small reused slices (whole-part copies left garbage that raised
      // the bench model's peak RSS while serving by ~12 MiB).
      const valueBytes = scaleFormat === 'f32' ? 4 : 2;
      const groups = n * groupsPerRow;
      const first = rowStart * groupsPerRow;
      part.affine = filledBuffer(device, 2 * groups * valueBytes, `${label}.affine`, (dst) => {
        for (let g = 0; g < groups; g += AFFINE_SLICE_GROUPS) {
          const bytes = Math.min(AFFINE_SLICE_GROUPS, groups - g) * valueBytes;
          const [scales, biases] = [scaleSlice.subarray(0, bytes), biasSlice.subarray(0, bytes)];
          ckpt.readInto(`${prefix}.scales`, scales, (first + g) * valueBytes);
          ckpt.readInto(`${prefix}.biases`, biases, (first + g) * valueBytes);
          interleaveAffine(scales, biases, valueBytes, dst.subarray(2 * g * valueBytes, 2 * (g * valueBytes + bytes)));
        }
      });
    }
    parts.push(part);
  }
  return { format, rows, cols, groupSize, scaleFormat, parts };
}
