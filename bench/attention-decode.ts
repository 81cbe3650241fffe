// One layer's decode attention on the bench model's shape (16 query heads, 8 KV heads,
// head_dim 128, Qwen3's head norm): everything Ops records for it that runs in a decode
// step (the rotary embedding and KV append, then attention), timed at several context
// lengths, for this checkout and, with A_DIR, another one, on one device with the trees'
// cases interleaved. A tree's Ops is used as that tree defines it: before 9f1170d
// Ops.attention took (q, kCache, vCache, out, shape, meta) and the caches were buffers;
// before the KV types (--cache-type-k/-v) kvCacheTexture took no type and the inputs named
// kCache and vCache. This checkout runs with f16 and with f32 caches.
// This checkout also runs in the other adapter kind's layout (Ops told the adapter is, or
// is not, a CPU): attention_decode_workgroup.wgsl, the GPU layout, on llvmpipe, and
// attention.wgsl on a GPU, so one run on a GPU machine compares the two.
//
// Timing: each case is one submission of `reps` copies of its dispatches; per round the
// difference between 300 and 100 copies, over 200, cancels the submission's fixed cost.
// The median over rounds is reported.
//
// Run: [A_DIR=/tmp/ab-base] [TOKENS=1] [BENCH_ROUNDS=7] [BENCH_BACKEND=vulkan] npx tsx bench/attention-decode.ts
import { resolve } from 'node:path';
import { openGpu, workDone, type Backend } from '../src/runtime/gpu.js';
import type { Dispatch, StepShape } from '../src/runtime/program.js';

process.env.EGL_PLATFORM ??= 'surfaceless';
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7);
const TOKENS = Number(process.env.TOKENS ?? 1);
const CONTEXTS = [16, 120, 500];
const heads = 16;
const kvHeads = 8;
const headDim = 128;
const blockSize = 16;

const gpu = await openGpu((process.env.BENCH_BACKEND ?? 'opengles') as Backend);
const device = gpu.device;
const buffer = (words: number, value: (i: number) => number) => {
  const b = device.createBuffer({ size: words * 4, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST });
  device.queue.writeBuffer(b, 0, Float32Array.from({ length: words }, (_, i) => value(i)));
  return b;
};
const words = (a: number[]) => {
  const b = device.createBuffer({ size: Math.max(16, a.length * 4), usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST });
  device.queue.writeBuffer(b, 0, Uint32Array.from(a));
  return b;
};
const values = (i: number) => Math.sin(i * 0.37) * 0.5;

/**
 * The decode-step dispatches of one layer's attention at context `ctx`, built with the Ops of
 * the tree in `dir` (told the adapter is the other kind with `otherLayout`).
 */
async function layer(dir: string, ctx: number, otherLayout: boolean, kv?: 'f32' | 'f16'): Promise<{ dispatches: Dispatch[]; shape: StepShape }> {
  const { Ops } = await import(`${dir}/src/runtime/ops.ts`);
  const tensors = await import(`${dir}/src/runtime/tensors.ts`);
  const ops = new Ops(otherLayout ? { ...gpu, isCpu: !gpu.isCpu } : gpu);
  const shape = { tokens: TOKENS, seqs: TOKENS, bias: 0 };
  ops.writeStep(shape);
  const blocksPerSeq = Math.ceil((ctx + 1) / blockSize);
  const meta = {
    tokenPos: words(Array(TOKENS).fill(ctx)),
    tokenTable: words(Array.from({ length: TOKENS }, (_, m) => m * blocksPerSeq)),
    blockTable: words(Array.from({ length: TOKENS * blocksPerSeq }, (_, i) => i)),
  };
  const cacheFloats = TOKENS * blocksPerSeq * blockSize * kvHeads * headDim;
  const cache = (label: string) => {
    if (!tensors.kvCacheTexture) return buffer(cacheFloats, values);
    return kv ? tensors.kvCacheTexture(device, cacheFloats / 4, kv, label) : tensors.kvCacheTexture(device, cacheFloats / 4, label);
  };
  const [kCache, vCache] = [cache('k_cache'), cache('v_cache')];
  const a = {
    q: buffer(TOKENS * heads * headDim, values), k: buffer(TOKENS * kvHeads * headDim, values), v: buffer(TOKENS * kvHeads * headDim, values),
    heads, kvHeads, blockSize, ...(kv ? { cache: { k: kCache, v: vCache } } : { kCache, vCache }),
  };
  const out = buffer(TOKENS * heads * headDim, () => 0);
  const rope = { headDim, invFreq: buffer(headDim / 2, (i) => 1 / 1e6 ** ((2 * i) / headDim)), headNorm: buffer(2 * headDim, () => 1), eps: 1e-6 };
  const scale = 1 / Math.sqrt(headDim);
  const all: Dispatch[] = tensors.kvCacheTexture
    ? ops.attention('layer', a, out, { ...rope, scale }, meta)
    : [ops.ropeKvWrite('layer.rope_kv_write', a, rope, meta), ...ops.attention(a.q, kCache, vCache, out, { heads, kvHeads, headDim, blockSize, scale }, meta)];
  return { dispatches: all.filter((d) => d.workgroups(shape)[0] > 0), shape };
}

async function time(c: { dispatches: Dispatch[]; shape: StepShape }, reps: number): Promise<number> {
  const encoder = device.createCommandEncoder();
  const pass = encoder.beginComputePass();
  for (let i = 0; i < reps; i++) {
    for (const d of c.dispatches) {
      pass.setPipeline(d.pipeline);
      pass.setBindGroup(0, d.bindGroup);
      pass.dispatchWorkgroups(...d.workgroups(c.shape));
    }
  }
  pass.end();
  const t = performance.now();
  device.queue.submit([encoder.finish()]);
  await workDone(device.queue);
  return performance.now() - t;
}

const variants: Array<{ dir: string; otherLayout: boolean; kv?: 'f32' | 'f16' }> = [
  ...(process.env.A_DIR ? [{ dir: resolve(process.env.A_DIR), otherLayout: false }] : []),
  { dir: resolve('.'), otherLayout: false, kv: 'f32' },
  { dir: resolve('.'), otherLayout: false, kv: 'f16' },
  { dir: resolve('.'), otherLayout: true, kv: 'f16' },
];
const cases = [];
for (const ctx of CONTEXTS) {
  for (const v of variants) {
    const c = await layer(v.dir, ctx, v.otherLayout, v.kv);
    await time(c, 5);
    const layout = gpu.isCpu !== v.otherLayout ? 'CPU' : 'GPU';
    cases.push({ name: `${v.dir}, ${layout} layout${v.kv ? `, ${v.kv} KV` : ''}`, ctx, c, us: [] as number[] });
  }
}
for (let r = 0; r < ROUNDS; r++) {
  for (const k of cases) {
    const short = await time(k.c, 100);
    const long = await time(k.c, 300);
    k.us.push(((long - short) / 200) * 1000);
  }
}
const median = (a: number[]) => [...a].sort((x, y) => x - y)[a.length >> 1]!;
console.log(`${gpu.description}; ${TOKENS} decode token(s), ${heads}/${kvHeads} heads, head_dim ${headDim}, median of ${ROUNDS} rounds\n`);
console.log(`| tree | context | dispatches | us per layer |\n|---|---:|---:|---:|`);
for (const k of cases) console.log(`| ${k.name} | ${k.ctx} | ${k.c.dispatches.length} | ${median(k.us).toFixed(1)} |`);
process.exit(0);
