// Check-and-bench for the quantized linear kernels (matvec_q, matmul_q) through Ops.linear,
// on the bench model's layer shapes: every case is first checked against a CPU reference
// over the dequantized weights, then timed. Rows M pick the kernel as the engine does:
// M <= 2 matvec_q, else matmul_q (tiles of 32 rows x 4 tokens).
// matvec_q runs twice: X through a uniform binding (the engine's path) and through a storage
// binding (the fallback, taken when X lacks UNIFORM usage), which is the measured reason
// for the first. Decode also runs in the other adapter kind's layout (Ops told the adapter
// is, or is not, a CPU): matvec_q_workgroup, the GPU layout, on llvmpipe, and matvec_q on a
// GPU, so one run on a GPU machine compares the two.
//
// Timing: each case is one submission of `reps` dispatches, repeated `rounds` times with the
// cases interleaved; the minimum is reported, because other load on a shared machine only
// ever adds time.
//
// Run: npx tsx bench/linear-q.ts   (BENCH_ROUNDS, default 5; BENCH_BACKEND, default opengles)
import { bf16ToF32, f32ToBf16 } from '../src/models/half.js';
import { dequantizeAffine, quantizeAffine } from '../src/models/quantize.js';
import { mapRead, openGpu, workDone, type Backend } from '../src/runtime/gpu.js';
import { Ops } from '../src/runtime/ops.js';
import { Program } from '../src/runtime/program.js';
import { affineTexture, filledBuffer, storageBuffer, weightData, type GpuWeight } from '../src/runtime/tensors.js';

process.env.EGL_PLATFORM ??= 'surfaceless';
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const GROUP = 64;

interface Case {
  name: string;
  N: number;
  K: number;
  M: number;
  uniformX: boolean;
  /** The kernel layouts Ops records: those for a CPU adapter, or for a GPU. */
  layout: 'cpu' | 'gpu';
}

const shapes = [
  { name: 'q_proj', N: 2048, K: 1024 },
  { name: 'gate_proj', N: 3072, K: 1024 },
  { name: 'down_proj', N: 1024, K: 3072 },
  { name: 'lm_head', N: 151936, K: 1024 },
];

const gpu = await openGpu((process.env.BENCH_BACKEND ?? 'opengles') as Backend);
const device = gpu.device;
const opsFor = { cpu: new Ops({ ...gpu, isCpu: true }), gpu: new Ops({ ...gpu, isCpu: false }) };
const adapterLayout = gpu.isCpu ? 'cpu' : 'gpu';
console.log(`adapter: ${gpu.description}`);

// Deterministic pseudo-random values in [-1, 1).
function values(n: number, seed: number): Float32Array {
  const out = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = s / 2 ** 31 - 1;
  }
  return out;
}

/** bf16 scales and biases as the loader stores them (affineTexture). */
function affine(scales: Uint16Array, biases: Uint16Array, rows: number): GPUTexture {
  const groupsPerRow = scales.length / rows;
  const reader = (a: Uint16Array) => (dst: Uint8Array, first: number, count: number) =>
    dst.set(new Uint8Array(a.buffer, a.byteOffset + first * groupsPerRow * 2, count * groupsPerRow * 2));
  return affineTexture(device, rows, groupsPerRow, 2, 'w', reader(scales), reader(biases));
}

function upload(data: Float32Array | Uint32Array | Uint16Array | Uint8Array, label: string): GPUBuffer {
  return filledBuffer(device, data.byteLength, label, (dst) => dst.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength)));
}

async function read(buffer: GPUBuffer, floats: number): Promise<Float32Array> {
  const staging = device.createBuffer({ size: floats * 4, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const enc = device.createCommandEncoder();
  enc.copyBufferToBuffer(buffer, 0, staging, 0, floats * 4);
  device.queue.submit([enc.finish()]);
  const out = new Float32Array(await mapRead(staging));
  staging.destroy();
  return out;
}

interface Prepared {
  c: Case;
  program: Program;
  y: GPUBuffer;
  want: Float64Array;
  /** sum_k |w x| per output: the scale rounding errors grow with. */
  bound: Float64Array;
  weightBytes: number;
  best: number;
}

async function prepare(c: Case, seed: number): Promise<Prepared> {
  const q = quantizeAffine(values(c.N * c.K, seed), c.N, c.K, 4, GROUP);
  // bf16 scales and biases, as mlx-lm stores them and the engine keeps them.
  const scales16 = f32ToBf16(q.scales);
  const biases16 = f32ToBf16(q.biases);
  q.scales.set(bf16ToF32(scales16));
  q.biases.set(bf16ToF32(biases16));
  const w: GpuWeight = {
    format: 'q4', rows: c.N, cols: c.K, groupSize: GROUP, scaleFormat: 'bf16',
    parts: [{
      rowStart: 0, rows: c.N,
      data: weightData(device, 'q4', c.N, c.K, 'w', (dst, at) => dst.set(new Uint8Array(q.packed.buffer, q.packed.byteOffset + at, dst.length))),
      affine: affine(scales16, biases16, c.N),
    }],
  };
  const xHost = values(c.M * c.K, seed + 1);
  // A buffer without UNIFORM usage sends matvec_q down its storage-binding path.
  const x = c.uniformX ? storageBuffer(device, xHost.byteLength, 'x') : upload(xHost, 'x');
  if (c.uniformX) device.queue.writeBuffer(x, 0, xHost);
  const y = storageBuffer(device, c.M * c.N * 4, 'y');
  const program = new Program();
  program.add(...opsFor[c.layout].linear(c.name, w, x, y));

  // Reference over the dequantized weights, accumulated in f64 (only the first rows of the
  // LM head, for time).
  const checkRows = Math.min(c.N, 4096);
  const groups = (checkRows * c.K) / GROUP;
  const wq = dequantizeAffine(q.packed.subarray(0, (checkRows * c.K) / 8), q.scales.subarray(0, groups), q.biases.subarray(0, groups), checkRows, c.K, 4, GROUP);
  const want = new Float64Array(c.M * checkRows);
  const bound = new Float64Array(c.M * checkRows);
  for (let n = 0; n < checkRows; n++) {
    for (let k = 0; k < c.K; k++) {
      const wv = wq[n * c.K + k]!;
      for (let m = 0; m < c.M; m++) {
        const t = wv * xHost[m * c.K + k]!;
        want[m * checkRows + n] += t;
        bound[m * checkRows + n] += Math.abs(t);
      }
    }
  }
  return { c, program, y, want, bound, weightBytes: q.packed.byteLength + scales16.byteLength * 2, best: Infinity };
}

async function run(p: Prepared, reps: number): Promise<number> {
  opsFor[p.c.layout].writeStep({ tokens: p.c.M, seqs: p.c.M, bias: 0 });
  const enc = device.createCommandEncoder();
  for (let r = 0; r < reps; r++) p.program.encode(enc, { tokens: p.c.M, seqs: p.c.M, bias: 0 });
  const t = performance.now();
  device.queue.submit([enc.finish()]);
  await workDone(device.queue);
  return (performance.now() - t) / reps;
}

async function check(p: Prepared): Promise<number> {
  await run(p, 1);
  const { N, K, M } = p.c;
  const got = await read(p.y, M * N);
  const rows = p.want.length / M;
  let worst = 0;
  for (let m = 0; m < M; m++) {
    for (let n = 0; n < rows; n++) {
      const i = m * rows + n;
      const err = Math.abs(got[m * N + n]! - p.want[i]!) / p.bound[i]!;
      if (!(err <= worst)) worst = err;
    }
  }
  // f32 accumulation over K terms: an error far above K * 2^-24 of sum |w x| (or NaN) is a
  // wrong kernel, not rounding.
  if (!(worst < K * 2 ** -24)) throw new Error(`${p.c.name} M=${M}: error ${worst} of sum |w x|`);
  return worst;
}

const cases: Case[] = [];
for (const s of shapes) {
  const other = adapterLayout === 'cpu' ? 'gpu' : 'cpu';
  cases.push({ ...s, M: 1, uniformX: true, layout: adapterLayout }, { ...s, M: 1, uniformX: false, layout: adapterLayout }, { ...s, M: 1, uniformX: true, layout: other });
  for (const M of s.name === 'lm_head' ? [8] : [4, 8, 64]) cases.push({ ...s, M, uniformX: true, layout: adapterLayout });
}
const prepared: Prepared[] = [];
for (const [i, c] of cases.entries()) {
  const p = await prepare(c, 17 + i);
  const err = await check(p);
  console.log(`checked ${c.name} N=${c.N} K=${c.K} M=${c.M}${c.M <= 2 ? (c.uniformX ? ' (uniform X)' : ' (storage X)') : ''} (${c.layout} layout): worst error ${err.toExponential(1)} of sum |w x|`);
  prepared.push(p);
}
for (let round = 0; round < ROUNDS; round++) {
  for (const p of prepared) {
    const first = await run(p, 1);
    const reps = Math.max(1, Math.min(20, Math.round(40 / Math.max(first, 0.1))));
    p.best = Math.min(p.best, await run(p, reps));
  }
}

console.log('\n| layer | N x K | rows M | kernel | ms | ms / row | weight GB/s | GMAC/s |');
console.log('|---|---|---:|---|---:|---:|---:|---:|');
for (const p of prepared) {
  const { c, best } = p;
  const matvec = c.layout === 'cpu' ? 'matvec_q' : 'matvec_q_workgroup';
  const kernel = c.M <= 2 ? `${matvec}, ${c.uniformX ? 'uniform' : 'storage'} X` : 'matmul_q';
  console.log(`| ${c.name} | ${c.N} x ${c.K} | ${c.M} | ${kernel} | ${best.toFixed(2)} | ${(best / c.M).toFixed(3)} | ${(p.weightBytes / best / 1e6).toFixed(2)} | ${((c.N * c.K * c.M) / best / 1e6).toFixed(1)} |`);
}
process.exit(0);
