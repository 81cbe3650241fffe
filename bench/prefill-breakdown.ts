// Per-kernel breakdown of one prefill pass of our engine: prefill BENCH_PREFILL tokens (128)
// of a synthetic prompt through ForwardRunner, then replay every dispatch active in that
// shape alone (one submission each, CPU wall time; the OpenGL ES adapter on llvmpipe has no
// timestamp queries), grouped by label with the layer number stripped. The counterpart of
// bench/kernel-breakdown.ts for prefill, where matmul_q and the grouped attention run.
//
// Run alone: npx tsx bench/prefill-breakdown.ts [modelDir]
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ForwardRunner, type SampleInput } from '../src/engine/forward.js';
import { loadModel } from '../src/models/model.js';
import { openGpu, workDone } from '../src/runtime/gpu.js';
import type { StepShape } from '../src/runtime/program.js';
import { writeBenchModel } from './bench-model.js';
import { syntheticPrompt } from './kernel-breakdown.js';

process.env.EGL_PLATFORM ??= 'surfaceless';
const tokens = Number(process.env.BENCH_PREFILL ?? 128);
const dir = writeBenchModel(process.argv[2] ?? join(tmpdir(), 'mlxcel-bench', 'qwen3-0.6b-4bit'));
const gpu = await openGpu('opengles');
// The engine's shapes for parallel 1, contextSize 1024 (src/engine/load.ts).
const model = await loadModel(gpu, dir, { maxTokens: 512, maxSeqs: 1, kvTokens: 2048, maxContext: 1024, blockSize: 16 });
const runner = new ForwardRunner(model);
const table = Array.from({ length: 64 }, (_, i) => i);
const sample: SampleInput = { temperature: 0, topK: 0, topP: 1, minP: 0, pLess: false, xtcThreshold: 0, u: 0 };

// Twice: the first pass also compiles llvmpipe's variants of each kernel.
let passMs = 0;
for (let i = 0; i < 2; i++) {
  const t = performance.now();
  await runner.run([{ tokens: syntheticPrompt(tokens, 7), startPos: 0, table, sample }]);
  passMs = performance.now() - t;
}

// The metadata buffers still hold that pass; replay each dispatch in its shape.
const shape: StepShape = { tokens, seqs: 1, bias: 0 };
model.ops.writeStep(shape);
const groups = new Map<string, { dispatches: number; ms: number }>();
let sum = 0;
for (const d of model.program.dispatches) {
  const [x, y = 1, z = 1] = d.workgroups(shape);
  if (x === 0 || y === 0 || z === 0) continue;
  const t = performance.now();
  const enc = gpu.device.createCommandEncoder();
  model.program.encode(enc, shape, (o) => o === d);
  gpu.device.queue.submit([enc.finish()]);
  await workDone(gpu.device.queue);
  const ms = performance.now() - t;
  const label = d.label.replace(/^model\.layers\.\d+\./, '');
  const g = groups.get(label) ?? { dispatches: 0, ms: 0 };
  g.dispatches++;
  g.ms += ms;
  groups.set(label, g);
  sum += ms;
}
console.log(`adapter: ${gpu.description}; prefill of ${tokens} tokens: ${passMs.toFixed(0)} ms (second pass)`);
console.log('| kernel (label, layer stripped) | dispatches | isolated ms | share |');
console.log('|---|---:|---:|---:|');
for (const [label, g] of [...groups].sort((a, b) => b[1].ms - a[1].ms)) {
  console.log(`| ${label} | ${g.dispatches} | ${g.ms.toFixed(0)} | ${((100 * g.ms) / sum).toFixed(1)}% |`);
}
console.log(`| **sum of isolated dispatches** | | ${sum.toFixed(0)} | 100% |`);
process.exit(0);
