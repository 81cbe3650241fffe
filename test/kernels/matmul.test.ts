// Ops.linear: Y[m, n] (+)= sum_k X[m, k] W[n, k] (+ bias[n]). Float weights (f32, f16,
// bf16) and MXFP4 run matmul.wgsl with the format's loader; the affine formats (q2-q8) record matvec_q.wgsl (used for
// <= 2 rows: decode; 32 rows per invocation; matvec_q_workgroup.wgsl in the last suite,
// the layout for GPUs) and matmul_q.wgsl (> 2 rows: prefill, register
// tiles of 32 rows x 4 tokens, X read from a texture after a row copy: one copy for
// 256-byte-aligned rows, row by row else), and each
// step dispatches the one its row count selects. Covered: row counts around both tile
// sizes and the matvec/matmul switch, weights split into parts, bias, accumulate,
// per-sequence rows, and the RMSNorm fused into the input (`norm`).
//
// Tolerance: |got - want| <= (K + 2) * 2^-24 * sum_k |X[m,k]| B[n,k] (+ |bias| and |Y0| terms):
// the worst-case bound for an f32 dot product of length K (Higham's gamma_K) plus the
// dequantization roundings, where B = |W| for float formats and |q * scale| + |bias| for
// the affine formats (matvec_q/matmul_q sum scale * dot(q, x) and bias * sum(x) separately, and those
// can cancel). The reference uses the exact values the kernel decodes
// (TestWeight.effective), so the format's own quantization error is not part of it.
// MXFP4 is checked on quantized random weights, and on random codes (all 16, the subnormal
// 0.5 and -0 included) under extreme e8m0 scales, 0 (2^-127, below f32's normal range:
// the kernel may flush those values, which the 1e-30 absolute slack allows) to 254 (2^127,
// with codes up to 1.5: larger ones overflow f32, as they do transformers' dequantization),
// read one element at a time (one-hot X rows) so that no sum overflows.
// With `norm` (fused into matvec_q's input; rmsnorm.wgsl first for the other kernels) the
// reference is exact RMSNorm(X) (eps rounded to f32, as the kernels hold it) times W, and
// the bound is doubled in K on the normed input's magnitudes: the sum of squares (K
// roundings), inverseSqrt (2 ULP) and the weight and scale products add about K/2 + 4
// relative roundings to the dot product's K + 2.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isAffine, type WeightFormat } from '../../src/runtime/kernel-source.js';
import type { LinearNorm } from '../../src/runtime/ops/linear.js';
import { GLU_BLOCK_ROWS, MXFP4_BLOCK, type ScaleFormat } from '../../src/runtime/tensors.js';
import { expectClose, expectPoisoned, Harness, POISON_BITS, randomF32, rng, type TestWeight } from './harness.js';
import { packMxfp4, type Mxfp4 } from '../helpers/mxfp4.js';

let cpu: Harness;
// The same adapter, with Ops told it is a GPU: decode runs matvec_q_workgroup.
let gpuLayout: Harness;
beforeAll(async () => { [cpu, gpuLayout] = [await Harness.open(), await Harness.open({ asGpu: true })]; h = cpu; });
afterAll(() => { cpu?.destroy(); gpuLayout?.destroy(); });
/** The harness the running case uses: `cpu`, but for the suite that switches it (tests run in order). */
let h: Harness;

const U = 2 ** -24;
/** Rows every X/Y buffer has room for; rows past the step's M stay poisoned. */
const MAX_ROWS = 16;

/** X [MAX_ROWS, K] with rows >= M set to NaN poison: a tile that reads past M shows up. */
function inputRows(rand: () => number, M: number, K: number): Float32Array {
  const x = randomF32(rand, MAX_ROWS * K);
  new Uint32Array(x.buffer).fill(POISON_BITS, M * K);
  return x;
}

interface RefOptions { bias?: Float32Array; init?: Float32Array; norm?: { weight: Float32Array; eps: number } }

/** float64 reference and per-element tolerance for rows [0, M). */
function reference(x: Float32Array, w: TestWeight, M: number, o: RefOptions = {}): { want: Float64Array; tol: Float64Array } {
  const { rows: N, cols: K } = w.gpu;
  const want = new Float64Array(M * N);
  const tol = new Float64Array(M * N);
  for (let m = 0; m < M; m++) {
    const row = Float64Array.from(x.subarray(m * K, (m + 1) * K));
    if (o.norm) {
      const inv = 1 / Math.sqrt(row.reduce((a, v) => a + v * v, 0) / K + Math.fround(o.norm.eps));
      for (let k = 0; k < K; k++) row[k] = row[k]! * inv * o.norm.weight[k]!;
    }
    const rounding = o.norm ? 2 * K + 8 : K + 2;
    for (let n = 0; n < N; n++) {
      let s = 0;
      let mag = 0;
      for (let k = 0; k < K; k++) {
        s += row[k]! * w.effective[n * K + k]!;
        mag += Math.abs(row[k]!) * w.bound[n * K + k]!;
      }
      if (o.bias) { s += o.bias[n]!; mag += Math.abs(o.bias[n]!); }
      if (o.init) { s += o.init[m * N + n]!; mag += Math.abs(o.init[m * N + n]!); }
      want[m * N + n] = s;
      tol[m * N + n] = rounding * U * mag + 1e-30;
    }
  }
  return { want, tol };
}

interface Case {
  format: WeightFormat;
  K: number;
  N: number;
  groupSize?: number;
  parts?: number[];
  bias?: boolean;
  accumulate?: boolean;
  /** Row counts replayed through the same recorded dispatches. */
  Ms: number[];
  seed: number;
  /** X without uniform usage: matvec_q reads it through a storage binding. */
  storageX?: boolean;
  /** Affine scales and biases as stored (bf16 by default). */
  scaleFormat?: ScaleFormat;
  /** RMSNorm fused into the input, its weight in a buffer bindable as a uniform, or (`'storage'`) not. */
  norm?: 'uniform' | 'storage';
  /** mxfp4: blocks drawn by this instead of the random weight quantized. */
  mxfp4?: (rand: () => number, rows: number, cols: number) => Mxfp4;
  /** Each X row one-hot (row m of the r-th replay reads column (r M + m) % K): the kernel's decoded elements, one at a time. */
  oneHotX?: boolean;
}

async function runCase(c: Case): Promise<void> {
  const rand = rng(c.seed);
  const { K, N } = c;
  const w = h.weight(randomF32(rand, N * K), N, K, c.format, { groupSize: c.groupSize, parts: c.parts, scaleFormat: c.scaleFormat, mxfp4: c.mxfp4?.(rand, N, K) });
  const bias = c.bias ? randomF32(rand, N) : undefined;
  const xBuf = c.storageX ? h.poisoned(MAX_ROWS * K, POISON_BITS, 'x') : h.activation(MAX_ROWS * K, 'x');
  const yBuf = h.poisoned(MAX_ROWS * N, POISON_BITS, 'y');
  const biasBuf = bias ? h.uploadF32(bias, 'bias') : undefined;
  const norm = c.norm ? { weight: randomF32(rand, K, 0.5, 1.5), eps: 1e-5 } : undefined;
  let normArg: LinearNorm | undefined;
  if (norm) {
    normArg = { weight: c.norm === 'uniform' ? h.activation(K, 'norm') : h.poisoned(K, POISON_BITS, 'norm'), eps: norm.eps, out: h.activation(MAX_ROWS * K, 'xn') };
    h.write(normArg.weight, norm.weight);
  }
  const dispatches = h.ops.linear('test', w.gpu, xBuf, yBuf, { bias: biasBuf, accumulate: c.accumulate, norm: normArg });
  // Per part, one dispatch per kernel; with norm, one rmsnorm before them.
  expect((dispatches.length - (norm ? 1 : 0)) % (c.parts?.length ?? 1)).toBe(0);
  for (const [replay, M] of c.Ms.entries()) {
    const x = inputRows(rand, M, K);
    if (c.oneHotX) for (let m = 0; m < M; m++) x.fill(0, m * K, (m + 1) * K)[m * K + ((replay * M + m) % K)] = 1;
    // Rows of very different scales: the fused norm must bring each to unit RMS itself.
    if (norm) for (let m = 0; m < M; m++) for (let k = 0; k < K; k++) x[m * K + k]! *= 10 ** ((m % 5) - 2);
    h.write(xBuf, x);
    // Y: rows < M hold the residual to accumulate into (or poison), rows >= M poison.
    const y0 = new Float32Array(MAX_ROWS * N);
    new Uint32Array(y0.buffer).fill(POISON_BITS);
    const init = c.accumulate ? randomF32(rand, M * N, -2, 2) : undefined;
    if (init) y0.set(init);
    h.write(yBuf, y0);
    await h.run(dispatches, { tokens: M, seqs: 1 });
    const got = await h.readF32(yBuf, MAX_ROWS * N);
    const { want, tol } = reference(x, w, M, { bias, init, norm });
    expectClose(`${c.format} K=${K} N=${N} M=${M}`, got.subarray(0, M * N), want, (i) => tol[i]!);
    expectPoisoned(`${c.format} M=${M}: rows >= M`, got, M * N, MAX_ROWS * N);
  }
}

// Row counts replayed through one recording: 1 and 2 (matvec for quantized weights), 3
// (first matmul_q count, a partial tile), 5 and 13 (one row past the 4-row tiles of both
// matmul kernels), 8 and 9 (two full tiles and one past), 4, 16.
const MS = [1, 2, 3, 5, 13, 8, 9, 4, 16];

describe('matmul: each format, M = 1, 2, 3, 5, 13, 8, 9, 4, 16', () => {
  for (const format of ['f32', 'f16', 'bf16'] as const) {
    it(`${format} K=172 N=37`, () => runCase({ format, K: 172, N: 37, Ms: MS, seed: 1 }));
  }
  for (const [format, groupSize, K] of [['q4', 32, 160], ['q4', 64, 192], ['q4', 128, 256], ['q8', 32, 160], ['q8', 64, 192], ['q8', 128, 256]] as const) {
    it(`${format} group ${groupSize} K=${K} N=37`, () => runCase({ format, K, N: 37, groupSize, Ms: MS, seed: 2 + groupSize }));
  }
  it('f16 N=133 spans three 64-column workgroups; M=7, 2', () => runCase({ format: 'f16', K: 44, N: 133, Ms: [7, 2], seed: 3 }));
  it('q4 N=1100 spans three 512-row workgroups of each kernel', () =>
    runCase({ format: 'q4', K: 64, N: 1100, groupSize: 32, Ms: [1, 2, 6, 11], seed: 12 }));
  it('q8 N=9 (fewer rows than one matvec invocation covers)', () => runCase({ format: 'q8', K: 64, N: 9, groupSize: 64, Ms: [1, 3], seed: 13 }));
});

/** Random codes; each block's scale e8m0 0, 1, 2, 254 or near 127, blocks at 254 with codes up to 1.5. */
function extremeBlocks(rand: () => number, rows: number, cols: number): Mxfp4 {
  const scales = Uint8Array.from({ length: (rows * cols) / MXFP4_BLOCK }, () => [0, 1, 2, 254, 120 + Math.floor(rand() * 16)][Math.floor(rand() * 5)]!);
  const codes = Uint8Array.from({ length: rows * cols }, (_, i) => {
    const code = Math.floor(rand() * 16);
    return scales[Math.floor(i / MXFP4_BLOCK)] === 254 ? code & 0b1011 : code;
  });
  return packMxfp4(codes, scales);
}

describe('matmul: MXFP4 weights (matmul.wgsl, formats/mxfp4.wgsl)', () => {
  it('quantized random weights, K=160 N=37, in 2 parts [20, 17], with bias', () =>
    runCase({ format: 'mxfp4', K: 160, N: 37, parts: [20, 17], bias: true, Ms: [1, 2, 5, 13], seed: 90 }));
  it('quantized random weights accumulate, K=64 N=133', () => runCase({ format: 'mxfp4', K: 64, N: 133, accumulate: true, Ms: [3, 1], seed: 91 }));
  it('random codes under extreme scales (e8m0 0, 1, 2, 254), every element read through one-hot rows', () =>
    runCase({ format: 'mxfp4', K: 96, N: 37, parts: [30, 7], Ms: [16, 16, 16, 16, 16, 16], seed: 92, mxfp4: extremeBlocks, oneHotX: true }));
});

// The other bit widths MLX packs, read from the stored bit stream itself: 3-, 5- and 6-bit
// fields straddle words, and a 32-value chunk starts at every word of a texel (3- and
// 5-bit: words 0-3 over the row; 2- and 6-bit: 0 and 2). K * bits not a multiple of 128
// leaves rows that end inside a texel (padded: q2 K=96, q3 K=192, q6 K=96); q5 K=256 fills
// its rows. One group size per width: the group's unrolled chunks are the same code for
// every width (the q4/q8 cases above take each group size). The reference decodes the
// stream bit by bit (harness.ts unpackAffine).
describe('matmul: native 2-, 3-, 5- and 6-bit weights', () => {
  for (const [format, groupSize, K] of [['q2', 32, 96], ['q3', 64, 192], ['q5', 128, 256], ['q6', 32, 96]] as const) {
    it(`${format} group ${groupSize} K=${K} N=37`, () => runCase({ format, K, N: 37, groupSize, Ms: [1, 2, 3, 13], seed: 60 + K + groupSize, parts: format === 'q3' ? [20, 17] : undefined }));
  }
});

// matvec_q reads X through a uniform binding when X has uniform usage, as the engine's
// activation buffers do (every case above); else through a storage binding.
describe('q4/q8: scales and biases in each stored format (bf16 above)', () => {
  for (const scaleFormat of ['f32', 'f16'] as const) {
    for (const format of ['q4', 'q8'] as const) {
      it(`${format} ${scaleFormat} scales, group 32, 2 parts`, () =>
        runCase({ format, K: 160, N: 37, groupSize: 32, parts: [17, 20], Ms: [1, 2, 5, 13], seed: 16, scaleFormat }));
    }
  }
});

describe('matvec_q: X through a storage binding', () => {
  for (const format of ['q4', 'q8'] as const) {
    it(`${format} K=192 with a storage-only X`, () => runCase({ format, K: 192, N: 37, groupSize: 64, Ms: [1, 2, 3], seed: 15, storageX: true }));
  }
});

describe('matmul: weight split into parts (rowStart offsets into Y)', () => {
  it('f32 in 3 parts [10, 15, 12]', () => runCase({ format: 'f32', K: 172, N: 37, parts: [10, 15, 12], Ms: [13, 1], seed: 4 }));
  it('bf16 in 2 parts [70, 63], crossing a workgroup boundary', () => runCase({ format: 'bf16', K: 52, N: 133, parts: [70, 63], Ms: [5], seed: 5 }));
  it('q4 group 32 in 3 parts [1, 30, 6]', () => runCase({ format: 'q4', K: 160, N: 37, groupSize: 32, parts: [1, 30, 6], Ms: [13, 5, 1, 2], seed: 6 }));
  it('q8 group 64 in 2 parts [20, 17]', () => runCase({ format: 'q8', K: 192, N: 37, groupSize: 64, parts: [20, 17], Ms: [13, 1], seed: 7 }));
});

describe('matmul: bias and accumulate', () => {
  it('f32 with bias', () => runCase({ format: 'f32', K: 172, N: 37, bias: true, Ms: [13, 1], seed: 8 }));
  it('f16 accumulate adds into existing Y', () => runCase({ format: 'f16', K: 172, N: 37, accumulate: true, Ms: [13, 5, 1], seed: 9 }));
  it('q4 bias + accumulate in 3 parts (bias indexed by global column)', () =>
    runCase({ format: 'q4', K: 160, N: 37, groupSize: 32, parts: [10, 15, 12], bias: true, accumulate: true, Ms: [13, 5, 1, 2], seed: 10 }));
  it('q8 with bias in 2 parts', () => runCase({ format: 'q8', K: 160, N: 37, groupSize: 32, parts: [30, 7], bias: true, Ms: [5, 1], seed: 11 }));
  it('q8 accumulate', () => runCase({ format: 'q8', K: 96, N: 37, groupSize: 32, accumulate: true, Ms: [1, 2, 3, 13], seed: 14 }));
});

describe('matmul: RMSNorm fused into the input (norm)', () => {
  it('f32 with bias and accumulate', () => runCase({ format: 'f32', K: 172, N: 37, Ms: [1, 5, 13], bias: true, accumulate: true, seed: 50, norm: 'uniform' }));
  it('bf16, the norm weight through a storage binding', () => runCase({ format: 'bf16', K: 52, N: 37, Ms: [2, 7], seed: 51, norm: 'storage' }));
  it('q4 group 64 in 2 parts, M = 1, 2, 3, 8, 13', () =>
    runCase({ format: 'q4', K: 192, N: 37, groupSize: 64, parts: [20, 17], Ms: [1, 2, 3, 8, 13], seed: 52, norm: 'uniform' }));
  it('q8 group 32 with bias, the norm weight through a storage binding', () =>
    runCase({ format: 'q8', K: 160, N: 37, groupSize: 32, bias: true, Ms: [1, 4, 9], seed: 53, norm: 'storage' }));
});

/** The LM head: bf16/q4 + bias in 2 parts, tokens = 13, seqs rows (the row count must follow seqs, not tokens). */
async function runPerSeq(format: 'bf16' | 'q4', seqs: number): Promise<void> {
  const rand = rng(20 + seqs);
  const K = format === 'q4' ? 192 : 172;
  const N = 37;
  const w = h.weight(randomF32(rand, N * K), N, K, format, { parts: [25, 12], groupSize: 64 });
  const bias = randomF32(rand, N);
  const x = inputRows(rand, seqs, K);
  const xBuf = h.activation(MAX_ROWS * K, 'head_in');
  h.write(xBuf, x);
  const yBuf = h.poisoned(MAX_ROWS * N, POISON_BITS, 'logits');
  await h.run(h.ops.linear('lm_head', w.gpu, xBuf, yBuf, { perSeq: true, bias: h.uploadF32(bias) }), { tokens: 13, seqs });
  const got = await h.readF32(yBuf, MAX_ROWS * N);
  const { want, tol } = reference(x, w, seqs, { bias });
  expectClose(`${format} perSeq seqs=${seqs}`, got.subarray(0, seqs * N), want, (i) => tol[i]!);
  expectPoisoned(`${format} perSeq seqs=${seqs}: rows >= seqs`, got, seqs * N, MAX_ROWS * N);
}

describe('matmul: perSeq rows (the LM head over sampling sequences)', () => {
  // tokens = 13 while seqs <= 6: the row count (and, for q4/q8, matvec vs matmul_q) must
  // follow seqs, not tokens.
  for (const format of ['bf16', 'q4'] as const) {
    for (const seqs of [1, 2, 3, 6]) {
      it(`${format} + bias in 2 parts, tokens=13, seqs=${seqs}: exactly seqs rows written`, () => runPerSeq(format, seqs));
    }
  }
  for (const format of ['f32', 'q8'] as const) {
    it(`${format}: seqs=0 dispatches nothing`, async () => {
      const K = 64;
      const w = h.weight(randomF32(rng(30), 37 * K), 37, K, format, { groupSize: 32 });
      const yBuf = h.poisoned(MAX_ROWS * 37);
      await h.run(h.ops.linear('lm_head', w.gpu, h.uploadF32(new Float32Array(K)), yBuf, { perSeq: true }), { tokens: 5, seqs: 0 });
      expectPoisoned('seqs=0', await h.readU32(yBuf, MAX_ROWS * 37), 0, MAX_ROWS * 37);
    });
  }
});

async function runStacked(format: WeightFormat, segments: number[], o: { parts?: number[]; bias?: boolean; seed: number }): Promise<void> {
  const rand = rng(o.seed);
  const K = 96;
  const N = segments.reduce((a, b) => a + b, 0);
  const w = h.weight(randomF32(rand, N * K), N, K, format, { groupSize: 32, parts: o.parts });
  w.gpu.segments = segments;
  const bias = o.bias ? randomF32(rand, N) : undefined;
  const xBuf = h.activation(MAX_ROWS * K, 'x');
  const outs = segments.map((n, i) => h.poisoned(MAX_ROWS * n, POISON_BITS, `y${i}`));
  const dispatches = h.ops.linear('stacked', w.gpu, xBuf, outs, { bias: bias && h.uploadF32(bias, 'bias') });
  for (const M of [1, 2, 5, 13]) {
    const x = inputRows(rand, M, K);
    h.write(xBuf, x);
    for (const [i, n] of segments.entries()) h.write(outs[i]!, new Uint32Array(MAX_ROWS * n).fill(POISON_BITS));
    await h.run(dispatches, { tokens: M, seqs: 1 });
    const { want, tol } = reference(x, w, M, { bias });
    let start = 0;
    for (const [i, n] of segments.entries()) {
      const got = await h.readF32(outs[i]!, MAX_ROWS * n);
      const at = (m: number, c: number) => m * N + start + c;
      const wantSeg = Float64Array.from({ length: M * n }, (_, j) => want[at(Math.floor(j / n), j % n)]!);
      const tolSeg = Float64Array.from({ length: M * n }, (_, j) => tol[at(Math.floor(j / n), j % n)]!);
      expectClose(`${format} segment ${i} M=${M}`, got.subarray(0, M * n), wantSeg, (j) => tolSeg[j]!);
      expectPoisoned(`${format} segment ${i} M=${M}: rows >= M`, got, M * n, MAX_ROWS * n);
      start += n;
    }
  }
}

describe('matmul: a stacked weight (q/k/v, gate/up) writes each source matrix to its own output', () => {
  for (const format of ['f32', 'bf16', 'q4', 'q8'] as const) {
    it(`${format}: three segments [16, 8, 8] with bias`, () => runStacked(format, [16, 8, 8], { bias: true, seed: 40 }));
    it(`${format}: segments [13, 7, 17] across 2 parts [20, 17]`, () => runStacked(format, [13, 7, 17], { parts: [20, 17], seed: 41 }));
  }
  it('q4: two segments [600, 520] spanning several workgroups', () => runStacked('q4', [600, 520], { seed: 42 }));
  it('rejects an output count that does not match the segments, and accumulate into segments', () => {
    const w = h.weight(randomF32(rng(43), 24 * 32), 24, 32, 'q4', { groupSize: 32 });
    w.gpu.segments = [8, 16];
    const x = h.activation(MAX_ROWS * 32, 'x');
    const y = h.activation(MAX_ROWS * 16, 'y');
    expect(() => h.ops.linear('bad', w.gpu, x, [y])).toThrow(/1 outputs for a weight stacked from 2/);
    expect(() => h.ops.linear('bad', w.gpu, x, [y, h.activation(MAX_ROWS * 16)], { accumulate: true })).toThrow(/accumulate/);
  });
});

// Ops.gatedLinear: silu(X G^T) * (X U^T). q4/q8 weights loaded with `glu` hold G's and U's
// rows interleaved in blocks of GLU_BLOCK_ROWS, and the kernels apply the SwiGLU to their
// own rows; float weights stack G over U and run glu.wgsl after. Tolerance: the dot
// products' bounds (tg, tu, as above) carried through y = silu(g) u (|silu'| <= 1.1), plus
// exp's 3 + 2|g| ULP and a few roundings of y itself.
async function runGated(format: WeightFormat, I: number, o: { parts?: number[]; norm?: boolean; Ms: number[]; seed: number }): Promise<void> {
  const rand = rng(o.seed);
  const K = 96;
  const [gate, up] = [randomF32(rand, I * K), randomF32(rand, I * K)];
  const interleaved = isAffine(format);
  // Row r of the weight: which matrix and row it holds.
  const source = (r: number) => {
    if (!interleaved) return r < I ? { m: gate, row: r } : { m: up, row: r - I };
    const block = Math.floor(r / GLU_BLOCK_ROWS);
    return { m: block % 2 === 0 ? gate : up, row: Math.floor(block / 2) * GLU_BLOCK_ROWS + (r % GLU_BLOCK_ROWS) };
  };
  const host = new Float32Array(2 * I * K);
  for (let r = 0; r < 2 * I; r++) {
    const { m, row } = source(r);
    host.set(m.subarray(row * K, (row + 1) * K), r * K);
  }
  const w = h.weight(host, 2 * I, K, format, { groupSize: 32, parts: o.parts });
  w.gpu.segments = [I, I];
  if (interleaved) w.gpu.gluBlock = GLU_BLOCK_ROWS;
  const rowOf = (which: Float32Array, j: number) => [...Array(2 * I).keys()].find((r) => source(r).m === which && source(r).row === j)!;
  const norm = o.norm ? { weight: randomF32(rand, K, 0.5, 1.5), eps: 1e-5 } : undefined;
  let normArg: LinearNorm | undefined;
  if (norm) {
    normArg = { weight: h.activation(K, 'norm'), eps: norm.eps, out: h.activation(MAX_ROWS * K, 'xn') };
    h.write(normArg.weight, norm.weight);
  }
  const xBuf = h.activation(MAX_ROWS * K, 'x');
  const outBuf = h.activation(MAX_ROWS * I, 'out');
  const dispatches = h.ops.gatedLinear('gate_up', w.gpu, xBuf, outBuf, h.activation(MAX_ROWS * I, 'up'), { norm: normArg });
  expect(dispatches.length).toBe((o.parts?.length ?? 1) * (interleaved ? 2 : 1) + (interleaved ? 0 : 1) + (norm ? 1 : 0));
  for (const M of o.Ms) {
    const x = inputRows(rand, M, K);
    h.write(xBuf, x);
    h.poison(outBuf, MAX_ROWS * I);
    await h.run(dispatches, { tokens: M, seqs: 1 });
    const got = await h.readF32(outBuf, MAX_ROWS * I);
    const ref = reference(x, w, M, { norm });
    const want = new Float64Array(M * I);
    const tol = new Float64Array(M * I);
    for (let m = 0; m < M; m++) {
      for (let j = 0; j < I; j++) {
        const [gi, ui] = [m * 2 * I + rowOf(gate, j), m * 2 * I + rowOf(up, j)];
        const [g, u] = [ref.want[gi]!, ref.want[ui]!];
        const silu = g / (1 + Math.exp(-g));
        want[m * I + j] = silu * u;
        tol[m * I + j] = 1.1 * Math.abs(u) * ref.tol[gi]! + Math.abs(silu) * ref.tol[ui]! + (8 + 2 * Math.abs(g)) * U * Math.abs(silu * u) + 1e-30;
      }
    }
    expectClose(`${format} gated I=${I} M=${M}`, got.subarray(0, M * I), want, (i) => tol[i]!);
    expectPoisoned(`${format} gated M=${M}: rows >= M`, got, M * I, MAX_ROWS * I);
  }
}

describe('matmul: gated (SwiGLU) projection', () => {

  for (const format of ['q4', 'q8'] as const) {
    it(`${format}: 48 columns (3 blocks of each), M = 1, 2, 3, 5, 9`, () => runGated(format, 48, { Ms: [1, 2, 3, 5, 9], seed: 60 }));
  }
  it('q3: 48 columns, fields straddling words', () => runGated('q3', 48, { Ms: [1, 2, 5], seed: 65 }));
  it('q4: 272 columns over several workgroups, in 2 parts, normed input', () => runGated('q4', 272, { parts: [320, 224], norm: true, Ms: [1, 4, 13], seed: 61 }));
  it('f32 (stacked, then glu.wgsl): 40 columns', () => runGated('f32', 40, { Ms: [1, 5], seed: 62 }));
  it('rejects a part that splits a block pair, and bias', () => {
    const w = h.weight(randomF32(rng(63), 64 * 32), 64, 32, 'q4', { groupSize: 32, parts: [16, 48] });
    w.gpu.segments = [32, 32];
    w.gpu.gluBlock = GLU_BLOCK_ROWS;
    const [x, y] = [h.activation(MAX_ROWS * 32, 'x'), h.activation(MAX_ROWS * 32, 'y')];
    expect(() => h.ops.gatedLinear('bad', w.gpu, x, y, y)).toThrow(/splits a block pair/);
    const whole = h.weight(randomF32(rng(64), 64 * 32), 64, 32, 'q4', { groupSize: 32 });
    whole.gpu.gluBlock = GLU_BLOCK_ROWS;
    expect(() => h.ops.linear('bad', whole.gpu, x, y, { glu: true, bias: h.uploadF32(new Float32Array(64)) })).toThrow(/bias/);
  });
});

// The decode matvec in the GPU layout (matvec_q_workgroup: a workgroup per 16 rows,
// invocations striding over K), run on llvmpipe by telling Ops the adapter is a GPU. Row
// counts 1 and 2 run it; 3 checks that the step still switches to matmul_q.
describe('matvec_q_workgroup: the GPU layout of the decode matvec', () => {
  beforeAll(() => { h = gpuLayout; });
  afterAll(() => { h = cpu; });
  for (const [format, groupSize, K] of [['q4', 32, 160], ['q4', 64, 192], ['q4', 128, 256], ['q8', 32, 160], ['q8', 64, 192], ['q8', 128, 256]] as const) {
    it(`${format} group ${groupSize} K=${K} N=37`, () => runCase({ format, K, N: 37, groupSize, Ms: [1, 2, 3], seed: 70 + groupSize }));
  }
  for (const format of ['q2', 'q3', 'q5', 'q6'] as const) {
    it(`${format} group 64 K=192 N=37 (rows padded to whole texels but for q2 and q6)`, () => runCase({ format, K: 192, N: 37, groupSize: 64, Ms: [1, 2], seed: 90 }));
  }
  it('q4 K=1024 N=1100: more chunks than invocations per row, rows past a block', () =>
    runCase({ format: 'q4', K: 1024, N: 1100, groupSize: 64, Ms: [1, 2], seed: 71 }));
  it('q8 N=9 (fewer rows than one workgroup covers)', () => runCase({ format: 'q8', K: 64, N: 9, groupSize: 64, Ms: [1, 2], seed: 72 }));
  for (const scaleFormat of ['f32', 'f16'] as const) {
    it(`q4 ${scaleFormat} scales in 2 parts`, () => runCase({ format: 'q4', K: 160, N: 37, groupSize: 32, parts: [17, 20], Ms: [1, 2], seed: 73, scaleFormat }));
  }
  it('q8 with a storage-only X', () => runCase({ format: 'q8', K: 192, N: 37, groupSize: 64, Ms: [1, 2], seed: 74, storageX: true }));
  it('q4 bias + accumulate in 3 parts', () =>
    runCase({ format: 'q4', K: 160, N: 37, groupSize: 32, parts: [10, 15, 12], bias: true, accumulate: true, Ms: [1, 2], seed: 75 }));
  it('q4 norm fused, in 2 parts', () => runCase({ format: 'q4', K: 192, N: 37, groupSize: 64, parts: [20, 17], Ms: [1, 2], seed: 76, norm: 'uniform' }));
  it('q8 norm fused, the norm weight through a storage binding, with bias', () =>
    runCase({ format: 'q8', K: 160, N: 37, groupSize: 32, bias: true, Ms: [1, 2], seed: 77, norm: 'storage' }));
  it('q4 LM head: perSeq rows, seqs = 1 and 2 of 13 tokens', async () => { await runPerSeq('q4', 1); await runPerSeq('q4', 2); });
  it('q4 three segments [13, 7, 17] across 2 parts', () => runStacked('q4', [13, 7, 17], { parts: [20, 17], seed: 78 }));
  it('q4 gated: 272 columns in 2 parts, normed input', () => runGated('q4', 272, { parts: [320, 224], norm: true, Ms: [1, 2], seed: 79 }));
  it('q8 gated: 48 columns', () => runGated('q8', 48, { Ms: [1, 2], seed: 80 }));
});
