// The adapter's arithmetic ceiling for our kernels: multiply-adds per second with no memory
// traffic at all, in the shape our matmul kernels compute (each invocation keeps many
// independent f32 running sums in registers). On llvmpipe a WGSL fma() becomes a multiply
// and an add (Mesa's NIR options lower ffma), so this is the rate of those pairs, and no
// quantized matmul can beat it: it bounds prefill, time to first token and batched decode.
//
// Kernel: CHAINS (16) running sums per invocation, each updated as a = a * m + x for ITERS
// iterations (four updates of each sum per iteration, so the loop's own counter costs
// little), written out at the end so nothing is dead. Dispatches of WORKGROUPS x 64
// invocations; one submission of REPS dispatches, timed as the difference between 2 x REPS
// and REPS copies to cancel the submission's fixed cost; the best of ROUNDS rounds.
//
// Run: npx tsx bench/arith-peak.ts   (BENCH_ROUNDS, default 5; BENCH_BACKEND, default
// opengles; LP_NATIVE_VECTOR_WIDTH and LP_NUM_THREADS pass through to llvmpipe)
import { openGpu, workDone, type Backend } from '../src/runtime/gpu.js';

process.env.EGL_PLATFORM ??= 'surfaceless';
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const CHAINS = 16;
const ITERS = 2048;
const UPDATES_PER_ITER = 4;
const WORKGROUPS = 64;
const INVOCATIONS = WORKGROUPS * 64;
const REPS = 8;

const sums = Array.from({ length: CHAINS / 4 }, (_, j) => `a${j}`);
const code = `
@group(0) @binding(0) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let s = f32(gid.x) * 1e-7;
  let x = vec4<f32>(s, 2.0 * s, 3.0 * s, 4.0 * s);
  let m = vec4<f32>(0.999, 0.998, 0.997, 0.996);
${sums.map((a, j) => `  var ${a} = vec4<f32>(f32(${j}));`).join('\n')}
  for (var i = 0u; i < ${ITERS}u; i++) {
${Array.from({ length: UPDATES_PER_ITER }, () => sums.map((a) => `    ${a} = fma(${a}, m, x);`).join('\n')).join('\n')}
  }
  let t = ${sums.join(' + ')};
  out[gid.x] = t.x + t.y + t.z + t.w;
}`;

const gpu = await openGpu((process.env.BENCH_BACKEND ?? 'opengles') as Backend);
const device = gpu.device;
const out = device.createBuffer({ size: INVOCATIONS * 4, usage: GPUBufferUsage.STORAGE });
const pipeline = device.createComputePipeline({ layout: 'auto', compute: { module: device.createShaderModule({ code }), entryPoint: 'main' } });
const bindGroup = device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries: [{ binding: 0, resource: { buffer: out } }] });

async function submission(copies: number): Promise<number> {
  const t0 = performance.now();
  const encoder = device.createCommandEncoder();
  const pass = encoder.beginComputePass();
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bindGroup);
  for (let i = 0; i < copies; i++) pass.dispatchWorkgroups(WORKGROUPS);
  pass.end();
  device.queue.submit([encoder.finish()]);
  await workDone(device.queue);
  return performance.now() - t0;
}

await submission(1);
let best = Infinity;
for (let r = 0; r < ROUNDS; r++) best = Math.min(best, ((await submission(2 * REPS)) - (await submission(REPS))) / REPS);
const macs = INVOCATIONS * ITERS * UPDATES_PER_ITER * CHAINS;
console.log(`adapter: ${gpu.description}`);
console.log(`${(macs / 1e6).toFixed(0)} M multiply-adds per dispatch in ${best.toFixed(2)} ms: ${(macs / best / 1e6).toFixed(1)} GMAC/s`);
