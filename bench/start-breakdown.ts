// Where a server start's time goes, in one process, for the Qwen3-0.6B-shaped bench
// checkpoint at the server's defaults: opening the adapter, the load (weights uploaded, KV
// cache and activations allocated, pipelines created), then each pipeline's first
// dispatch as the warm-up runs them (llvmpipe compiles a kernel there: from its on-disk
// cache when warm), in the warm-up's order, each timed alone.
//   MESA_SHADER_CACHE_DIR=$(mktemp -d) npx tsx bench/start-breakdown.ts   (cold; again on that folder: warm)
//   BENCH_BITS=3: the 3-bit checkpoint.
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ENGINE_DEFAULTS } from '../src/engine/engine.js';
import { ForwardRunner, type SampleInput } from '../src/engine/forward.js';
import { loadModel } from '../src/models/model.js';
import { openGpu } from '../src/runtime/gpu.js';
import type { Dispatch } from '../src/runtime/program.js';
import { QWEN3_06B, QWEN3_06B_Q3, writeBenchModel } from './bench-model.js';

process.env.EGL_PLATFORM ??= 'surfaceless';
const shape = process.env.BENCH_BITS === '3' ? QWEN3_06B_Q3 : QWEN3_06B;
const dir = writeBenchModel(join(tmpdir(), 'mlxcel-bench', `qwen3-0.6b-${shape.bits}bit`), shape);
const BLOCK = 16;
const slots = ENGINE_DEFAULTS.parallel;
// The server's default per-slot context for this model (engine/load.ts): 2048 tokens.
const perSlot = 2048;

const s = (ms: number) => (ms / 1000).toFixed(2);
let t = performance.now();
const lap = () => {
  const now = performance.now();
  const ms = now - t;
  t = now;
  return ms;
};
const gpu = await openGpu('auto', { quietDawn: true });
console.log(`adapter: ${s(lap())} s; ${shape.label}; MESA_SHADER_CACHE_DIR=${process.env.MESA_SHADER_CACHE_DIR ?? '(default)'}`);
const model = await loadModel(gpu, dir, {
  maxTokens: ENGINE_DEFAULTS.batchSize,
  maxSeqs: slots,
  // The slots' contexts and an equal prompt-cache pool, the first kvInitialTokens allocated.
  kvTokens: 2 * slots * perSlot,
  kvInitialTokens: ENGINE_DEFAULTS.kvInitialTokens,
  kvTypes: { k: ENGINE_DEFAULTS.cacheTypeK, v: ENGINE_DEFAULTS.cacheTypeV },
  maxContext: perSlot,
  blockSize: BLOCK,
});
console.log(`load (${model.weightFormat}, ${model.ops.pipelines.list().length} pipelines created): ${s(lap())} s`);
const runner = new ForwardRunner(model);
const sample: SampleInput = { temperature: 0, topK: 0, topP: 1, minP: 0, pLess: false, xtcThreshold: 0, u: 0 };
const compiled = new Set<GPUComputePipeline>();
const rows: string[] = [];
let total = 0;
// The warm-up's step shapes (forward.ts WARMUP_TOKENS), each pipeline's first dispatch alone.
for (const n of [5, 3, 1]) {
  const chunk = { tokens: new Array<number>(n).fill(0), startPos: 0, table: [0], sample };
  const seen = new Set<GPUComputePipeline>();
  await runner.run([chunk], (d: Dispatch) => {
    if (seen.has(d.pipeline)) return false;
    seen.add(d.pipeline);
    return false;
  });
  for (const pipeline of seen) {
    if (compiled.has(pipeline)) continue;
    compiled.add(pipeline);
    lap();
    let first = true;
    await runner.run([chunk], (d) => {
      const take = first && d.pipeline === pipeline;
      if (take) first = false;
      return take;
    });
    const ms = lap();
    total += ms;
    rows.push(`| ${pipeline.label.split('/')[0]} | ${n} | ${s(ms)} |`);
  }
}
console.log('| pipeline | step tokens | first dispatch (s) |\n|---|---:|---:|');
for (const r of rows) console.log(r);
console.log(`first dispatches: ${s(total)} s in all`);
process.exit(0);
