// Reads a checkpoint's tensors (single or sharded safetensors) straight into GPU buffers:
// each tensor's bytes go from the file into a buffer mapped at creation, with no second
// host copy. Quantized (MLX affine, MXFP4) weights stay packed; only MLX's per-group scales
// and biases, and the small vectors (norms, biases), are widened to f32 on the host.
import { closeSync, openSync, readSync } from 'node:fs';
import { moduleQuantization, type Quantization } from './config.js';
import { widenPacked, type QuantBits } from './quantize.js';
import { listCheckpointTensors, readTensorF32, type CheckpointTensor } from './safetensors.js';
import { isAffine, type AffineFormat, type WeightFormat } from '../runtime/kernel-source.js';
import { affineTexture, filledBuffer, GLU_BLOCK_ROWS, MXFP4_BLOCK, rowBytes, rowsPerPart, SCALE_BYTES, weightData, type GpuWeight, type ScaleFormat, type WeightPart } from '../runtime/tensors.js';

export class Checkpoint {
  private readonly tensors: Map<string, CheckpointTensor>;
  private readonly fds = new Map<string, number>();
  /** Tensors whose bytes have been read (load progress). */
  private readonly read = new Set<string>();

  /** `onRead` hears of each tensor the first time its bytes are read: how many have been read so far. */
  constructor(readonly dir: string, private readonly onRead?: (done: number) => void) {
    this.tensors = listCheckpointTensors(dir);
  }

  has(name: string): boolean {
    return this.tensors.has(name);
  }

  names(): IterableIterator<string> {
    return this.tensors.keys();
  }

  entry(name: string): CheckpointTensor {
    const t = this.tensors.get(name);
    if (!t) throw new Error(`${this.dir}: tensor ${name} not found`);
    return t;
  }

  /** Reads `dst.length` bytes of tensor `name` starting at byte `start` into `dst`. */
  readInto(name: string, dst: Uint8Array, start = 0): void {
    const t = this.entry(name);
    this.noteRead(name);
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
    this.noteRead(name);
    return readTensorF32(this.entry(name));
  }

  private noteRead(name: string): void {
    if (this.read.has(name)) return;
    this.read.add(name);
    this.onRead?.(this.read.size);
  }

  close(): void {
    for (const fd of this.fds.values()) closeSync(fd);
    this.fds.clear();
  }
}

/** Float dtypes: of float weights, and of affine scales and biases. */
const FLOAT_FORMATS: Record<string, WeightFormat & ScaleFormat> = { F32: 'f32', F16: 'f16', BF16: 'bf16' };

/**
 * Uploads f32 vectors (norm weights, biases), several concatenated into one buffer, which
 * a kernel may also bind as a uniform (the linear layers' fused norm: matvec_input.wgsl).
 * `shift` is added to every value as it loads (Gemma's norms scale by 1 + w).
 */
export function loadVector(device: GPUDevice, ckpt: Checkpoint, sources: VectorSource[], shift = 0): GPUBuffer {
  const parts = sources.map(({ name, length, slice }) => {
    const v = ckpt.readF32(name);
    if (v.length !== length) throw new Error(`${ckpt.dir}: ${name} has ${v.length} values, expected ${length}`);
    return slice ? v.subarray(slice.first, slice.first + slice.length) : v;
  });
  const names = sources.map((s) => s.name);
  const data = new Float32Array(parts.reduce((n, v) => n + v.length, 0));
  let at = 0;
  for (const v of parts) { data.set(v, at); at += v.length; }
  if (shift !== 0) for (let i = 0; i < data.length; i++) data[i]! += shift;
  return filledBuffer(device, data.byteLength, names.join('+'), (dst) => dst.set(new Uint8Array(data.buffer)), true);
}

/**
 * One stored matrix's layout: `<prefix>.weight` [rows, cols] in `format`; for MLX affine
 * weights the stored bit width and group size (`bits`, `groupSize`).
 */
interface StoredMatrix {
  rows: number;
  cols: number;
  format: WeightFormat;
  bits: number;
  groupSize: number;
  scaleFormat?: ScaleFormat;
  /** MXFP4: the suffixes of its blocks' and scales' tensors after the prefix (GPT-OSS's `_blocks`, `_scales`; MLX's `.weight`, `.scales`). */
  mxfp4?: [string, string];
}

/** A vector tensor (a norm's weight, a bias) of `length` values. */
export interface VectorSource {
  name: string;
  length: number;
  /** The tensor's shape where it is not [length] (a conv weight [channels, 1, kernel]); only the value count is checked. */
  shape?: number[];
  /** Only values [first, first + length) of it (one expert's biases of a stacked tensor). */
  slice?: { first: number; length: number };
}

/**
 * A matrix loadMatrix stacks: `<prefix>.weight` of [rows, cols] (cols counts values, however
 * packed), or with `slice` only rows [first, first + rows) of it: one matrix of a fused
 * projection (Phi-3's qkv_proj, gate_up_proj). A tensor of more dimensions counts its leading
 * ones as rows: mlx-lm's stacked experts [experts, rows, cols] are [experts * rows, cols].
 */
export interface MatrixSource {
  prefix: string;
  rows: number;
  cols: number;
  slice?: { first: number; rows: number };
}

function storedMatrix(ckpt: Checkpoint, source: MatrixSource, quant?: Quantization): StoredMatrix & { prefix: string; first: number } {
  const { prefix, slice } = source;
  if (!ckpt.has(`${prefix}.weight`) && ckpt.has(`${prefix}_blocks`)) return mxfp4Matrix(ckpt, source);
  const name = `${prefix}.weight`;
  const t = ckpt.entry(name).info;
  const all = leadingRows(t.shape);
  const stored = t.shape.at(-1)!;
  const first = slice?.first ?? 0;
  const rows = slice?.rows ?? all;
  const m = storedFormat(ckpt, prefix, rows, stored, t.dtype, quant);
  if (t.shape.length < 2 || all !== source.rows || m.cols !== source.cols) {
    throw new Error(`${ckpt.dir}: ${name} holds [${all}, ${m.cols}] values, expected [${source.rows}, ${source.cols}]`);
  }
  if (first + rows > all) throw new Error(`${name}: rows ${first}..${first + rows} of ${all}`);
  return { prefix, first, ...m };
}

/**
 * An MXFP4 matrix as GPT-OSS stores its experts (formats/mxfp4.wgsl): `<prefix>_blocks`
 * [..., rows, cols / 32, 16] uint8, 32 e2m1 codes a block, and `<prefix>_scales` [..., rows,
 * cols / 32] uint8, the e8m0 scale of each block; leading dimensions count as rows.
 */
function mxfp4Matrix(ckpt: Checkpoint, source: MatrixSource): StoredMatrix & { prefix: string; first: number } {
  const { prefix, slice } = source;
  const [blocks, scales] = [ckpt.entry(`${prefix}_blocks`).info, ckpt.entry(`${prefix}_scales`).info];
  const shape = blocks.shape;
  const shapes = `${prefix}_blocks ${blocks.dtype} [${shape.join(', ')}], ${prefix}_scales ${scales.dtype} [${scales.shape.join(', ')}]`;
  if (blocks.dtype !== 'U8' || scales.dtype !== 'U8' || shape.length < 3 || shape.at(-1) !== MXFP4_BLOCK / 2 || scales.shape.join() !== shape.slice(0, -1).join()) {
    throw new Error(`${ckpt.dir}: ${shapes}: not MXFP4 blocks of ${MXFP4_BLOCK} values and their scales`);
  }
  const all = leadingRows(shape.slice(0, -1));
  const cols = shape.at(-2)! * MXFP4_BLOCK;
  if (all !== source.rows || cols !== source.cols) throw new Error(`${ckpt.dir}: ${shapes} hold [${all}, ${cols}] values, expected [${source.rows}, ${source.cols}]`);
  const first = slice?.first ?? 0;
  const rows = slice?.rows ?? all;
  if (first + rows > all) throw new Error(`${prefix}: rows ${first}..${first + rows} of ${all}`);
  return { prefix, first, rows, cols, format: 'mxfp4', bits: 0, groupSize: MXFP4_BLOCK, mxfp4: ['_blocks', '_scales'] };
}

/**
 * An MXFP4 matrix as MLX's mxfp4 mode stores it (mlx-lm's GPT-OSS experts): `<prefix>.weight`
 * uint32 [..., rows, cols / 8], eight e2m1 codes a word from the low bits up (GPT-OSS's
 * blocks, read as words), and `<prefix>.scales` uint8 [..., rows, cols / 32].
 */
function mlxMxfp4(ckpt: Checkpoint, prefix: string, rows: number, words: number): StoredMatrix {
  const scales = ckpt.entry(`${prefix}.scales`).info;
  const weight = ckpt.entry(`${prefix}.weight`).info;
  const cols = words * 8;
  if (scales.dtype !== 'U8' || scales.shape.at(-1)! * MXFP4_BLOCK !== cols || leadingRows(scales.shape) !== leadingRows(weight.shape) || ckpt.has(`${prefix}.biases`)) {
    throw new Error(`${prefix}.weight [${weight.shape.join(', ')}], scales ${scales.dtype} [${scales.shape.join(', ')}]: not MLX mxfp4 (uint8 scales per ${MXFP4_BLOCK} values, no biases)`);
  }
  return { rows, cols, format: 'mxfp4', bits: 0, groupSize: MXFP4_BLOCK, mxfp4: ['.weight', '.scales'] };
}

/** Rows of a tensor of `shape` read as a matrix: the product of all but its last dimension. */
function leadingRows(shape: number[]): number {
  return shape.slice(0, -1).reduce((a, b) => a * b, 1);
}

function storedFormat(ckpt: Checkpoint, prefix: string, rows: number, stored: number, dtype: string, quant?: Quantization): StoredMatrix {
  const name = `${prefix}.weight`;
  const q = moduleQuantization(quant, prefix, ckpt.has(`${prefix}.scales`));
  if (dtype !== 'U32') {
    const format = FLOAT_FORMATS[dtype];
    if (!format) throw new Error(`${name}: dtype ${dtype} is not supported`);
    if (q && ckpt.has(`${prefix}.scales`)) throw new Error(`${name}: ${dtype} weight with scales: not MLX affine packing (packed weights are U32)`);
    return { rows, cols: stored, format, bits: 0, groupSize: 0 };
  }
  if (!q || !ckpt.has(`${prefix}.scales`)) throw new Error(`${name}: packed uint32 weight without quantization config and scales`);
  if (q.mode === 'mxfp4') return mlxMxfp4(ckpt, prefix, rows, stored);
  const [scales, biases] = ['scales', 'biases'].map((what) => ckpt.entry(`${prefix}.${what}`).info);
  const scaleFormat = FLOAT_FORMATS[scales!.dtype];
  if (!scaleFormat || biases!.dtype !== scales!.dtype) throw new Error(`${prefix}: scales / biases dtypes ${scales!.dtype} / ${biases!.dtype} are not one of F32, F16, BF16`);
  // The config's bits and group size must account for the stored shapes exactly, or the
  // weight would load as other numbers.
  const cols = (stored * 32) / q.bits;
  const groups = scales!.shape.at(-1)!;
  const shapes = `${name} [${stored}] words, scales [${scales!.shape.join(', ')}], biases [${biases!.shape.join(', ')}]`;
  if (!Number.isInteger(cols) || cols % 32 !== 0 || groups * q.groupSize !== cols || biases!.shape.at(-1) !== groups || leadingRows(scales!.shape) !== leadingRows(ckpt.entry(name).info.shape) || leadingRows(biases!.shape) !== leadingRows(scales!.shape)) {
    throw new Error(`${shapes}: do not match ${q.bits}-bit, group size ${q.groupSize} rows`);
  }
  return { rows, cols, format: `q${q.bits}`, bits: q.bits, groupSize: q.groupSize, scaleFormat };
}

/** Reads a run's bytes in the loaded layout into dst, from byte `from` of its first row on. */
type RunReader = (dst: Uint8Array, from: number) => void;

/** Rows of one tensor a stacked weight holds in a row: `read` gives them in the loaded layout. */
interface RowRun {
  rows: number;
  read: RunReader;
}

/** Rows a converting reader reads from the file at once. */
const CONVERT_BLOCK_ROWS = 64;

/**
 * A RunReader for rows [first, ...) of `name` stored as rows of `srcRowBytes` and loaded as
 * rows of `dstRowBytes`: `convert(src, dst)` turns one row into the other. Reads and
 * converts CONVERT_BLOCK_ROWS rows at a time, reusing them while the reads stay within.
 */
function convertingReader(ckpt: Checkpoint, name: string, first: number, rows: number, srcRowBytes: number, dstRowBytes: number, convert: (src: Uint8Array, dst: Uint8Array) => void): RunReader {
  let block = -1;
  let src: Uint8Array | undefined;
  let out: Uint8Array | undefined;
  return (dst, from) => {
    src ??= new Uint8Array(CONVERT_BLOCK_ROWS * srcRowBytes);
    out ??= new Uint8Array(CONVERT_BLOCK_ROWS * dstRowBytes);
    for (let o = 0; o < dst.length;) {
      const b = Math.floor((from + o) / (CONVERT_BLOCK_ROWS * dstRowBytes));
      if (b !== block) {
        const n = Math.min(CONVERT_BLOCK_ROWS, rows - b * CONVERT_BLOCK_ROWS);
        ckpt.readInto(name, src.subarray(0, n * srcRowBytes), (first + b * CONVERT_BLOCK_ROWS) * srcRowBytes);
        for (let r = 0; r < n; r++) convert(src.subarray(r * srcRowBytes, (r + 1) * srcRowBytes), out.subarray(r * dstRowBytes, (r + 1) * dstRowBytes));
        block = b;
      }
      const within = from + o - b * CONVERT_BLOCK_ROWS * dstRowBytes;
      const n = Math.min(CONVERT_BLOCK_ROWS * dstRowBytes - within, dst.length - o);
      dst.set(out.subarray(within, within + n), o);
      o += n;
    }
  };
}

/**
 * A row of `from`-bit packed values as `to`-bit ones (widenPacked; copied where the widths
 * are equal), the rest of dst (a padded row's end) zeros.
 */
function widenRow(cols: number, from: QuantBits, to: QuantBits): (src: Uint8Array, dst: Uint8Array) => void {
  const s = new Uint32Array((cols * from) / 32);
  const d = new Uint32Array((cols * to) / 32);
  return (src, dst) => {
    dst.fill(0);
    if (from === to) { dst.set(src); return; }
    new Uint8Array(s.buffer).set(src);
    widenPacked(s, from, d, to, cols);
    dst.set(new Uint8Array(d.buffer));
  };
}

/** A row of per-group values (`valueBytes` each) for groups `times` times smaller: each value repeated. */
function repeatGroups(groups: number, valueBytes: number, times: number): (src: Uint8Array, dst: Uint8Array) => void {
  return (src, dst) => {
    for (let g = 0; g < groups; g++) {
      const v = src.subarray(g * valueBytes, (g + 1) * valueBytes);
      for (let t = 0; t < times; t++) dst.set(v, (g * times + t) * valueBytes);
    }
  };
}

/**
 * Reads bytes [offset, offset + dst.length) of the row-wise concatenation of `runs` (rows
 * of `bytesPerRow` bytes).
 */
function readStacked(runs: RowRun[], bytesPerRow: number, dst: Uint8Array, offset: number): void {
  let start = 0;
  let done = 0;
  for (const run of runs) {
    if (done === dst.length) break;
    const size = run.rows * bytesPerRow;
    const from = offset + done - start;
    if (from < size) {
      const n = Math.min(size - from, dst.length - done);
      run.read(dst.subarray(done, done + n), from);
      done += n;
    }
    start += size;
  }
}

/**
 * The order a weight stacked from `sources` holds their rows in, as runs of
 * (source, first row, rows): each source whole, one after another, or with `block`, the
 * sources taking turns `block` rows at a time.
 */
function stackOrder(sources: Array<{ rows: number }>, block?: number): Array<{ source: number; first: number; rows: number }> {
  if (!block) return sources.map((s, source) => ({ source, first: 0, rows: s.rows }));
  const runs: Array<{ source: number; first: number; rows: number }> = [];
  for (let first = 0; first < sources[0]!.rows; first += block) {
    for (let source = 0; source < sources.length; source++) runs.push({ source, first, rows: block });
  }
  return runs;
}

/**
 * Uploads the matrix `<prefix>.weight` ([rows, cols]) in its stored format: a float dtype,
 * or MLX affine packed uint32 with `<prefix>.scales` / `.biases` beside it. Several prefixes
 * stack their matrices' rows into one weight (same input width), so one dispatch computes
 * them all (Ops.linear writes each source's rows to its own output); affine matrices of
 * different bit widths or group sizes each keep theirs, in parts of their own (a dispatch
 * per part).
 * `glu`: the prefixes are a SwiGLU's gate and up. Where the quantized kernels can apply the
 * SwiGLU themselves (affine formats, rows a multiple of GLU_BLOCK_ROWS), their rows are interleaved
 * in blocks for that (GpuWeight.gluBlock); otherwise they stack as usual.
 * `unit`: every part holds a whole number of units of this many rows (a mixture of experts'
 * stacked experts: each expert's rows in one binding).
 */
export function loadMatrix(device: GPUDevice, limits: { maxBinding: number; maxTextureRows: number }, ckpt: Checkpoint, matrices: MatrixSource[], quant?: Quantization, options: { glu?: boolean; unit?: number } = {}): GpuWeight {
  const sources = matrices.map((m) => storedMatrix(ckpt, m, quant));
  const prefixes = sources.map((s) => (s.first === 0 ? s.prefix : `${s.prefix}[${s.first}:${s.first + s.rows}]`));
  const { cols, scaleFormat } = sources[0]!;
  // Stacked experts of different bit widths or group sizes (`unit`: each expert's matrices
  // side by side) load in the widest format and the smallest group (each value in a wider
  // field, each group's scale and bias repeated), exactly.
  const widest = sources.reduce((a, s) => (s.bits > a.bits ? s : a));
  const format = widest.format;
  const groupSize = Math.min(...sources.map((s) => s.groupSize));
  for (const s of sources) {
    if (s.cols !== cols || isAffine(s.format) !== isAffine(format) || (!isAffine(format) && s.format !== format) || s.scaleFormat !== scaleFormat) {
      throw new Error(`${prefixes.join(' + ')}: matrices of different widths or formats (${sources.map((m) => m.bits ? `${m.bits}-bit` : m.format).join(', ')}) cannot be stacked`);
    }
  }
  const rows = sources.reduce((n, s) => n + s.rows, 0);
  if (isAffine(format) && !options.unit && sources.some((s) => s.bits !== widest.bits || s.groupSize !== groupSize)) {
    // Each matrix at its own width and group size, in parts of its own (WeightPart.format);
    // a gate and up stacked so do not interleave, and take the GLU's own dispatch.
    const each = matrices.map((m) => loadMatrix(device, limits, ckpt, [m], quant));
    let at = 0;
    const parts = each.flatMap((w) => {
      const first = at;
      at += w.rows;
      return w.parts.map((part) => ({ ...part, rowStart: first + part.rowStart, format: w.format as AffineFormat, groupSize: w.groupSize }));
    });
    return { format: each[0]!.format, rows, cols, groupSize: each[0]!.groupSize, scaleFormat, parts, segments: sources.map((s) => s.rows) };
  }
  const glu = options.glu === true && isAffine(format) && sources.length === 2 && sources[0]!.rows === sources[1]!.rows && sources[0]!.rows % GLU_BLOCK_ROWS === 0;
  const order = stackOrder(sources, glu ? GLU_BLOCK_ROWS : undefined);
  const bytesPerRow = rowBytes(format, cols);
  const groupsPerRow = groupSize ? cols / groupSize : 0;
  const valueBytes = scaleFormat ? SCALE_BYTES[scaleFormat] : 0;
  const loadedBits = widest.bits as QuantBits;
  // Each run's rows in the loaded layout: straight from the file where that is how they are
  // stored, else converted a block of rows at a time (widened, or padded to whole texels).
  // MXFP4: the blocks and a scale byte per block (mxfp4Matrix).
  const mxfp4 = format === 'mxfp4';
  const tensorName = (s: StoredMatrix & { prefix: string }, what: 'weight' | 'scales' | 'biases') => (s.mxfp4 ? s.prefix + s.mxfp4[what === 'weight' ? 0 : 1] : `${s.prefix}.${what}`);
  const runs = (what: 'weight' | 'scales' | 'biases'): RowRun[] => order.map((r) => {
    const s = sources[r.source]!;
    const name = tensorName(s, what);
    const first = s.first + r.first;
    if (mxfp4 && what === 'scales') return { rows: r.rows, read: (dst, from) => ckpt.readInto(name, dst, first * groupsPerRow + from) };
    if (what === 'weight') {
      const fileRowBytes = isAffine(format) ? (cols * s.bits) / 8 : bytesPerRow;
      if (fileRowBytes === bytesPerRow) return { rows: r.rows, read: (dst, from) => ckpt.readInto(name, dst, first * bytesPerRow + from) };
      return { rows: r.rows, read: convertingReader(ckpt, name, first, r.rows, fileRowBytes, bytesPerRow, widenRow(cols, s.bits as QuantBits, loadedBits)) };
    }
    const rowBytesOut = groupsPerRow * valueBytes;
    if (s.groupSize === groupSize) return { rows: r.rows, read: (dst, from) => ckpt.readInto(name, dst, first * rowBytesOut + from) };
    const times = s.groupSize / groupSize;
    return { rows: r.rows, read: convertingReader(ckpt, name, first, r.rows, rowBytesOut / times, rowBytesOut, repeatGroups(groupsPerRow / times, valueBytes, times)) };
  });
  const [weights, scales, biases] = [runs('weight'), runs('scales'), runs('biases')];
  const pairRows = 2 * GLU_BLOCK_ROWS;
  // An interleaved weight's parts hold whole gate/up block pairs, an expert weight's whole experts.
  const unit = glu ? pairRows : (options.unit ?? 1);
  const fits = rowsPerPart(format, cols, limits);
  if (unit > fits) throw new Error(`${prefixes[0]}: ${unit} rows of ${rowBytes(format, cols)} bytes must share one binding, which holds ${fits}`);
  const perPart = unit === 1 ? fits : Math.floor(fits / unit) * unit;
  const parts: WeightPart[] = [];
  for (let rowStart = 0; rowStart < rows; rowStart += perPart) {
    const n = Math.min(perPart, rows - rowStart);
    const label = `${prefixes.join('+')}[${rowStart}:${rowStart + n}]`;
    const part: WeightPart = {
      rowStart,
      rows: n,
      data: weightData(device, format, n, cols, label, (dst, offset) => readStacked(weights, bytesPerRow, dst, rowStart * bytesPerRow + offset)),
    };
    if (scaleFormat) {
      // Kept in their stored dtype (formats/affine.wgsl decodes it), scale and bias side by side.
      const groupBytes = groupsPerRow * valueBytes;
      const reader = (runs: RowRun[]) => (dst: Uint8Array, first: number, count: number) =>
        readStacked(runs, groupBytes, dst.subarray(0, count * groupBytes), (rowStart + first) * groupBytes);
      part.affine = affineTexture(device, n, groupsPerRow, SCALE_BYTES[scaleFormat], label, reader(scales), reader(biases));
    }
    if (mxfp4) part.scales = filledBuffer(device, n * groupsPerRow, `${label}.scales`, (dst) => readStacked(scales, groupsPerRow, dst, rowStart * groupsPerRow));
    parts.push(part);
  }
  const weight: GpuWeight = { format, rows, cols, groupSize, scaleFormat, parts };
  const stored = [...new Set(sources.map((s) => (s.bits ? `q${s.bits} g${s.groupSize}` : s.format)))].join('+');
  if (isAffine(format) && stored !== `${format} g${groupSize}`) weight.stored = stored;
  if (sources.length > 1) weight.segments = sources.map((s) => s.rows);
  if (glu) weight.gluBlock = GLU_BLOCK_ROWS;
  return weight;
}
