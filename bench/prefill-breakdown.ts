// Per-kernel breakdown of one prefill pass of our engine: prefill BENCH_PREFILL tokens (128)
// of a synthetic prompt through ForwardRunner, then replay every dispatch active in that
// shape alone (bench/kernel-breakdown.ts's timeDispatchesAlone: CPU wall time, the OpenGL ES
// adapter on llvmpipe has no timestamp queries). The counterpart of kernel-breakdown.ts for
// prefill, where matmul_q and the grouped attention run.
//
// Run alone: npx tsx bench/prefill-breakdown.ts [modelDir]
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ForwardRunner } from '../src/engine/forward.js';
import { loadModel } from '../src/models/model.js';
import { openGpu } from '../src/runtime/gpu.js';
import { writeBenchModel } from './bench-model.js';
import { GREEDY, ONE_SLOT_SHAPES, syntheticPrompt, timeDispatchesAlone } from './kernel-breakdown.js';

process.env.EGL_PLATFORM ??= 'surfaceless';
const tokens = Number(process.env.BENCH_PREFILL ?? 128);
const dir = writeBenchModel(process.argv[2] ?? join(tmpdir(), 'mlxcel-bench', 'qwen3-0.6b-4bit'));
const gpu = await openGpu('opengles');
const model = await loadModel(gpu, dir, ONE_SLOT_SHAPES);
const runner = new ForwardRunner(model);
const table = Array.from({ length: 64 }, (_, i) => i);

// Twice: the first pass also compiles llvmpipe's variants of each kernel.
let passMs = 0;
for (let i = 0; i < 2; i++) {
  const t = performance.now();
  await runner.run([{ tokens: syntheticPrompt(tokens, 7), startPos: 0, table, sample: GREEDY }]);
  passMs = performance.now() - t;
}

// The metadata buffers still hold that pass.
const alone = await timeDispatchesAlone(model, { tokens, seqs: 1, bias: 0 }, 40);
console.log(`adapter: ${gpu.description}; prefill of ${tokens} tokens: ${passMs.toFixed(0)} ms (second pass)`);
console.log('| kernel (label, layer stripped) | dispatches | isolated ms | share |');
console.log('|---|---:|---:|---:|');
for (const g of alone.groups) console.log(`| ${g.label} | ${g.dispatches} | ${g.ms.toFixed(0)} | ${((100 * g.ms) / alone.sumMs).toFixed(1)}% |`);
console.log(`| **sum of isolated dispatches** | ${alone.active} | ${alone.sumMs.toFixed(0)} | 100% |`);
process.exit(0);
