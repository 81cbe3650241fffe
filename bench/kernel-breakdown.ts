// Per-kernel breakdown of one decode step of our engine: every dispatch of the recorded
// forward pass (LoadedModel.program) timed in isolation by CPU wall time (the OpenGL ES
// adapter on llvmpipe has no timestamp queries), grouped by label with the layer number
// stripped, against the measured time of a whole decode step. Issue 3 wants the step
// within 15% of the sum of its kernels' isolated times.
//
// Method: load the model as loadEngine does (one slot), then in each of `rounds` rounds:
// prefill a short prompt, decode 2 + `decodeSteps` tokens through ForwardRunner (timing each
// step: the engine's own per-step path, writes + one submission + readback of the token
// id); replay the whole program in one submission with no readback (the GPU-side step);
// and, with the batch metadata of the last decode step still in place, replay each
// dispatch alone: one warm-up submission, then `reps` and 2 x `reps` copies of it in one
// command buffer each, one wait each; the difference / reps. The step is compared with the
// isolated sum of its own round: this VM's speed drifts by 20-30% over tens of seconds
// (whole rounds of decode steps at 90 or at 115 ms), which a step timed minutes apart from
// the sum passes straight into the ratio.
//
// Caveat: a dispatch repeated alone finds its weights in cache more often than in the full
// step, so isolated times can undercount memory-bound kernels.
//
// With BENCH_SEQS=N (option `seqs`) every step runs N sequences side by side, as the
// engine's batched decode does with N streams: the same prompt length each, one token per
// sequence per decode step.
//
// Run alone: npx tsx bench/kernel-breakdown.ts [modelDir]   (BENCH_SEQS, default 1)
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ForwardRunner, type SampleInput } from '../src/engine/forward.js';
import { loadModel, type LoadedModel } from '../src/models/model.js';
import { openGpu, workDone, type Backend } from '../src/runtime/gpu.js';
import type { Dispatch, StepShape } from '../src/runtime/program.js';
import { writeBenchModel } from './bench-model.js';

export interface KernelGroup {
  /** Label with `model.layers.N.` stripped. */
  label: string;
  /** Dispatches that ran in the decode shape (the other variant of a linear has 0 workgroups). */
  dispatches: number;
  /** Sum of their isolated times per step. */
  ms: number;
}

export interface LogitCheck {
  nonFinite: number;
  min: number;
  max: number;
  mean: number;
  std: number;
}

export interface KernelBreakdown {
  adapter: string;
  /** Per label: the median over rounds of its isolated time per step. */
  groups: KernelGroup[];
  /** Sum over every dispatch of its isolated time: the median over rounds. */
  sumIsolatedMs: number;
  /** Dispatches recorded / active in the decode shape. */
  dispatchesRecorded: number;
  dispatchesActive: number;
  /** Median and mean of ForwardRunner.run for one decode token (the engine's step), all rounds. */
  stepMedianMs: number;
  stepMeanMs: number;
  steps: number;
  /**
   * Each round's step median over its own isolated sum, and their median: this VM's speed
   * drifts by 20-30% over tens of seconds, so a step and a sum compare only when measured
   * side by side.
   */
  roundRatios: number[];
  stepVsSum: number;
  /** Context length (positions) over the timed steps. */
  positions: [number, number];
  /** The whole program in one submission, no readback: median over rounds. */
  replayMs: number;
  /** Logits after the prefill and after the last decode step. */
  logitsAfterPrefill: LogitCheck;
  logitsAfterDecode: LogitCheck;
  loadMs: number;
}

export interface BreakdownOptions {
  backend?: Backend;
  promptTokens?: number;
  /** Rounds of (decode steps, whole-program replays, isolated dispatches). */
  rounds?: number;
  /** Timed decode steps per round. */
  decodeSteps?: number;
  /** Sequences decoded side by side (a batched step with one token each). */
  seqs?: number;
  /** Aim for this much wall time per isolated dispatch measurement (ms). */
  targetMsPerDispatch?: number;
  log?: (msg: string) => void;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

function checkLogits(x: Float32Array): LogitCheck {
  let nonFinite = 0, min = Infinity, max = -Infinity, sum = 0, sq = 0, n = 0;
  for (const v of x) {
    if (!Number.isFinite(v)) { nonFinite++; continue; }
    if (v < min) min = v;
    if (v > max) max = v;
    sum += v; sq += v * v; n++;
  }
  const mean = n ? sum / n : NaN;
  return { nonFinite, min, max, mean, std: n ? Math.sqrt(Math.max(0, sq / n - mean * mean)) : NaN };
}

/** The engine's model shapes for parallel 1, contextSize 1024 (src/engine/load.ts). */
export const ONE_SLOT_SHAPES = { maxTokens: 512, maxSeqs: 1, kvTokens: 2048, maxContext: 1024, blockSize: 16 };
/** Greedy sampling, as the bench requests use. */
export const GREEDY: SampleInput = { temperature: 0, topK: 0, topP: 1, minP: 0, pLess: false, xtcThreshold: 0, u: 0 };

/**
 * Replays every dispatch active in `shape` alone, with the batch metadata of the last pass
 * still in place: one warm-up submission, then `reps` and 2 x `reps` copies in one command
 * buffer each (`reps` for about `targetMs`), one wait each; the time per dispatch is the
 * difference over `reps`, which cancels what a submission and its wait cost once (about a
 * millisecond: 20 us per dispatch at 50 copies). Grouped by label, layer number stripped.
 */
export async function timeDispatchesAlone(model: LoadedModel, shape: StepShape, targetMs: number): Promise<{ groups: KernelGroup[]; sumMs: number; active: number }> {
  const device = model.ops.gpu.device;
  model.ops.writeStep(shape);
  const timeCopies = async (d: Dispatch, copies: number) => {
    const t = performance.now();
    const enc = device.createCommandEncoder();
    for (let r = 0; r < copies; r++) model.program.encode(enc, shape, (x) => x === d);
    device.queue.submit([enc.finish()]);
    await workDone(device.queue);
    return performance.now() - t;
  };
  const groups = new Map<string, KernelGroup>();
  let sumMs = 0;
  let active = 0;
  for (const d of model.program.dispatches) {
    const [x, y = 1, z = 1] = d.workgroups(shape);
    if (x === 0 || y === 0 || z === 0) continue;
    active++;
    const first = await timeCopies(d, 1); // warm-up (and a first estimate)
    const reps = Math.max(3, Math.min(50, Math.round(targetMs / Math.max(first, 0.05))));
    const once = await timeCopies(d, reps);
    const twice = await timeCopies(d, 2 * reps);
    const ms = Math.max(0, twice - once) / reps;
    const label = d.label.replace(/^model\.layers\.\d+\./, '');
    const g = groups.get(label) ?? { label, dispatches: 0, ms: 0 };
    g.dispatches++;
    g.ms += ms;
    groups.set(label, g);
    sumMs += ms;
  }
  return { groups: [...groups.values()].sort((a, b) => b.ms - a.ms), sumMs, active };
}

/** Token ids for a synthetic prompt: ordinary vocabulary entries, no special tokens. */
export function syntheticPrompt(n: number, salt = 0): number[] {
  return Array.from({ length: n }, (_, i) => 1000 + ((i * 7919 + salt * 104729) % 100000));
}

export async function kernelBreakdown(modelDir: string, o: BreakdownOptions = {}): Promise<KernelBreakdown> {
  const log = o.log ?? (() => {});
  const promptLen = o.promptTokens ?? 16;
  const rounds = o.rounds ?? 3;
  const decodeSteps = o.decodeSteps ?? 8;
  const seqs = o.seqs ?? 1;
  const target = o.targetMsPerDispatch ?? 20;
  const t0 = performance.now();
  const gpu = await openGpu(o.backend ?? 'opengles');
  const model = await loadModel(gpu, modelDir, { ...ONE_SLOT_SHAPES, maxSeqs: seqs });
  const loadMs = performance.now() - t0;
  const runner = new ForwardRunner(model);
  const device = gpu.device;
  // Each sequence its own KV blocks: the pool's blocks split evenly, at most a context's worth.
  const { kvTokens, blockSize, maxContext } = ONE_SLOT_SHAPES;
  const blocksEach = Math.min(maxContext / blockSize, Math.floor(kvTokens / blockSize / seqs));
  if (promptLen + 2 + decodeSteps > blocksEach * blockSize) throw new Error(`${seqs} sequences of ${promptLen + 2 + decodeSteps} tokens do not fit the KV pool`);
  const tables = Array.from({ length: seqs }, (_, s) => Array.from({ length: blocksEach }, (_, i) => s * blocksEach + i));
  const sample = GREEDY;

  const prompts = tables.map((_, s) => syntheticPrompt(promptLen, 7 + s));
  let tokens: number[] = [];
  let pos = 0;
  const decode = async () => {
    const t = performance.now();
    tokens = (await runner.run(tables.map((table, s) => ({ tokens: [tokens[s]!], startPos: pos, table, sample })))).map((r) => r.token);
    pos++;
    return performance.now() - t;
  };
  // The replays below leave garbage in the activations and the KV cache (in-place and
  // accumulating kernels run many times over), so each round starts the sequence over:
  // its prefill and decode steps rewrite every position they attend to.
  const shape: StepShape = { tokens: seqs, seqs, bias: 0 };
  const stepTimes: number[] = [];
  const replays: number[] = [];
  const sums: number[] = [];
  const roundRatios: number[] = [];
  const byLabel = new Map<string, { dispatches: number; ms: number[] }>();
  let active = 0;
  let logitsAfterPrefill: LogitCheck | undefined;
  let logitsAfterDecode: LogitCheck | undefined;
  let firstPos = 0;
  for (let r = 0; r < rounds; r++) {
    tokens = (await runner.run(tables.map((table, s) => ({ tokens: prompts[s]!, startPos: 0, table, sample })))).map((r) => r.token);
    logitsAfterPrefill ??= checkLogits(await runner.readLogits(seqs));
    pos = promptLen;
    for (let i = 0; i < 2; i++) await decode();
    firstPos = pos;
    const steps: number[] = [];
    for (let i = 0; i < decodeSteps; i++) steps.push(await decode());
    stepTimes.push(...steps);
    logitsAfterDecode = checkLogits(await runner.readLogits(seqs));
    // The metadata buffers hold the last decode step (one token per sequence at position pos - 1).
    model.ops.writeStep(shape);
    const roundReplays: number[] = [];
    for (let i = 0; i < 3; i++) {
      const t = performance.now();
      const enc = device.createCommandEncoder();
      model.program.encode(enc, shape);
      device.queue.submit([enc.finish()]);
      await workDone(device.queue);
      roundReplays.push(performance.now() - t);
    }
    replays.push(median(roundReplays));
    const alone = await timeDispatchesAlone(model, shape, target);
    active = alone.active;
    sums.push(alone.sumMs);
    roundRatios.push(median(steps) / alone.sumMs);
    for (const g of alone.groups) {
      const e = byLabel.get(g.label) ?? { dispatches: g.dispatches, ms: [] };
      e.ms.push(g.ms);
      byLabel.set(g.label, e);
    }
    log(`round ${r + 1}: decode step median ${median(steps).toFixed(1)} ms, isolated sum ${alone.sumMs.toFixed(1)} ms`);
  }
  const groups = [...byLabel].map(([label, e]) => ({ label, dispatches: e.dispatches, ms: median(e.ms) })).sort((a, b) => b.ms - a.ms);
  return {
    adapter: gpu.description,
    groups,
    sumIsolatedMs: median(sums),
    dispatchesRecorded: model.program.dispatches.length,
    dispatchesActive: active,
    stepMedianMs: median(stepTimes),
    stepMeanMs: stepTimes.reduce((a, b) => a + b, 0) / stepTimes.length,
    steps: stepTimes.length,
    roundRatios,
    stepVsSum: median(roundRatios),
    positions: [firstPos, pos - 1],
    replayMs: median(replays),
    logitsAfterPrefill: logitsAfterPrefill!,
    logitsAfterDecode: logitsAfterDecode!,
    loadMs,
  };
}

export function breakdownMarkdown(b: KernelBreakdown): string {
  const lines = [
    `| kernel (label, layer stripped) | dispatches | isolated ms / step (median of ${b.roundRatios.length} rounds) | share |`,
    `|---|---:|---:|---:|`,
    ...b.groups.map((g) => `| ${g.label} | ${g.dispatches} | ${g.ms.toFixed(2)} | ${((100 * g.ms) / b.sumIsolatedMs).toFixed(1)}% |`),
    `| **sum of isolated dispatches** | ${b.dispatchesActive} | ${b.sumIsolatedMs.toFixed(1)} | 100% |`,
    '',
    `| decode step (positions ${b.positions[0]}-${b.positions[1]}) | ms | vs sum of isolated |`,
    `|---|---:|---:|`,
    `| engine step, ForwardRunner.run (median of ${b.steps}) | ${b.stepMedianMs.toFixed(1)} | ${(b.stepMedianMs / b.sumIsolatedMs).toFixed(2)}x |`,
    `| each round's step median / that round's sum (median) | | ${b.roundRatios.map((r) => r.toFixed(2)).join(', ')} (${b.stepVsSum.toFixed(2)}x) |`,
    `| whole program, one submission, no readback (median) | ${b.replayMs.toFixed(1)} | ${(b.replayMs / b.sumIsolatedMs).toFixed(2)}x |`,
  ];
  return lines.join('\n');
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  process.env.EGL_PLATFORM ??= 'surfaceless';
  const dir = writeBenchModel(process.argv[2] ?? join(tmpdir(), 'mlxcel-bench', 'qwen3-0.6b-4bit'));
  const b = await kernelBreakdown(dir, { seqs: Number(process.env.BENCH_SEQS ?? 1), log: (m) => console.error(m) });
  console.log(`adapter: ${b.adapter}; load ${b.loadMs.toFixed(0)} ms`);
  console.log(breakdownMarkdown(b));
  console.log('logits after prefill', b.logitsAfterPrefill, 'after decode', b.logitsAfterDecode);
  process.exit(0);
}
