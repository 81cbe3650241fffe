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
// and, with the batch metadata of the last decode step still in place, time each kernel
// alone two ways (timeAlone): each dispatch repeated back to back, and each kernel's
// dispatches of every layer swept in program order (timeKernelsSwept). The step is compared
// with the sums of its own round: this VM's speed drifts by 20-30% over tens of seconds
// (whole rounds of decode steps at 90 or at 115 ms), which a step timed minutes apart from
// the sum passes straight into the ratio.
//
// Why both: a dispatch repeated alone can find its weights still in cache (2 MiB of L2 per
// core here holds the o and down projections whole), which the step, reading each layer's
// weights once, never does, so it could undercount the memory-bound projections; a sweep
// reads each layer's weights once, as the step does. On this VM the two sums agree within
// 5% (bench/RESULTS.md, eighth session), so the cache is not what separates the step from
// its kernels.
//
// With BENCH_SEQS=N (option `seqs`) every step runs N sequences side by side, as the
// engine's batched decode does with N streams: the same prompt length each, one token per
// sequence per decode step.
//
// Run alone: npx tsx bench/kernel-breakdown.ts [modelDir]   (BENCH_SEQS, default 1)
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ENGINE_DEFAULTS } from '../src/engine/engine.js';
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
  /** Per label: the median over rounds of its isolated time per step (each dispatch repeated alone). */
  groups: KernelGroup[];
  /** Sum over every dispatch of its isolated time: the median over rounds. */
  sumIsolatedMs: number;
  /** Per label: the median over rounds of its time with its layers swept (timeKernelsSwept). */
  sweptGroups: KernelGroup[];
  /** Sum over labels of the swept times: the median over rounds. */
  sumSweptMs: number;
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
  /** The same against the swept sums. */
  sweptRoundRatios: number[];
  stepVsSweptSum: number;
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
export const ONE_SLOT_SHAPES = {
  maxTokens: 512, maxSeqs: 1, kvTokens: 2048, maxContext: 1024, blockSize: 16, kvTypes: { k: ENGINE_DEFAULTS.cacheTypeK, v: ENGINE_DEFAULTS.cacheTypeV },
};
/** Greedy sampling, as the bench requests use. */
export const GREEDY: SampleInput = { temperature: 0, topK: 0, topP: 1, minP: 0, pLess: false, xtcThreshold: 0, u: 0 };

const layerStripped = (label: string) => label.replace(/^model\.layers\.\d+\./, '');

/**
 * Times a set of dispatches alone, with the batch metadata of the last pass still in place:
 * one warm-up submission, then `reps` and 2 x `reps` copies of the set in one command buffer
 * each (`reps` for about `targetMs`), one wait each; the time per copy is the difference
 * over `reps`, which cancels what a submission and its wait cost once (about a millisecond:
 * 20 us per dispatch at 50 copies).
 */
async function timeAlone(model: LoadedModel, shape: StepShape, set: Set<Dispatch>, targetMs: number): Promise<number> {
  const device = model.ops.gpu.device;
  const timeCopies = async (copies: number) => {
    const t = performance.now();
    const enc = device.createCommandEncoder();
    for (let r = 0; r < copies; r++) model.program.encode(enc, shape, (x) => set.has(x));
    device.queue.submit([enc.finish()]);
    await workDone(device.queue);
    return performance.now() - t;
  };
  const first = await timeCopies(1); // warm-up (and a first estimate)
  const reps = Math.max(3, Math.min(50, Math.round(targetMs / Math.max(first, 0.05))));
  const once = await timeCopies(reps);
  const twice = await timeCopies(2 * reps);
  return Math.max(0, twice - once) / reps;
}

const activeIn = (model: LoadedModel, shape: StepShape) => model.program.dispatches.filter((d) => {
  const [x, y = 1, z = 1] = d.workgroups(shape);
  return x > 0 && y > 0 && z > 0;
});

/**
 * Replays every dispatch active in `shape` alone (timeAlone), grouped by label with the
 * layer number stripped. A dispatch repeated back to back can find its weights still in
 * cache, which a decode step, reading each layer's weights once, never does: see
 * timeKernelsSwept.
 */
export async function timeDispatchesAlone(model: LoadedModel, shape: StepShape, targetMs: number): Promise<{ groups: KernelGroup[]; sumMs: number; active: number }> {
  model.ops.writeStep(shape);
  const groups = new Map<string, KernelGroup>();
  let sumMs = 0;
  const active = activeIn(model, shape);
  for (const d of active) {
    const ms = await timeAlone(model, shape, new Set([d]), targetMs);
    const label = layerStripped(d.label);
    const g = groups.get(label) ?? { label, dispatches: 0, ms: 0 };
    g.dispatches++;
    g.ms += ms;
    groups.set(label, g);
    sumMs += ms;
  }
  return { groups: [...groups.values()].sort((a, b) => b.ms - a.ms), sumMs, active: active.length };
}

/**
 * Times each kernel alone with its layers swept: a copy is every dispatch of one label
 * (layer number stripped) in program order, so each layer's weights are read once per copy,
 * from wherever a decode step finds them, and nothing else runs between them.
 */
export async function timeKernelsSwept(model: LoadedModel, shape: StepShape, targetMs: number): Promise<{ groups: KernelGroup[]; sumMs: number }> {
  model.ops.writeStep(shape);
  const byLabel = new Map<string, Set<Dispatch>>();
  for (const d of activeIn(model, shape)) {
    const label = layerStripped(d.label);
    byLabel.set(label, (byLabel.get(label) ?? new Set()).add(d));
  }
  const groups: KernelGroup[] = [];
  for (const [label, set] of byLabel) groups.push({ label, dispatches: set.size, ms: await timeAlone(model, shape, set, targetMs * set.size) });
  return { groups: groups.sort((a, b) => b.ms - a.ms), sumMs: groups.reduce((a, g) => a + g.ms, 0) };
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
  const sweptSums: number[] = [];
  const roundRatios: number[] = [];
  const sweptRoundRatios: number[] = [];
  const byLabel = new Map<string, { dispatches: number; ms: number[] }>();
  const sweptByLabel = new Map<string, { dispatches: number; ms: number[] }>();
  const collect = (into: typeof byLabel, groups: KernelGroup[]) => {
    for (const g of groups) {
      const e = into.get(g.label) ?? { dispatches: g.dispatches, ms: [] };
      e.ms.push(g.ms);
      into.set(g.label, e);
    }
  };
  const medians = (from: typeof byLabel) => [...from].map(([label, e]) => ({ label, dispatches: e.dispatches, ms: median(e.ms) })).sort((a, b) => b.ms - a.ms);
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
    collect(byLabel, alone.groups);
    const swept = await timeKernelsSwept(model, shape, target);
    sweptSums.push(swept.sumMs);
    sweptRoundRatios.push(median(steps) / swept.sumMs);
    collect(sweptByLabel, swept.groups);
    log(`round ${r + 1}: decode step median ${median(steps).toFixed(1)} ms, isolated sum ${alone.sumMs.toFixed(1)} ms, swept ${swept.sumMs.toFixed(1)} ms`);
  }
  return {
    adapter: gpu.description,
    groups: medians(byLabel),
    sumIsolatedMs: median(sums),
    sweptGroups: medians(sweptByLabel),
    sumSweptMs: median(sweptSums),
    dispatchesRecorded: model.program.dispatches.length,
    dispatchesActive: active,
    stepMedianMs: median(stepTimes),
    stepMeanMs: stepTimes.reduce((a, b) => a + b, 0) / stepTimes.length,
    steps: stepTimes.length,
    roundRatios,
    stepVsSum: median(roundRatios),
    sweptRoundRatios,
    stepVsSweptSum: median(sweptRoundRatios),
    positions: [firstPos, pos - 1],
    replayMs: median(replays),
    logitsAfterPrefill: logitsAfterPrefill!,
    logitsAfterDecode: logitsAfterDecode!,
    loadMs,
  };
}

export function breakdownMarkdown(b: KernelBreakdown): string {
  const swept = new Map(b.sweptGroups.map((g) => [g.label, g.ms]));
  const n = b.roundRatios.length;
  const ratios = (rs: number[], r: number) => `${rs.map((x) => x.toFixed(2)).join(', ')} (${r.toFixed(2)}x)`;
  const lines = [
    `| kernel (label, layer stripped) | dispatches | each dispatch repeated alone, ms / step (median of ${n} rounds) | share | layers swept, ms / step (median of ${n}) | share |`,
    `|---|---:|---:|---:|---:|---:|`,
    ...b.groups.map((g) => {
      const s = swept.get(g.label) ?? NaN;
      return `| ${g.label} | ${g.dispatches} | ${g.ms.toFixed(2)} | ${((100 * g.ms) / b.sumIsolatedMs).toFixed(1)}% | ${s.toFixed(2)} | ${((100 * s) / b.sumSweptMs).toFixed(1)}% |`;
    }),
    `| **sum** | ${b.dispatchesActive} | ${b.sumIsolatedMs.toFixed(1)} | 100% | ${b.sumSweptMs.toFixed(1)} | 100% |`,
    '',
    `| decode step (positions ${b.positions[0]}-${b.positions[1]}) | ms | vs sum, repeated alone | vs sum, layers swept |`,
    `|---|---:|---:|---:|`,
    `| engine step, ForwardRunner.run (median of ${b.steps}) | ${b.stepMedianMs.toFixed(1)} | ${(b.stepMedianMs / b.sumIsolatedMs).toFixed(2)}x | ${(b.stepMedianMs / b.sumSweptMs).toFixed(2)}x |`,
    `| each round's step median / that round's sum (median) | | ${ratios(b.roundRatios, b.stepVsSum)} | ${ratios(b.sweptRoundRatios, b.stepVsSweptSum)} |`,
    `| whole program, one submission, no readback (median) | ${b.replayMs.toFixed(1)} | ${(b.replayMs / b.sumIsolatedMs).toFixed(2)}x | ${(b.replayMs / b.sumSweptMs).toFixed(2)}x |`,
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
