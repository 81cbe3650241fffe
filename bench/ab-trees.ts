// A/B of two checkouts' whole forward pass in one process: each source tree (A_DIR, B_DIR)
// loads the bench model with its own code and device, and rounds alternate between them
// (in flipped order every other round), each round a 16-token prefill and 12 decode steps
// (the last 10 timed) per side. One process and interleaved rounds keep this VM's speed
// drift (20-30% over minutes) out of the comparison, which separate runs of
// bench/kernel-breakdown.ts do not. Both sides must produce the same tokens. The second
// side has read 1-2% slower than the first in runs with the sides swapped, so for small
// differences run both orders and take the geometric mean of the two ratios.
//
// A checkout to compare against: git worktree add /tmp/ab-base <commit> && ln -s
// "$PWD/node_modules" /tmp/ab-base/node_modules
// Run alone: A_DIR=/tmp/ab-base [B_DIR=.] [SEQS=1] [ROUNDS=12] npx tsx bench/ab-trees.ts
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { writeBenchModel } from './bench-model.js';
import { GREEDY, ONE_SLOT_SHAPES, syntheticPrompt } from './kernel-breakdown.js';

process.env.EGL_PLATFORM ??= 'surfaceless';
const dirs = [process.env.A_DIR, process.env.B_DIR ?? '.'].map((d) => {
  if (!d) throw new Error('set A_DIR to the checkout to compare against');
  return resolve(d);
});
const seqs = Number(process.env.SEQS ?? 1);
const rounds = Number(process.env.ROUNDS ?? 12);
const promptLen = 16;
const decodeSteps = 12;
const modelDir = writeBenchModel(join(tmpdir(), 'mlxcel-bench', 'qwen3-0.6b-4bit'));

interface Runner { run(seqs: Array<{ tokens: number[]; startPos: number; table: number[]; sample: typeof GREEDY }>): Promise<Array<{ token: number }>> }
interface Side { dir: string; runner: Runner; decode: number[]; prefill: number[]; tokens?: number[] }

const { kvTokens, blockSize, maxContext } = ONE_SLOT_SHAPES;
const blocksEach = Math.min(maxContext / blockSize, Math.floor(kvTokens / blockSize / seqs));
const tables = Array.from({ length: seqs }, (_, s) => Array.from({ length: blocksEach }, (_, i) => s * blocksEach + i));
const sides: Side[] = [];
for (const dir of dirs) {
  const { openGpu } = await import(`${dir}/src/runtime/gpu.ts`);
  const { loadModel } = await import(`${dir}/src/models/model.ts`);
  const { ForwardRunner } = await import(`${dir}/src/engine/forward.ts`);
  const model = await loadModel(await openGpu('opengles'), modelDir, { ...ONE_SLOT_SHAPES, maxSeqs: seqs });
  sides.push({ dir, runner: new ForwardRunner(model), decode: [], prefill: [] });
}

async function round(side: Side): Promise<void> {
  const t0 = performance.now();
  let next = (await side.runner.run(tables.map((table, s) => ({ tokens: syntheticPrompt(promptLen, 7 + s), startPos: 0, table, sample: GREEDY })))).map((r) => r.token);
  side.prefill.push(performance.now() - t0);
  const tokens = [next[0]!];
  for (let i = 0; i < decodeSteps; i++) {
    const t = performance.now();
    next = (await side.runner.run(tables.map((table, s) => ({ tokens: [next[s]!], startPos: promptLen + i, table, sample: GREEDY })))).map((r) => r.token);
    if (i >= 2) side.decode.push(performance.now() - t);
    tokens.push(next[0]!);
  }
  side.tokens ??= tokens;
}

for (let r = 0; r < rounds; r++) for (const side of r % 2 ? [...sides].reverse() : sides) await round(side);
const median = (a: number[]) => [...a].sort((x, y) => x - y)[a.length >> 1]!;
for (const s of sides) {
  console.log(`${s.dir}: decode step median ${median(s.decode).toFixed(1)} ms, prefill (${promptLen} tokens x ${seqs}) median ${median(s.prefill).toFixed(1)} ms`);
}
const [a, b] = sides as [Side, Side];
console.log(`B / A: decode ${(median(b.decode) / median(a.decode)).toFixed(3)}, prefill ${(median(b.prefill) / median(a.prefill)).toFixed(3)}; same tokens: ${a.tokens!.join() === b.tokens!.join()}`);
process.exit(0);
