// The sampler chain stage by stage, on the GPU kernels themselves (sample.wgsl through
// Ops.sample, logit_bias.wgsl through Ops.logitBias): min-p, p-less, XTC, chains of
// top-k -> top-p -> min-p, logprobs, and the penalty kernel, against distributions
// computed by hand on small logit vectors (ties, -inf and penalised -1e30 / -FLT_MAX
// logits included). test/kernels/sample.test.ts covers greedy, temperature, top-k, top-p
// and masks on their own.
//
// Semantics under test (sample.wgsl's header and issue 9):
//   chain: grammar mask -> top-k -> top-p -> min-p -> p-less -> temperature -> XTC -> draw
//   top-p: over the top-k set at T = 1 (llama.cpp's order), ties at the cut kept.
//   min-p: keep p_i >= min_p * p_max at T = 1 (independent of the temperature).
//   p-less: keep P_T(i) >= sum_j P_T(j)^2 over the set kept so far, at temperature T; the
//           argmax is always kept.
//   XTC: a threshold > 0 in SeqParams means "XTC fires this step" (the host draws the
//        chance). Among the kept tokens, those with P_T >= threshold; if at least two,
//        all of them but the least likely are removed (ties at that least likely level
//        all stay, as top-k keeps ties).
//   logprobs: of the masked, penalised row at T = 1 before any truncation; slot 0 the
//             chosen token, then the top ones by logit descending, ties to the lowest id,
//             as many as asked, at most MAX_TOP_LOGPROBS.
//   logit_bias: per (sequence, token) entry, a positive logit is divided by `repeat`, a
//               non-positive one multiplied, then `subtract` is subtracted.
//
// Method. Stage tests draw N = 200 sequences per case in one dispatch, all on the same row,
// with stratified uniforms u_i = (i + 0.5) / N: under the inverse CDF, token j is chosen
// N p_j times rounded up or down, so |count_j - N p_j| <= 2 (1 for the grid, 1 for f32
// rounding of the CDF), and a token outside the kept set is never chosen. Each case's
// expected distribution is written out by hand; a float64 reference of the chain
// (`reference`) must agree with it, and every threshold decision must sit at least 1e-3
// (relative) away from its boundary so f32 rounding cannot flip it.
//
// Statistical tests: 2,000 draws per sampler with uniforms from src/engine/rng.ts Rng
// (fixed seeds, drawn in the order Scheduler.draw uses), on one fixed small logit vector,
// Pearson chi-square against the reference distribution with bins pooled to >= 5 expected
// draws; pass when the statistic is below the critical value for alpha = 0.001 at the
// pooled degrees of freedom (i.e. p > 0.001). Each also checks power: the same counts must
// reject (at the same alpha) the distribution without the stage under test.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Rng } from '../../src/engine/rng.js';
import { MAX_TOP_LOGPROBS, maskWords, packBiasEntries, packSeqParams, type BiasEntry } from '../../src/runtime/ops/sampling.js';
import { type BatchMeta } from '../../src/runtime/ops.js';
import type { Dispatch } from '../../src/runtime/program.js';
import { chiSquare, chiSquareCritical } from '../helpers/chi-square.js';
import { Harness, POISON_U32, expectPoisoned, expectUnchanged, rng } from './harness.js';

let h: Harness;
beforeAll(async () => { h = await Harness.open(); });
afterAll(() => h?.destroy());

const ln = Math.log;
const FLT_MAX = 3.4028234663852886e38;
const LP_WORDS = 2 * (1 + MAX_TOP_LOGPROBS);

// ---------------------------------------------------------------------------------------
// Driving the kernels.

interface Stages {
  temperature: number;
  /** 0 = off. */
  topK?: number;
  /** 1 = off. */
  topP?: number;
  /** 0 = off. */
  minP?: number;
  pLess?: boolean;
  /** > 0: XTC fires this step with this threshold. */
  xtc?: number;
  /** Grammar mask: the allowed ids; all when absent. */
  allowed?: number[];
  /** SeqParams.logprobs as written: 0 none, else 1 + top logprobs wanted. */
  logprobsWord?: number;
  /** SeqParams.post_sampling: logprobs of the drawn-from distribution. */
  postSampling?: boolean;
}

interface SeqIn extends Stages { u: number }

/** SeqParams in sample.wgsl (packSeqParams, as ForwardRunner.writeSampling writes them). */
function packSeqs(seqs: SeqIn[]): Uint32Array {
  return new Uint32Array(packSeqParams(seqs.map((s) => ({
    temperature: s.temperature, top_k: s.topK ?? 0, top_p: s.topP ?? 1, u: s.u, min_p: s.minP ?? 0, p_less: s.pLess ?? false,
    xtc_threshold: s.xtc ?? 0, masked: s.allowed !== undefined, logprobs: s.logprobsWord ?? 0, post_sampling: s.postSampling ?? false,
  }))));
}

/** The entries, or one zeroed entry when there are none (a buffer cannot be empty). */
function packEntries(entries: BiasEntry[]): Uint32Array {
  return new Uint32Array(packBiasEntries(entries.length > 0 ? entries : [{ seq: 0, token: 0, repeat: 0, subtract: 0 }]));
}

interface SampleRun {
  ids: Uint32Array;
  /** [S, LP_WORDS] (id, f32 bits) pairs as written; POISON_U32 where untouched. */
  lp: Uint32Array;
  /** The logits after logit_bias (when entries were given). */
  logits?: Float32Array;
}

/**
 * One submission: logit_bias over `bias.entries` (the first `bias.count`, default all,
 * take effect) when given, then the sampler over S = seqs.length rows.
 */
async function runSampler(rows: Float32Array, vocab: number, seqs: SeqIn[], bias?: { entries: BiasEntry[]; count?: number }): Promise<SampleRun> {
  const S = seqs.length;
  expect(rows.length).toBe(S * vocab);
  const mw = maskWords(vocab);
  const masks = new Uint32Array(S * mw);
  seqs.forEach((s, i) => { for (const id of s.allowed ?? []) masks[i * mw + (id >>> 5)]! |= 1 << (id & 31); });
  const logits = h.uploadF32(rows, 'logits');
  const out = h.poisoned(S + 4, POISON_U32, 'sampled');
  const logprobs = h.poisoned(S * LP_WORDS, POISON_U32, 'logprobs');
  const unused = h.poisoned(4, 0, 'unused');
  const entries = h.uploadU32(packEntries(bias?.entries ?? []), 'bias entries');
  const meta: BatchMeta = {
    tokens: unused, tokenPos: unused, tokenTable: unused, blockTable: unused, tokenSlot: unused, seqLast: unused, chunks: unused,
    seqParams: h.uploadU32(packSeqs(seqs), 'seq_params'),
    sampled: out,
    masks: h.uploadU32(masks, 'masks'),
    logprobs,
    biasEntries: entries,
    biasCapacity: bias?.entries.length ?? 0,
  };
  const dispatches: Dispatch[] = [];
  const nBias = bias ? (bias.count ?? bias.entries.length) : 0;
  if (bias) dispatches.push(h.ops.logitBias(logits, vocab, entries));
  dispatches.push(h.ops.sample(logits, vocab, meta));
  await h.run(dispatches, { tokens: S, seqs: S, bias: nBias });
  const got = await h.readU32(out, S + 4);
  expectPoisoned('sampled ids past the sequences', got, S, S + 4, POISON_U32);
  const run: SampleRun = { ids: got.slice(0, S), lp: await h.readU32(logprobs, S * LP_WORDS) };
  if (bias) run.logits = await h.readF32(logits, S * vocab);
  for (const b of [logits, out, logprobs, unused, entries, meta.seqParams, meta.masks]) b.destroy();
  return run;
}

/** Sequence s's logprob slots as written (up to the first untouched slot). */
function logprobSlots(lp: Uint32Array, s: number): { token: number; logprob: number }[] {
  const f = new Float32Array(lp.buffer, lp.byteOffset, lp.length);
  const slots: { token: number; logprob: number }[] = [];
  for (let k = 0; k <= MAX_TOP_LOGPROBS; k++) {
    const o = s * LP_WORDS + 2 * k;
    if (lp[o] === POISON_U32 && lp[o + 1] === POISON_U32) break;
    // The kernel ends a short list with id 0xffffffff (fewer candidates than asked for).
    if (lp[o] === 0xffffffff) break;
    slots.push({ token: lp[o]!, logprob: f[o + 1]! });
  }
  return slots;
}

/**
 * Stratified draws: N sequences per case, each case its own logits row and stages, u_i =
 * (i + 0.5) / N. Cases with the same vocabulary share one dispatch. Returns counts per case.
 */
async function stratifiedCounts(cases: { logits: number[]; stages: Stages }[], N: number): Promise<number[][]> {
  const counts: number[][] = cases.map((c) => new Array<number>(c.logits.length).fill(0));
  const byVocab = new Map<number, number[]>();
  cases.forEach((c, i) => byVocab.set(c.logits.length, [...(byVocab.get(c.logits.length) ?? []), i]));
  for (const [vocab, idx] of byVocab) {
    const rows = new Float32Array(idx.length * N * vocab);
    const seqs: SeqIn[] = [];
    idx.forEach((ci, k) => {
      for (let i = 0; i < N; i++) {
        rows.set(cases[ci]!.logits, (k * N + i) * vocab);
        seqs.push({ ...cases[ci]!.stages, u: (i + 0.5) / N });
      }
    });
    const { ids } = await runSampler(rows, vocab, seqs);
    idx.forEach((ci, k) => {
      for (let i = 0; i < N; i++) {
        const id = ids[k * N + i]!;
        if (id >= vocab) expect.fail(`case ${ci}: sampled id ${id} >= vocab ${vocab}`);
        counts[ci]![id]!++;
      }
    });
  }
  return counts;
}

function expectStratified(counts: number[], p: number[], what: string): void {
  const N = counts.reduce((a, b) => a + b, 0);
  const bad: string[] = [];
  for (let j = 0; j < p.length; j++) {
    if (p[j] === 0 ? counts[j] !== 0 : Math.abs(counts[j]! - N * p[j]!) > 2) {
      bad.push(`token ${j}: ${counts[j]} draws, want ${(N * p[j]!).toFixed(2)}${p[j] === 0 ? ' (outside the kept set)' : ' +- 2'}`);
    }
  }
  if (bad.length > 0) expect.fail(`${what}, ${N} stratified draws: ${bad.join('; ')}; counts [${counts.join(', ')}]`);
}

// ---------------------------------------------------------------------------------------
// The float64 reference of the chain (on the f32-rounded logits).

interface Reference {
  /** The final distribution. */
  p: number[];
  /** Kept ids, ascending. */
  kept: number[];
  /** Smallest relative distance of any threshold decision from its boundary. */
  margin: number;
}

function reference(logits: number[], s: Stages): Reference {
  const V = logits.length;
  const lf = logits.map((x, i) => (s.allowed && !s.allowed.includes(i) ? -Infinity : Math.fround(x)));
  const cand = [...lf.keys()].filter((i) => lf[i]! > -Infinity);
  const order = cand.slice().sort((a, b) => lf[b]! - lf[a]! || a - b);
  const mx = lf[order[0]!]!;
  const T = s.temperature;
  let margin = Infinity;
  const w = (i: number, t: number) => Math.exp((lf[i]! - mx) / t);
  let lo = -Infinity;
  let hi = mx;
  const kept = () => order.filter((i) => lf[i]! >= lo && lf[i]! <= hi);
  if (T <= 0) return { p: lf.map((_, i) => (i === order[0] ? 1 : 0)), kept: [order[0]!], margin };
  const topK = s.topK ?? 0;
  if (topK > 0 && topK < V && topK <= order.length) lo = lf[order[topK - 1]!]!;
  if ((s.topP ?? 1) < 1) {
    const k = kept();
    const z = k.reduce((a, i) => a + w(i, 1), 0);
    let cum = 0;
    let cut: number | undefined;
    for (const i of k) {
      cum += w(i, 1) / z;
      margin = Math.min(margin, Math.abs(cum - s.topP!) / s.topP!);
      if (cut === undefined && cum >= s.topP!) cut = lf[i]!;
    }
    lo = Math.max(lo, cut!);
  }
  if ((s.minP ?? 0) > 0) {
    for (const i of cand) margin = Math.min(margin, Math.abs(w(i, 1) - s.minP!) / s.minP!);
    lo = Math.max(lo, mx + Math.log(s.minP!));
  }
  if (s.pLess) {
    const k = kept();
    const z = k.reduce((a, i) => a + w(i, T), 0);
    const sumSq = k.reduce((a, i) => a + (w(i, T) / z) ** 2, 0);
    const keep = k.filter((i) => lf[i] === mx || w(i, T) / z >= sumSq);
    for (const i of k) if (lf[i] !== mx) margin = Math.min(margin, Math.abs(w(i, T) / z - sumSq) / sumSq);
    lo = Math.max(lo, Math.min(...keep.map((i) => lf[i]!)));
  }
  if ((s.xtc ?? 0) > 0) {
    const k = kept();
    const z = k.reduce((a, i) => a + w(i, T), 0);
    for (const i of k) margin = Math.min(margin, Math.abs(w(i, T) / z - s.xtc!) / s.xtc!);
    const q = k.filter((i) => w(i, T) / z >= s.xtc!);
    if (q.length >= 2) hi = Math.min(...q.map((i) => lf[i]!));
  }
  const ks = kept();
  const z = ks.reduce((a, i) => a + w(i, T), 0);
  return { p: lf.map((_, i) => (ks.includes(i) ? w(i, T) / z : 0)), kept: ks.sort((a, b) => a - b), margin };
}

/** Probabilities from unnormalised weights (0 = not kept). */
function normalise(weights: number[]): number[] {
  const z = weights.reduce((a, b) => a + b, 0);
  return weights.map((x) => x / z);
}

interface StageCase {
  name: string;
  logits: number[];
  stages: Stages;
  /** The hand-computed final distribution. */
  want: number[];
}

/** Registers one `it` per case; all cases run in one dispatch per vocabulary size. */
function stageCases(cases: StageCase[], N = 200): void {
  let counts: number[][] = [];
  beforeAll(async () => { counts = await stratifiedCounts(cases, N); });
  cases.forEach((c, i) => {
    it(c.name, () => {
      const ref = reference(c.logits, c.stages);
      expect(ref.margin, 'no threshold decision on a knife edge').toBeGreaterThan(1e-3);
      for (let j = 0; j < c.want.length; j++) {
        expect(Math.abs(ref.p[j]! - c.want[j]!), `hand-computed p[${j}] = ${c.want[j]} vs reference ${ref.p[j]}`).toBeLessThan(1e-6);
      }
      expectStratified(counts[i]!, c.want, c.name);
    });
  });
}

// Logits as logs of probabilities, so hand computation stays in probabilities. 0 = -inf.
const lnw = (ws: number[]) => ws.map((x) => (x === 0 ? -Infinity : ln(x)));

// ---------------------------------------------------------------------------------------
// min-p

describe('min-p: keep p >= min_p * p_max at T = 1', () => {
  // p = [.1, .3, 0, .15, .3, .05, .1, 0]: max .3 tied at ids 1 and 4, two -inf tokens.
  const MINP = lnw([0.1, 0.3, 0, 0.15, 0.3, 0.05, 0.1, 0]);
  stageCases([
    // .4 * .3 = .12: keeps .3, .15, .3 -> /.75.
    { name: 'min_p 0.4, T 1: {1, 3, 4}', logits: MINP, stages: { temperature: 1, minP: 0.4 }, want: [0, 0.4, 0, 0.2, 0.4, 0, 0, 0] },
    // .3 * .3 = .09: the tied .1s both stay -> /.95.
    { name: 'min_p 0.3, T 1: ties at .1 kept', logits: MINP, stages: { temperature: 1, minP: 0.3 }, want: [0.1 / 0.95, 0.3 / 0.95, 0, 0.15 / 0.95, 0.3 / 0.95, 0, 0.1 / 0.95, 0] },
    // Same kept set at T = 0.5 (min-p is at T = 1: at T = .5, .15 would be .25 of the max
    // and go), probabilities ~ p^2: .09, .0225, .09 -> 4/9, 1/9, 4/9.
    { name: 'min_p 0.4, T 0.5: the kept set does not depend on T', logits: MINP, stages: { temperature: 0.5, minP: 0.4 }, want: [0, 4 / 9, 0, 1 / 9, 4 / 9, 0, 0, 0] },
    { name: 'min_p 0.9: only the tied maxima', logits: MINP, stages: { temperature: 1, minP: 0.9 }, want: [0, 0.5, 0, 0, 0.5, 0, 0, 0] },
    // .01 * .3 = .003: every finite token, -inf never.
    { name: 'min_p 0.01: everything but -inf', logits: MINP, stages: { temperature: 1, minP: 0.01 }, want: [0.1, 0.3, 0, 0.15, 0.3, 0.05, 0.1, 0] },
    // Penalised to -1e30 and -FLT_MAX: candidates, but far below any min-p threshold.
    {
      name: 'min_p 0.2 with penalised -1e30 and -FLT_MAX logits',
      logits: [ln(0.5), -1e30, ln(0.2), -FLT_MAX, ln(0.05), ln(0.25), -Infinity, -Infinity],
      stages: { temperature: 1, minP: 0.2 },
      // .2 * .5 = .1: .5, .2, .25 -> /.95.
      want: [0.5 / 0.95, 0, 0.2 / 0.95, 0, 0, 0.25 / 0.95, 0, 0],
    },
  ]);

  it('vocab 513 (every lane, 3 tokens per chunk): min_p 0.6 at T 0.8 matches the reference', async () => {
    const rand = rng(21);
    const wide = Array.from({ length: 513 }, () => 3 * rand());
    const ref = reference(wide, { temperature: 0.8, minP: 0.6 });
    expect(ref.margin).toBeGreaterThan(1e-4);
    expect(ref.kept.length).toBeGreaterThan(20);
    const [counts] = await stratifiedCounts([{ logits: wide, stages: { temperature: 0.8, minP: 0.6 } }], 400);
    expectStratified(counts!, ref.p, 'vocab 513 min_p 0.6');
  });
});

// ---------------------------------------------------------------------------------------
// p-less

describe('p-less: keep P_T(i) >= sum_j P_T(j)^2 over the kept set (argmax always kept)', () => {
  // p = [.15, .4, 0, .3, .15].
  const PL = lnw([0.15, 0.4, 0, 0.3, 0.15]);
  stageCases([
    // T 1: sum p^2 = .0225 + .16 + .09 + .0225 = .295: .4 and .3 stay -> /.7.
    { name: 'T 1: {1, 3}', logits: PL, stages: { temperature: 1, pLess: true }, want: [0, 0.4 / 0.7, 0, 0.3 / 0.7, 0] },
    // T .5: P ~ p^2 = .0225, .16, .09, .0225 (/.295) = .076, .542, .305, .076; sum P^2 = .399:
    // only the argmax.
    { name: 'T 0.5: the threshold is at the temperature-scaled distribution (argmax only)', logits: PL, stages: { temperature: 0.5, pLess: true }, want: [0, 1, 0, 0, 0] },
    // T 3: P ~ p^(1/3) = .531, .737, .669, .531 (/2.469) = .215, .298, .271, .215; sum P^2 = .255.
    { name: 'T 3: {1, 3}', logits: PL, stages: { temperature: 3, pLess: true }, want: normalise([0, 0.4 ** (1 / 3), 0, 0.3 ** (1 / 3), 0]) },
    // Four equal candidates: every P = sum P^2 = 1/4, all stay (the boundary case the
    // argmax guard covers).
    { name: 'all candidates tied: all kept', logits: [1, 1, -Infinity, 1, 1], stages: { temperature: 1, pLess: true }, want: [0.25, 0.25, 0, 0.25, 0.25] },
    // p = [.3, .3, .2, .1, .1]: sum p^2 = .24: the tied maxima stay, .2 goes.
    { name: 'tied maxima kept, the rest below sum p^2 dropped', logits: lnw([0.3, 0.3, 0.2, 0.1, 0.1]), stages: { temperature: 1, pLess: true }, want: [0.5, 0.5, 0, 0, 0] },
    { name: 'a single candidate', logits: [-Infinity, 0.5, -Infinity, -1e30, -Infinity], stages: { temperature: 1, pLess: true }, want: [0, 1, 0, 0, 0] },
    // After top-k 2 the kept set is {.4, .3} -> .571, .429; sum P^2 = .510: argmax only
    // (over the whole row it would keep both, case 'T 1').
    { name: 'after top-k 2: computed over the kept set', logits: PL, stages: { temperature: 1, topK: 2, pLess: true }, want: [0, 1, 0, 0, 0] },
  ]);

  it('vocab 513: T 2 matches the reference', async () => {
    const rand = rng(22);
    const wide = Array.from({ length: 513 }, () => 6 * rand());
    const ref = reference(wide, { temperature: 2, pLess: true });
    expect(ref.margin).toBeGreaterThan(1e-4);
    expect(ref.kept.length).toBeGreaterThan(20);
    const [counts] = await stratifiedCounts([{ logits: wide, stages: { temperature: 2, pLess: true } }], 400);
    expectStratified(counts!, ref.p, 'vocab 513 p-less T 2');
  });
});

// ---------------------------------------------------------------------------------------
// XTC

describe('XTC (fires this step): remove every token with P_T >= threshold but the least likely, when >= 2 qualify', () => {
  // p = [.1, .35, .05, .25, .15, .1, 0].
  const X = lnw([0.1, 0.35, 0.05, 0.25, 0.15, 0.1, 0]);
  stageCases([
    // >= .12: .35, .25, .15; the two likelier go -> .1, .05, .15, .1 (/.4).
    { name: 'threshold 0.12: {1, 3} removed', logits: X, stages: { temperature: 1, xtc: 0.12 }, want: [0.25, 0, 0.125, 0, 0.375, 0.25, 0] },
    // >= .2: .35, .25; .35 goes -> /.65.
    { name: 'threshold 0.2: {1} removed', logits: X, stages: { temperature: 1, xtc: 0.2 }, want: normalise([0.1, 0, 0.05, 0.25, 0.15, 0.1, 0]) },
    // Only .35 qualifies: no change.
    { name: 'threshold 0.3: one qualifies, no change', logits: X, stages: { temperature: 1, xtc: 0.3 }, want: [0.1, 0.35, 0.05, 0.25, 0.15, 0.1, 0] },
    { name: 'threshold 0.4: none qualifies, no change', logits: X, stages: { temperature: 1, xtc: 0.4 }, want: [0.1, 0.35, 0.05, 0.25, 0.15, 0.1, 0] },
    // T .5: P ~ p^2 (/.23) = .043, .533, .011, .272, .098, .043: >= .12 is {1, 3} (at T 1
    // it is {1, 3, 4}); 1 goes, the rest ~ p^2.
    { name: 'threshold 0.12 at T 0.5: P is temperature-scaled', logits: X, stages: { temperature: 0.5, xtc: 0.12 }, want: normalise([0.01, 0, 0.0025, 0.0625, 0.0225, 0.01, 0]) },
    // p = [.3, .2, .2, .15, .15], >= .18: .3, .2, .2; the least likely level (.2, tied)
    // stays whole, .3 goes.
    { name: 'tied least likely qualifiers both stay', logits: lnw([0.3, 0.2, 0.2, 0.15, 0.15]), stages: { temperature: 1, xtc: 0.18 }, want: normalise([0, 0.2, 0.2, 0.15, 0.15]) },
    // p = [.3, .3, .2, .1, .1], >= .25: the two tied maxima are also the least likely
    // qualifiers: nothing goes.
    { name: 'qualifiers all tied: nothing removed', logits: lnw([0.3, 0.3, 0.2, 0.1, 0.1]), stages: { temperature: 1, xtc: 0.25 }, want: [0.3, 0.3, 0.2, 0.1, 0.1] },
    // Every candidate qualifies: p = [.5, .3, .2] >= .1: .5 and .3 go, .2 is left.
    { name: 'every candidate qualifies: only the least likely is left', logits: lnw([0.5, 0, 0.3, 0.2]), stages: { temperature: 1, xtc: 0.1 }, want: [0, 0, 0, 1] },
    // After top-k 2 the kept set is {.35, .25} -> .583, .417, both >= .1: .35 goes.
    { name: 'after top-k 2, both kept tokens qualify: the likelier goes', logits: X, stages: { temperature: 1, topK: 2, xtc: 0.1 }, want: [0, 0, 0, 1, 0, 0, 0] },
    // After min-p .5 ({.35, .25}; .15/.35 = .43 goes), threshold .3: .583 and .417 qualify.
    { name: 'after min-p 0.5, both kept tokens qualify: the likelier goes', logits: X, stages: { temperature: 1, minP: 0.5, xtc: 0.3 }, want: [0, 0, 0, 1, 0, 0, 0] },
    // The same kept set and the same qualifiers with a lower threshold: .583 and .417 >= .1.
    { name: 'after min-p 0.5, threshold 0.1: the same two qualify, the likelier goes', logits: X, stages: { temperature: 1, minP: 0.5, xtc: 0.1 }, want: [0, 0, 0, 1, 0, 0, 0] },
  ]);

  it('vocab 513: threshold 0.01 at T 0.7 matches the reference', async () => {
    const rand = rng(23);
    const wide = Array.from({ length: 513 }, () => 5 * rand());
    const ref = reference(wide, { temperature: 0.7, xtc: 0.01 });
    expect(ref.margin).toBeGreaterThan(1e-4);
    const full = reference(wide, { temperature: 0.7 });
    expect(full.kept.length - ref.kept.length, 'XTC removes several tokens').toBeGreaterThan(3);
    const [counts] = await stratifiedCounts([{ logits: wide, stages: { temperature: 0.7, xtc: 0.01 } }], 400);
    expectStratified(counts!, ref.p, 'vocab 513 XTC 0.01');
  });
});

// ---------------------------------------------------------------------------------------
// Chains

describe('combined chains: top-k -> top-p -> min-p (-> p-less -> XTC), each on what the previous kept', () => {
  // p = [.15, .3, .1, .25, .2].
  const C = lnw([0.15, 0.3, 0.1, 0.25, 0.2]);
  stageCases([
    // top-k 3: {.3, .25, .2} -> .4, .333, .267; top-p .6: cum .4, .733 -> {1, 3}.
    // (top-p .6 on the whole row would keep 3 tokens: cum .3, .55, .75.)
    { name: 'top-k 3 then top-p 0.6: {1, 3}', logits: C, stages: { temperature: 1, topK: 3, topP: 0.6 }, want: normalise([0, 0.3, 0, 0.25, 0]) },
    // top-p .6: cum .3, .55, .75 -> {1, 3, 4}; min-p .45 (threshold .135) keeps all three.
    // (min-p first would leave {.3, .25, .2, .15} -> .333, .278, ...: top-p .6 -> {1, 3}.)
    { name: 'top-p 0.6 then min-p 0.45: {1, 3, 4}', logits: C, stages: { temperature: 1, topP: 0.6, minP: 0.45 }, want: normalise([0, 0.3, 0, 0.25, 0.2]) },
    // top-k 4: {.3, .25, .2, .15} -> .333, .278, .222, .167; top-p .8: cum .333, .611, .833
    // -> {1, 3, 4}; min-p .7 (threshold .21): {1, 3}.
    { name: 'top-k 4, top-p 0.8, min-p 0.7: {1, 3}', logits: C, stages: { temperature: 1, topK: 4, topP: 0.8, minP: 0.7 }, want: normalise([0, 0.3, 0, 0.25, 0]) },
    // Same chain at T 0.5: kept set unchanged (all three stages are at T 1), P ~ p^2.
    { name: 'top-k 4, top-p 0.8, min-p 0.7 at T 0.5', logits: C, stages: { temperature: 0.5, topK: 4, topP: 0.8, minP: 0.7 }, want: normalise([0, 0.09, 0, 0.0625, 0]) },
    // top-k 4 -> .333, .278, .222, .167 (sum P^2 = .265); top-p .95 and min-p .3 keep all
    // four; p-less: {1, 3}.
    { name: 'top-k 4, top-p 0.95, min-p 0.3, p-less: {1, 3}', logits: C, stages: { temperature: 1, topK: 4, topP: 0.95, minP: 0.3, pLess: true }, want: normalise([0, 0.3, 0, 0.25, 0]) },
    // Mask {0, 1, 2, 4} (3 masked) then top-k 3: {.3, .2, .15} -> .462, .308, .231; top-p .7:
    // cum .462, .769 -> {1, 4}.
    { name: 'grammar mask, then top-k 3, then top-p 0.7', logits: C, stages: { temperature: 1, allowed: [0, 1, 2, 4], topK: 3, topP: 0.7 }, want: normalise([0, 0.3, 0, 0, 0.2]) },
  ]);

  // p = [.04, .3, .06, .16, .2, .08, .1, .06], min-p .25 (threshold .075): {1, 3, 4, 5, 6}
  // (.3, .16, .2, .08, .1; /.84 = .357, .190, .238, .095, .119), XTC .15: {1, 3, 4}
  // qualify, 1 and 4 go -> {3, 5, 6}.
  stageCases([
    {
      name: 'min-p 0.25 then XTC 0.15: {3, 5, 6}',
      logits: lnw([0.04, 0.3, 0.06, 0.16, 0.2, 0.08, 0.1, 0.06]),
      stages: { temperature: 1, minP: 0.25, xtc: 0.15 },
      want: normalise([0, 0, 0, 0.16, 0, 0.08, 0.1, 0]),
    },
  ]);

  it('greedy (T 0) ignores every truncation stage: the argmax, ties to the lowest id', async () => {
    const row = [0.5, 2, -Infinity, 2, 1.9];
    const all: Stages = { temperature: 0, topK: 2, topP: 0.5, minP: 0.9, pLess: true, xtc: 0.1 };
    const { ids } = await runSampler(Float32Array.from([...row, ...row, ...row]), 5, [
      { ...all, u: 0.99 },
      { ...all, temperature: -1, u: 0 },
      { ...all, allowed: [0, 4], u: 0.5 },
    ]);
    expect(Array.from(ids)).toEqual([1, 1, 4]);
  });
});

// ---------------------------------------------------------------------------------------
// Logprobs

/** log_softmax at T = 1 of a row (f32-rounded logits; -inf excluded). */
function logSoftmax(row: ArrayLike<number>): number[] {
  const lf = Array.from(row, (x) => Math.fround(x));
  const mx = Math.max(...lf);
  const z = lf.reduce((a, x) => a + (x > -Infinity ? Math.exp(x - mx) : 0), 0);
  return lf.map((x) => x - mx - Math.log(z));
}

/** Candidate ids by logit descending, ties to the lowest id. */
function topIds(row: ArrayLike<number>, k: number): number[] {
  const lf = Array.from(row, (x) => Math.fround(x));
  return [...lf.keys()].filter((i) => lf[i]! > -Infinity).sort((a, b) => lf[b]! - lf[a]! || a - b).slice(0, k);
}

const lpTol = (want: number) => 2e-5 + 2e-6 * Math.abs(want);

describe('logprobs: the masked, penalised row at T = 1 before truncation; chosen first, then the top ones', () => {
  it('hand-computed: ties, -inf, a -1e30 logit, chosen under truncation and temperature, counts', async () => {
    // log Z = ln(e^1 + 2 e^3 + e^0) (token 2 is -inf; token 5's e^(-1e30) is 0).
    const row = [1, 3, -Infinity, 3, 0, -1e30];
    const logZ = Math.log(Math.E + 2 * Math.exp(3) + 1);
    const seqs: SeqIn[] = [
      // Greedy: argmax 1 (tie with 3); top 3: [1, 3, 0].
      { temperature: 0, u: 0.5, logprobsWord: 1 + 3 },
      // T 1, top-k 2, u -> the last kept token in id order: 3. Its logprob is of the whole
      // row (ln(1/2) would be the truncated one's). Top 5: every candidate, -1e30 last.
      { temperature: 1, topK: 2, u: 0.999, logprobsWord: 1 + 5 },
      // T 0.5, u = 0: the first token with mass, 0; its logprob is still at T = 1.
      { temperature: 0.5, u: 0, logprobsWord: 1 },
      // 10 asked, 5 candidates: 5 written, the other slots untouched.
      { temperature: 0, u: 0, logprobsWord: 1 + 10 },
      // None asked: nothing written.
      { temperature: 1, u: 0.3, logprobsWord: 0 },
    ];
    const { ids, lp } = await runSampler(Float32Array.from(seqs.flatMap(() => row)), row.length, seqs);
    expect(Array.from(ids).slice(0, 4)).toEqual([1, 3, 0, 1]);
    const want = (t: number) => ({ token: t, logprob: Math.fround(row[t]!) - logZ });
    const expectSlots = (s: number, tokens: number[]) => {
      const got = logprobSlots(lp, s);
      expect(got.map((x) => x.token), `seq ${s} slot ids`).toEqual(tokens);
      got.forEach((x, k) => {
        const w = want(x.token).logprob;
        if (!(Math.abs(x.logprob - w) <= lpTol(w))) expect.fail(`seq ${s} slot ${k} (token ${x.token}): logprob ${x.logprob}, want ${w}`);
      });
    };
    expectSlots(0, [1, 1, 3, 0]);
    expectSlots(1, [3, 1, 3, 0, 4, 5]);
    expectSlots(2, [0]);
    expectSlots(3, [1, 1, 3, 0, 4, 5]);
    expectPoisoned('seq 4 (no logprobs asked)', lp, 4 * LP_WORDS, 5 * LP_WORDS, POISON_U32);
    expect(Math.abs(logprobSlots(lp, 1)[1]!.logprob - (3 - logZ))).toBeLessThan(1e-5);
  });

  it('vocab 513: penalties (logit_bias in the same submission) and a mask; top 20 in order with ties across lanes; capped at 20', async () => {
    const V = 513;
    const rand = rng(31);
    const base = Array.from({ length: V }, () => 6 * rand() - 3);
    // Ties spanning lanes and mask words: 5, 261 (lane 5 again), 300, 511 share the top value.
    for (const i of [5, 261, 300, 511]) base[i] = 4;
    base[40] = 3.9; // just below the tie
    base[7] = -Infinity;
    const rows = [base.slice(), base.slice(), base.slice(), base.slice()];
    rows[3]![77] = 10; // seq 3: the argmax, then penalised below the tie
    const entries: BiasEntry[] = [
      { seq: 0, token: 5, repeat: 2, subtract: 0 },      // 4 -> 2: leaves the tie
      { seq: 0, token: 40, repeat: 1, subtract: -0.5 },  // 3.9 -> 4.4: the new argmax
      { seq: 1, token: 300, repeat: 1.5, subtract: 0.1 },
      { seq: 3, token: 77, repeat: 4, subtract: 0 },     // 10 -> 2.5
    ];
    const allowed = Array.from({ length: V }, (_, i) => i).filter((i) => i % 3 !== 0 || i === 300);
    const seqs: SeqIn[] = [
      { temperature: 0, u: 0.5, logprobsWord: 1 + 20 },
      { temperature: 0.8, topK: 40, u: 0.37, logprobsWord: 1 + 25, allowed }, // 25 asked: capped at 20
      { temperature: 1, u: 0.2, logprobsWord: 0 },
      { temperature: 1.2, topP: 0.5, u: 0.81, logprobsWord: 1 + 7 },
    ];
    const { ids, lp, logits } = await runSampler(Float32Array.from(rows.flat()), V, seqs, { entries });
    // The reference rows: penalties as logit_bias applies them, then the mask.
    const penalised = rows.map((r) => r.map((x) => Math.fround(x)));
    for (const e of entries) {
      const l = penalised[e.seq]![e.token]!;
      penalised[e.seq]![e.token] = Math.fround(Math.fround(l > 0 ? l / e.repeat : l * e.repeat) - e.subtract);
    }
    expectClose4('penalised logits', logits!, penalised.flat());
    const masked = penalised.map((r, s) => r.map((x, i) => (seqs[s]!.allowed && !seqs[s]!.allowed!.includes(i) ? -Infinity : x)));
    expect(ids[0], 'greedy after penalties').toBe(40);
    for (const s of [0, 1, 3]) {
      const top = Math.min(seqs[s]!.logprobsWord! - 1, MAX_TOP_LOGPROBS);
      const got = logprobSlots(lp, s);
      const ls = logSoftmax(masked[s]!);
      expect(got.length, `seq ${s}: 1 + ${top} slots`).toBe(1 + top);
      expect(got[0]!.token, `seq ${s}: slot 0 is the chosen token`).toBe(ids[s]);
      expect(masked[s]![ids[s]!]!, `seq ${s}: chosen token allowed`).toBeGreaterThan(-Infinity);
      expect(got.slice(1).map((x) => x.token), `seq ${s}: top ids, descending, ties to the lowest id`).toEqual(topIds(masked[s]!, top));
      for (const [k, x] of got.entries()) {
        const w = ls[x.token]!;
        if (!(Math.abs(x.logprob - w) <= lpTol(w))) expect.fail(`seq ${s} slot ${k} (token ${x.token}): logprob ${x.logprob}, want ${w}`);
      }
      for (let k = 2; k < got.length; k++) expect(got[k]!.logprob).toBeLessThanOrEqual(got[k - 1]!.logprob);
    }
    // The tie order (4 at 5, 261, 300, 511): seq 0 lifted 40 above it and pushed 5 below;
    // seq 1's mask drops 261 (261 % 3 = 0) and its penalty drops 300; seq 3 penalised 77.
    expect(logprobSlots(lp, 0).slice(1, 5).map((x) => x.token)).toEqual([40, 261, 300, 511]);
    expect(logprobSlots(lp, 1).slice(1, 4).map((x) => x.token)).toEqual([5, 511, 40]);
    expect(logprobSlots(lp, 3).slice(1, 6).map((x) => x.token)).toEqual([5, 261, 300, 511, 40]);
    expectPoisoned('seq 2 (no logprobs asked)', lp, 2 * LP_WORDS, 3 * LP_WORDS, POISON_U32);
    expectPoisoned('seq 3 slots past 1 + 7', lp, 3 * LP_WORDS + 2 * 8, 4 * LP_WORDS, POISON_U32);
  });
});

describe('post-sampling logprobs: the distribution the token was drawn from; chosen first, then the kept tokens', () => {
  it('vocab 513: each chain against the reference; greedy is probability 1, the other candidates 0', async () => {
    const V = 513;
    const rand = rng(47);
    const base = Array.from({ length: V }, () => 6 * rand() - 3);
    for (const i of [9, 300]) base[i] = 3.5; // a tie across lanes
    const allowed = Array.from({ length: V }, (_, i) => i).filter((i) => i % 4 !== 1);
    const seqs: SeqIn[] = [
      { temperature: 0.7, topK: 8, u: 0.42, logprobsWord: 1 + 20 },         // 8 kept: the list ends early
      { temperature: 1.3, topK: 40, topP: 0.6, u: 0.77, logprobsWord: 1 + 5 },
      { temperature: 0.9, minP: 0.2, u: 0.05, logprobsWord: 1 + 20, allowed },
      { temperature: 0.8, topK: 30, xtc: 0.05, u: 0.6, logprobsWord: 1 + 3 },
      { temperature: 0, topK: 5, u: 0.5, logprobsWord: 1 + 4 },             // greedy
      { temperature: 1, u: 0.3, logprobsWord: 1 + 2, postSampling: false }, // the T = 1 row, as before
      { temperature: 0, topP: 0.6, minP: 0.05, pLess: true, xtc: 0.01, u: 0.5, logprobsWord: 1 + 20, allowed }, // greedy
    ].map((s) => ({ postSampling: true, ...s }));
    const { ids, lp } = await runSampler(Float32Array.from(seqs.flatMap(() => base)), V, seqs);
    for (let s = 0; s < 4; s++) {
      const ref = reference(base, seqs[s]!);
      const got = logprobSlots(lp, s);
      const chosen = ids[s]!;
      expect(ref.p[chosen], `seq ${s}: the chosen token was kept`).toBeGreaterThan(0);
      expect(got[0]!.token, `seq ${s}: slot 0 is the chosen token`).toBe(chosen);
      // Kept tokens, most likely first, ties to the lowest id; as many as asked for, or as are kept.
      const kept = ref.kept.slice().sort((a, b) => ref.p[b]! - ref.p[a]! || a - b);
      const want = kept.slice(0, Math.min(seqs[s]!.logprobsWord! - 1, MAX_TOP_LOGPROBS));
      expect(got.slice(1).map((x) => x.token), `seq ${s}: top ids`).toEqual(want);
      for (const [k, x] of got.entries()) {
        const w = Math.log(ref.p[x.token]!);
        if (!(Math.abs(x.logprob - w) <= lpTol(w))) expect.fail(`seq ${s} slot ${k} (token ${x.token}): logprob ${x.logprob}, want ${w}`);
      }
      const total = kept.reduce((a, i) => a + ref.p[i]!, 0);
      expect(Math.abs(total - 1)).toBeLessThan(1e-9);
    }
    expect(logprobSlots(lp, 0)).toHaveLength(1 + 8);
    // Greedy (llama.cpp's chain, whose temperature stage follows top-k, top-p and min-p and
    // keeps only the argmax): the candidates those stages keep at T = 1, most likely first,
    // the argmax at probability 1 and the rest at 0; p-less and XTC do not apply.
    for (const s of [4, 6]) {
      const { topK, topP, minP, allowed: mask } = seqs[s]!;
      const kept = reference(base, { temperature: 1, topK, topP, minP, allowed: mask }).kept;
      const lf = base.map(Math.fround);
      const ordered = kept.sort((a, b) => lf[b]! - lf[a]! || a - b).slice(0, seqs[s]!.logprobsWord! - 1);
      expect(ids[s], `seq ${s}: the argmax`).toBe(ordered[0]);
      expect(logprobSlots(lp, s), `seq ${s}`).toEqual([
        { token: ids[s], logprob: 0 },
        ...ordered.map((token) => ({ token, logprob: token === ids[s] ? 0 : -Infinity })),
      ]);
    }
    expect(logprobSlots(lp, 4)).toHaveLength(1 + 4);
    expect(logprobSlots(lp, 6).length).toBeGreaterThan(2);
    // Without the flag: the whole row at T = 1.
    const ls = logSoftmax(base);
    expect(logprobSlots(lp, 5).map((x) => x.token)).toEqual([ids[5], ...topIds(base, 2)]);
    expect(Math.abs(logprobSlots(lp, 5)[0]!.logprob - ls[ids[5]!]!)).toBeLessThan(lpTol(ls[ids[5]!]!));
  });
});

/** |got - want| within 4 ulp-ish (relative 5e-7) or exactly equal (for infinities). */
function expectClose4(what: string, got: ArrayLike<number>, want: ArrayLike<number>): void {
  for (let i = 0; i < want.length; i++) {
    const g = got[i]!;
    const w = want[i]!;
    if (g === w) continue;
    if (!(Math.abs(g - w) <= 5e-7 * Math.abs(w))) expect.fail(`${what}[${i}]: got ${g}, want ${w}`);
  }
}

// ---------------------------------------------------------------------------------------
// logit_bias

describe('logit_bias: repetition penalty (divide positive, multiply non-positive), then subtract', () => {
  it('entries for several sequences in one dispatch; rows and tokens not listed are bit-identical', async () => {
    const V = 16;
    const S = 4;
    const rand = rng(41);
    const rows = Float32Array.from({ length: S * V }, () => 6 * rand() - 3);
    const at = (s: number, t: number) => s * V + t;
    rows[at(0, 3)] = 2;
    rows[at(0, 5)] = -2;
    rows[at(0, 6)] = 0;
    rows[at(2, 0)] = 1.25;
    rows[at(2, 15)] = -0.75;
    rows[at(3, 7)] = -Infinity;
    rows[at(3, 8)] = 0.5;
    const entries: BiasEntry[] = [
      { seq: 0, token: 3, repeat: 2, subtract: 0 },        // 2 / 2 = 1
      { seq: 0, token: 5, repeat: 2, subtract: 0.25 },     // -2 * 2 - .25 = -4.25
      { seq: 0, token: 6, repeat: 2, subtract: 0.5 },      // 0 * 2 - .5 = -.5
      { seq: 2, token: 0, repeat: 1, subtract: 2 },        // 1.25 - 2 = -.75 (repeat 1: no scaling)
      { seq: 2, token: 15, repeat: 1.5, subtract: -1 },    // -.75 * 1.5 + 1 = -.125
      { seq: 3, token: 7, repeat: 1.3, subtract: 1 },      // -inf stays -inf
      { seq: 3, token: 8, repeat: 0.5, subtract: 0 },      // .5 / .5 = 1 (a repeat < 1 boosts)
      { seq: 3, token: 9, repeat: 1.1, subtract: 0.3 },    // random value
      // Past step.n_bias: must not be applied.
      { seq: 1, token: 2, repeat: 3, subtract: 100 },
    ];
    const count = entries.length - 1;
    const buf = h.uploadF32(rows, 'logits');
    const eb = h.uploadU32(packEntries(entries), 'entries');
    await h.run(h.ops.logitBias(buf, V, eb), { tokens: S, seqs: S, bias: count });
    const got = await h.readF32(buf, S * V);
    const want = Float32Array.from(rows);
    for (const e of entries.slice(0, count)) {
      const l = want[at(e.seq, e.token)]!;
      want[at(e.seq, e.token)] = Math.fround(Math.fround(l > 0 ? l / e.repeat : l * e.repeat) - e.subtract);
    }
    // The hand-computed values.
    expect([want[at(0, 3)], want[at(0, 5)], want[at(0, 6)], want[at(2, 0)], want[at(2, 15)], want[at(3, 7)], want[at(3, 8)]])
      .toEqual([1, -4.25, -0.5, -0.75, -0.125, -Infinity, 1]);
    expectClose4('penalised logits', got, want);
    const listed = new Set(entries.slice(0, count).map((e) => at(e.seq, e.token)));
    for (let i = 0; i < S * V; i++) if (!listed.has(i)) expectUnchanged(`logit ${i} (not listed)`, got, rows, i, i + 1);
    buf.destroy();
    eb.destroy();
  });

  it('no entries (n_bias 0): nothing changes', async () => {
    const rows = Float32Array.from({ length: 64 }, (_, i) => Math.sin(i));
    const buf = h.uploadF32(rows, 'logits');
    const eb = h.uploadU32(packEntries([{ seq: 0, token: 1, repeat: 5, subtract: 5 }]), 'entries');
    await h.run(h.ops.logitBias(buf, 16, eb), { tokens: 4, seqs: 4, bias: 0 });
    expectUnchanged('logits', await h.readF32(buf, 64), rows, 0, 64);
    buf.destroy();
    eb.destroy();
  });

  it('penalties decide the greedy pick in the same submission as the sampler', async () => {
    const V = 6;
    const row = [1, 3, 2.9, -1, 0.5, 2.95];
    const seqs: SeqIn[] = [{ temperature: 0, u: 0 }, { temperature: 0, u: 0 }, { temperature: 0, u: 0 }];
    const { ids } = await runSampler(Float32Array.from([...row, ...row, ...row]), V, seqs, {
      entries: [
        { seq: 0, token: 1, repeat: 1.1, subtract: 0 },  // 3 / 1.1 = 2.73: 5 (2.95) wins
        { seq: 1, token: 1, repeat: 1, subtract: 0.2 },  // 2.8: 5 wins
        { seq: 1, token: 5, repeat: 1, subtract: 0.2 },  // 2.75: 2 (2.9) wins
      ],
    });
    expect(Array.from(ids)).toEqual([5, 2, 1]);
  });
});

// ---------------------------------------------------------------------------------------
// Statistical tests

/** Scheduler.draw's order of RNG draws for one step: u, then XTC's chance when enabled. */
function drawLikeScheduler(r: Rng, xtcProbability: number, xtcThreshold: number): { u: number; xtc: number } {
  const u = r.next();
  const fires = xtcProbability > 0 && r.next() < xtcProbability;
  return { u, xtc: fires ? xtcThreshold : 0 };
}

describe('statistical: 2,000 seeded draws per sampler match the expected distribution (chi-square, alpha = 0.001)', () => {
  // Ties (7 and 11), a -inf (10), a long tail.
  const L = [1.0, 2.5, -0.5, 0.3, 2.4, -3.0, 0.0, 1.7, 0.9, -1.2, -Infinity, 1.7];
  const N = 2000;
  const ALPHA = 0.001;
  interface StatCase {
    name: string;
    stages: Stages;
    seed: number;
    xtcProbability?: number;
    /** The distribution without the stage under test (power check). */
    without: Stages;
  }
  const cases: StatCase[] = [
    { name: 'temperature 0.7', stages: { temperature: 0.7 }, seed: 101, without: { temperature: 1 } },
    { name: 'top-k 3 at T 1.3 (ties at the 3rd kept)', stages: { temperature: 1.3, topK: 3 }, seed: 102, without: { temperature: 1.3 } },
    { name: 'top-p 0.9 at T 1.5', stages: { temperature: 1.5, topP: 0.9 }, seed: 103, without: { temperature: 1.5 } },
    { name: 'min-p 0.1 at T 1.2', stages: { temperature: 1.2, minP: 0.1 }, seed: 104, without: { temperature: 1.2 } },
    { name: 'p-less at T 2.5', stages: { temperature: 2.5, pLess: true }, seed: 105, without: { temperature: 2.5 } },
    { name: 'XTC probability 0.5, threshold 0.1', stages: { temperature: 1, xtc: 0.1 }, xtcProbability: 0.5, seed: 106, without: { temperature: 1 } },
  ];
  const counts: number[][] = cases.map(() => new Array<number>(L.length).fill(0));
  const fires: number[] = cases.map(() => 0);

  beforeAll(async () => {
    const rows = new Float32Array(cases.length * N * L.length);
    const seqs: SeqIn[] = [];
    cases.forEach((c, k) => {
      const r = new Rng(c.seed);
      for (let i = 0; i < N; i++) {
        rows.set(L, (k * N + i) * L.length);
        const d = drawLikeScheduler(r, c.xtcProbability ?? 0, c.stages.xtc ?? 0);
        if (d.xtc > 0) fires[k]!++;
        // Without a probability the stage is always on (the non-XTC cases have no xtc).
        seqs.push({ ...c.stages, xtc: c.xtcProbability === undefined ? c.stages.xtc : d.xtc, u: d.u });
      }
    });
    const { ids } = await runSampler(rows, L.length, seqs);
    cases.forEach((_, k) => {
      for (let i = 0; i < N; i++) counts[k]![ids[k * N + i]!]!++;
    });
  });

  for (const [k, c] of cases.entries()) {
    it(c.name, () => {
      let p: number[];
      if (c.xtcProbability !== undefined) {
        // Fire / no-fire mixed with the probability; the fire count itself is Binomial(N, prob).
        const on = reference(L, c.stages).p;
        const off = reference(L, { ...c.stages, xtc: 0 }).p;
        p = on.map((x, j) => c.xtcProbability! * x + (1 - c.xtcProbability!) * off[j]!);
        const f = chiSquare([fires[k]!, N - fires[k]!], [c.xtcProbability, 1 - c.xtcProbability], ALPHA);
        expect(f.stat, `XTC fired ${fires[k]} of ${N} times`).toBeLessThan(f.critical);
      } else {
        const ref = reference(L, c.stages);
        expect(ref.margin).toBeGreaterThan(1e-3);
        p = ref.p;
      }
      for (let j = 0; j < L.length; j++) {
        if (p[j] === 0) expect(counts[k]![j], `token ${j} is outside the kept set`).toBe(0);
      }
      const fit = chiSquare(counts[k]!, p, ALPHA);
      const detail = `chi2 ${fit.stat.toFixed(2)}, df ${fit.df}, p ${fit.pValue.toExponential(2)}, critical ${fit.critical.toFixed(2)}; ` +
        fit.bins.map(([b, o, e]) => `${b}: ${o}/${e.toFixed(1)}`).join(', ');
      if (process.env.KERNEL_TEST_VERBOSE) console.log(`${c.name}: ${detail}`);
      expect(fit.stat, `${c.name}: ${detail}`).toBeLessThan(fit.critical);
      const alt = chiSquare(counts[k]!, reference(L, c.without).p, ALPHA);
      expect(alt.stat, `${c.name}: the counts must reject the distribution without the stage`).toBeGreaterThan(alt.critical);
    });
  }

  it('the chi-square helper: critical values for alpha 0.001 match the tables', () => {
    const table: [number, number][] = [[1, 10.828], [2, 13.816], [5, 20.515], [10, 29.588], [19, 43.820]];
    for (const [df, want] of table) expect(Math.abs(chiSquareCritical(ALPHA, df) - want), `df ${df}`).toBeLessThan(2e-3);
  });
});

