// Cold compile time of the affine linear kernels per bit width, and what they then take to
// run: for each format, the matvec_q (decode: 1 row) and matmul_q (prefill: 64 rows)
// pipelines of the bench model's gate_proj shape at group size 64, each compile timed at
// its first dispatch (llvmpipe compiles a kernel there) less a second, compiled, dispatch;
// each run time the minimum of ROUNDS (other load only ever adds time). Run with an empty
// shader cache, or the compile figures are cache reads:
//   MESA_SHADER_CACHE_DIR=$(mktemp -d) npx tsx bench/compile-time.ts [q4 q3 q6 ...]
import { openGpu, workDone, type Backend } from '../src/runtime/gpu.js';
import { isAffine, type AffineFormat } from '../src/runtime/kernel-source.js';
import { Ops } from '../src/runtime/ops.js';
import { Program } from '../src/runtime/program.js';
import { affineTexture, storageBuffer, weightData, type GpuWeight } from '../src/runtime/tensors.js';

process.env.EGL_PLATFORM ??= 'surfaceless';
const N = 3072;
const K = 1024;
const GROUP = 64;
const PREFILL = 64;
const ROUNDS = 10;
const formats = (process.argv.length > 2 ? process.argv.slice(2) : ['q4', 'q3', 'q6']) as AffineFormat[];
for (const f of formats) if (!isAffine(f)) throw new Error(`${f}: not an affine format`);

const gpu = await openGpu((process.env.BENCH_BACKEND ?? 'opengles') as Backend, { quietDawn: true });
const device = gpu.device;
const ops = new Ops(gpu);
const x = storageBuffer(device, PREFILL * K * 4, 'x');
const y = storageBuffer(device, PREFILL * N * 4, 'y');
console.log(`adapter: ${gpu.description}; [${N}, ${K}] group ${GROUP}; MESA_SHADER_CACHE_DIR=${process.env.MESA_SHADER_CACHE_DIR ?? '(default)'}`);

/** Milliseconds of one step of `tokens` rows through `program`. */
async function step(program: Program, tokens: number): Promise<number> {
  const shape = { tokens, seqs: tokens, bias: 0 };
  ops.writeStep(shape);
  const enc = device.createCommandEncoder();
  program.encode(enc, shape);
  const t = performance.now();
  device.queue.submit([enc.finish()]);
  await workDone(device.queue);
  return performance.now() - t;
}

console.log('| format | matvec_q compile (s) | matmul_q compile (s) | matvec_q, 1 row (ms) | matmul_q, 64 rows (ms) |\n|---|---:|---:|---:|---:|');
for (const format of formats) {
  const zeros = (dst: Uint8Array) => dst.fill(0);
  const w: GpuWeight = {
    format, rows: N, cols: K, groupSize: GROUP, scaleFormat: 'bf16',
    parts: [{ rowStart: 0, rows: N, data: weightData(device, format, N, K, 'w', zeros), affine: affineTexture(device, N, K / GROUP, 2, 'w', zeros, zeros) }],
  };
  const program = new Program();
  program.add(...ops.linear(format, w, x, y));
  // Tokens 1: matvec_q; more: matmul_q (Ops.linear MATVEC_MAX_ROWS).
  const compile = async (tokens: number) => ((await step(program, tokens)) - (await step(program, tokens))) / 1000;
  const best = async (tokens: number) => {
    let ms = Infinity;
    for (let r = 0; r < ROUNDS; r++) ms = Math.min(ms, await step(program, tokens));
    return ms;
  };
  const [matvec, matmul] = [await compile(1), await compile(PREFILL)];
  const [decode, prefill] = [await best(1), await best(PREFILL)];
  console.log(`| ${format} | ${matvec.toFixed(1)} | ${matmul.toFixed(1)} | ${decode.toFixed(2)} | ${prefill.toFixed(1)} |`);
}
process.exit(0);
