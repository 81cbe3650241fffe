// sample.wgsl through Ops.sample: one workgroup per sampling sequence picks a token from
// its logits row. Greedy (temperature <= 0) is an argmax with the lowest id winning ties;
// otherwise softmax truncated by top-k, then top-p, then an inverse-CDF draw in token-id
// order at temperature T with the host's uniform u. Also: grammar masks (a bit per token).
// Not covered here: min-p, p-less, XTC, logprobs (all off: zero words).
//
// Statistical checks use N = 2,000 sequences in one dispatch, all with the same logits
// row, and stratified uniforms u_i = (i + 0.5) / N. Under the inverse CDF, the number of
// u_i falling in token j's interval [C_{j-1}, C_j) is N p_j rounded up or down, so
//   |count_j - N p_j| <= 2   for every token j
// (1 for the grid, 1 for f32 rounding of the CDF moving a boundary across a grid point),
// and tokens outside top-k / the nucleus / the mask must never be chosen. This is a
// deterministic, much tighter check than a chi-square test on random draws (which would
// need slack of several sqrt(N p_j) per token).
//
// Top-p cases run at T = 1, where "top-p before temperature" (llama.cpp's chain, which the
// kernel follows) and "after" (HF's) keep the same nucleus; top-k does not depend on order.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_TOP_LOGPROBS, maskWords, packSeqParams } from '../../src/runtime/ops/sampling.js';
import { type BatchMeta } from '../../src/runtime/ops.js';
import { Harness, POISON_U32, expectPoisoned, rng } from './harness.js';

let h: Harness;
beforeAll(async () => { h = await Harness.open(); });
afterAll(() => h?.destroy());

interface SampleParams {
  temperature: number;
  topK: number;
  topP: number;
  u: number;
  /** Allowed token ids (grammar mask); all when absent. */
  allowed?: number[];
}

/** SeqParams in sample.wgsl, the other samplers off. */
function packParams(params: SampleParams[]): Uint32Array {
  return new Uint32Array(packSeqParams(params.map((p) => ({
    temperature: p.temperature, top_k: p.topK, top_p: p.topP, u: p.u, min_p: 0, p_less: false, xtc_threshold: 0, masked: p.allowed !== undefined, logprobs: 0, post_sampling: false,
  }))));
}

/** Runs one sample dispatch over S = params.length rows; returns the ids, checks the rest of `out` is untouched. */
async function sample(rows: Float32Array, vocab: number, params: SampleParams[]): Promise<Uint32Array> {
  const S = params.length;
  expect(rows.length).toBe(S * vocab);
  const mw = maskWords(vocab);
  const masks = new Uint32Array(S * mw);
  params.forEach((p, s) => { for (const id of p.allowed ?? []) masks[s * mw + (id >>> 5)]! |= 1 << (id & 31); });
  const out = h.poisoned(S + 4, POISON_U32, 'sampled');
  const unused = h.poisoned(4, 0, 'unused');
  const meta: BatchMeta = {
    tokens: unused, tokenPos: unused, tokenTable: unused, blockTable: unused, tokenSlot: unused, seqLast: unused, chunks: unused,
    seqParams: h.uploadU32(packParams(params), 'seq_params'),
    sampled: out,
    masks: h.uploadU32(masks, 'masks'),
    logprobs: h.poisoned(S * 2 * (1 + MAX_TOP_LOGPROBS), 0, 'logprobs'),
    biasEntries: unused,
    biasCapacity: 0,
  };
  await h.run(h.ops.sample(h.uploadF32(rows, 'logits'), vocab, meta), { tokens: S, seqs: S });
  const got = await h.readU32(out, S + 4);
  expectPoisoned('out past seqs', got, S, S + 4, POISON_U32);
  return got.subarray(0, S);
}

/** The same logits row for N sequences with stratified uniforms. */
async function drawMany(logits: number[], temperature: number, topK: number, topP: number, N = 2000): Promise<number[]> {
  const vocab = logits.length;
  const rows = new Float32Array(N * vocab);
  for (let i = 0; i < N; i++) rows.set(logits, i * vocab);
  const params = Array.from({ length: N }, (_, i) => ({ temperature, topK, topP, u: (i + 0.5) / N }));
  const ids = await sample(rows, vocab, params);
  const counts = new Array<number>(vocab).fill(0);
  for (const id of ids) {
    expect(id, 'sampled id within vocab').toBeLessThan(vocab);
    counts[id]!++;
  }
  return counts;
}

/**
 * float64 reference: softmax(l / T) over the top-k (ties at the k-th value kept), then the
 * smallest set of most probable tokens with mass >= top_p of that (ties kept), renormalised.
 * Also returns how far top_p is from the nearest cumulative boundary, so a case cannot sit
 * on a knife edge.
 */
function expected(logits: number[], T: number, topK: number, topP: number): { p: number[]; margin: number } {
  const lf = logits.map((x) => Math.fround(x));
  const order = [...lf.keys()].sort((a, b) => lf[b]! - lf[a]! || a - b);
  let keep = new Set(order);
  if (topK > 0 && topK < lf.length) {
    const kth = lf[order[topK - 1]!]!;
    keep = new Set(order.filter((i) => lf[i]! >= kth));
  }
  const mx = lf[order[0]!]!;
  const w = lf.map((x, i) => (keep.has(i) ? Math.exp((x - mx) / T) : 0));
  const total = w.reduce((a, b) => a + b, 0);
  let margin = Infinity;
  if (topP < 1) {
    let cum = 0;
    let cut = -Infinity;
    for (const i of order) {
      if (!keep.has(i)) continue;
      const before = cum;
      cum += w[i]! / total;
      margin = Math.min(margin, Math.abs(cum - topP));
      if (cut === -Infinity && cum >= topP) { cut = lf[i]!; margin = Math.min(margin, topP - before); }
    }
    keep = new Set([...keep].filter((i) => lf[i]! >= cut));
  }
  const w2 = lf.map((x, i) => (keep.has(i) ? Math.exp((x - mx) / T) : 0));
  const t2 = w2.reduce((a, b) => a + b, 0);
  return { p: w2.map((x) => x / t2), margin };
}

function expectDistribution(counts: number[], p: number[], what: string): void {
  const N = counts.reduce((a, b) => a + b, 0);
  const bad: string[] = [];
  for (let j = 0; j < p.length; j++) {
    if (p[j] === 0 ? counts[j] !== 0 : Math.abs(counts[j]! - N * p[j]!) > 2) {
      bad.push(`token ${j}: ${counts[j]} draws, want ${(N * p[j]!).toFixed(2)}${p[j] === 0 ? ' (outside the kept set)' : ' +- 2'}`);
    }
  }
  if (bad.length > 0) expect.fail(`${what}, ${N} draws: ${bad.length} tokens off; ${bad.slice(0, 8).join('; ')}`);
}

const SMALL = [1.0, 2.5, -0.5, 0.3, 2.4, -3.0, 0.0, 1.7, 0.9, -1.2];

describe('sample: greedy (temperature <= 0)', () => {
  it('argmax over vocab 513 for several sequences in one dispatch, ties to the lowest id', async () => {
    const V = 513;
    const rand = rng(7);
    const rows: number[][] = [];
    const want: number[] = [];
    const add = (row: number[], id: number) => { rows.push(row); want.push(id); };
    const random = () => Array.from({ length: V }, () => 8 * rand() - 4);
    // Plain random row.
    let r = random();
    add(r, r.indexOf(Math.max(...r)));
    // Three-way tie across lanes (17, 300 = lane 44, 511 = lane 255).
    r = random(); r[17] = r[300] = r[511] = 10; add(r, 17);
    // Tie where the higher lane holds the lower id: 255 (lane 255) vs 256 (lane 0).
    r = random(); r[256] = r[255] = 9; add(r, 255);
    // Tie inside one lane: 3 and 259 are both lane 3.
    r = random(); r[259] = r[3] = 9; add(r, 3);
    // All equal: id 0.
    add(new Array(V).fill(0.5), 0);
    // Max at the last id.
    r = random(); r[512] = 4.5; add(r, 512);
    // Everything -inf but one very negative finite logit.
    r = new Array(V).fill(-Infinity); r[400] = -1e30; add(r, 400);
    // All very negative (around -1e38), distinct.
    r = Array.from({ length: V }, () => -1e38 - 1e37 * rand()); r[123] = -9e37; add(r, 123);
    // -inf and large finite logits mixed, max tied at 77 and 333.
    r = random(); for (let i = 0; i < V; i += 3) r[i] = -Infinity; r[333] = r[77] = 1e30; add(r, 77);
    const params = rows.map((_, s) => ({ temperature: s % 2 ? 0 : -1, topK: s % 3, topP: 0.5, u: 0.99 }));
    const got = await sample(Float32Array.from(rows.flat()), V, params);
    expect(Array.from(got)).toEqual(want);
  });

  it('small vocabularies (1, 3, 255, 256, 257) with the max in the last lane', async () => {
    for (const V of [1, 3, 255, 256, 257]) {
      const row = Array.from({ length: V }, (_, i) => -i * 0.01);
      row[V - 1] = 1;
      const got = await sample(Float32Array.from(row), V, [{ temperature: 0, topK: 0, topP: 1, u: 0.5 }]);
      expect(got[0], `vocab ${V}`).toBe(V - 1);
    }
  });

  it('the max is -FLT_MAX (every other logit -inf)', async () => {
    // A row masked with -inf except one token whose logit is the lowest finite f32.
    const V = 513;
    const row = new Array(V).fill(-Infinity);
    row[100] = -3.4028234663852886e38;
    const got = await sample(Float32Array.from(row), V, [{ temperature: 0, topK: 0, topP: 1, u: 0.5 }]);
    expect(got[0], 'argmax of a row whose only finite logit is -FLT_MAX').toBe(100);
  });

  it('a row of all -inf still yields a token id (greedy: all tie, so id 0)', async () => {
    // E.g. penalties pushing every token to -inf: the header promises the argmax with the
    // lowest id on ties. Sequence 0 is a normal row so that the all -inf rows are not the
    // first in the buffer.
    const V = 40;
    const rows = Float32Array.from([...Array.from({ length: V }, (_, i) => Math.sin(i)), ...new Array(V).fill(-Infinity), ...new Array(V).fill(-Infinity)]);
    const got = await sample(rows, V, [
      { temperature: 0, topK: 0, topP: 1, u: 0.5 },
      { temperature: 0, topK: 0, topP: 1, u: 0.5 },
      { temperature: 1, topK: 0, topP: 1, u: 0.5 },
    ]);
    expect.soft(got[1], 'greedy over all -inf').toBe(0);
    expect.soft(got[2], 'T=1 over all -inf: some id < vocab').toBeLessThan(V);
  });
});

describe('sample: temperature draws reproduce the truncated softmax (2,000 stratified draws)', () => {
  const cases: { name: string; logits: number[]; T: number; topK: number; topP: number }[] = [
    { name: 'vocab 10, T=1, no truncation', logits: SMALL, T: 1, topK: 0, topP: 1 },
    { name: 'vocab 10, T=0.7, top-k 4', logits: SMALL, T: 0.7, topK: 4, topP: 1 },
    { name: 'vocab 10, T=1, top-p 0.9', logits: SMALL, T: 1, topK: 0, topP: 0.9 },
    { name: 'vocab 10, T=1, top-k 6 then top-p 0.8', logits: SMALL, T: 1, topK: 6, topP: 0.8 },
    { name: 'vocab 10, T=1, top-k >= vocab is no truncation', logits: SMALL, T: 1, topK: 10, topP: 1 },
  ];
  // 'top-p 0.9' keeps token 8 in the nucleus: the inverse-CDF chunk of invocation 8, the
  // first of llvmpipe's second 8-wide SIMD group (an earlier sampler's reduction result
  // raced with a later workgroup-memory write there, and invocations >= 8 never drew).
  // vocab 513 spans all 256 lanes (3 tokens per lane in the inverse-CDF chunks).
  const rand = rng(11);
  const wide = Array.from({ length: 513 }, () => 3 * rand());
  cases.push({ name: 'vocab 513, T=1, no truncation', logits: wide, T: 1, topK: 0, topP: 1 });
  cases.push({ name: 'vocab 513, T=0.8, top-k 5', logits: wide, T: 0.8, topK: 5, topP: 1 });
  cases.push({ name: 'vocab 513, T=1, top-p 0.3', logits: wide, T: 1, topK: 0, topP: 0.3 });

  for (const c of cases) {
    it(c.name, async () => {
      const { p, margin } = expected(c.logits, c.T, c.topK, c.topP);
      // f32 mass sums are good to ~1e-6 relative: a boundary 1e-4 away cannot flip.
      expect(margin, 'top_p is not on a cumulative-probability boundary').toBeGreaterThan(1e-4);
      const counts = await drawMany(c.logits, c.T, c.topK, c.topP);
      expectDistribution(counts, p, c.name);
    });
  }
});

describe('sample: truncation with masked logits', () => {
  // Masks and penalties push tokens to -inf or to a very negative finite value (DRY's
  // multiplier * base^(len - allowed) reaches 1e24..1e36 on long repeats); top-k / top-p
  // must still keep only the best tokens. 200 stratified draws (the +-2 bound holds for
  // any N).
  const masked = (mask: number) => SMALL.map((x, i) => (i === 2 || i === 5 ? mask : x));
  for (const [label, mask] of [['-inf', -Infinity], ['-FLT_MAX', -3.4028234663852886e38], ['-1e30', -1e30]] as const) {
    it(`top-k 3 with two logits at ${label}`, async () => {
      const logits = masked(mask);
      const counts = await drawMany(logits, 1, 3, 1, 200);
      expectDistribution(counts, expected(logits, 1, 3, 1).p, `top-k 3, mask ${label}`);
    });
    it(`top-p 0.6 with two logits at ${label}`, async () => {
      const logits = masked(mask);
      const { p, margin } = expected(logits, 1, 0, 0.6);
      expect(margin).toBeGreaterThan(1e-4);
      const counts = await drawMany(logits, 1, 0, 0.6, 200);
      expectDistribution(counts, p, `top-p 0.6, mask ${label}`);
    });
  }
  it('no truncation with logits at -inf: masked tokens never chosen', async () => {
    const logits = masked(-Infinity);
    const counts = await drawMany(logits, 1, 0, 1, 200);
    expectDistribution(counts, expected(logits, 1, 0, 1).p, 'mask -inf');
  });
});

describe('sample: grammar masks (bit i % 32 of word i / 32 allows token i)', () => {
  it('greedy picks the best allowed token, vocab 513, allowed ids in different mask words', async () => {
    const V = 513;
    const rand = rng(5);
    const row = Array.from({ length: V }, () => 4 * rand());
    const allowed = [5, 40, 300, 512];
    row[41] = 100; // the global argmax, not allowed
    row[300] = 5; row[512] = 5; row[40] = 4.9; // best allowed: tie 300 / 512 -> 300
    const unmasked = { temperature: 0, topK: 0, topP: 1, u: 0.5 };
    const got = await sample(Float32Array.from([...row, ...row]), V, [{ ...unmasked, allowed }, unmasked]);
    expect(Array.from(got)).toEqual([300, 41]);
  });

  it('T=1 draws only allowed tokens, in proportion (200 stratified draws), alone and with top-k 2', async () => {
    const V = SMALL.length;
    const allowed = [0, 3, 6, 8, 9];
    const N = 200;
    const rows = new Float32Array(2 * N * V);
    for (let i = 0; i < 2 * N; i++) rows.set(SMALL, i * V);
    const params = Array.from({ length: 2 * N }, (_, i) => ({ temperature: 1, topK: i < N ? 0 : 2, topP: 1, u: ((i % N) + 0.5) / N, allowed }));
    const ids = await sample(rows, V, params);
    // The reference: disallowed tokens at -inf.
    const masked = SMALL.map((x, i) => (allowed.includes(i) ? x : -Infinity));
    for (const [part, topK] of [[0, 0], [1, 2]] as const) {
      const counts = new Array<number>(V).fill(0);
      for (const id of ids.subarray(part * N, (part + 1) * N)) { expect(id).toBeLessThan(V); counts[id]!++; }
      expectDistribution(counts, expected(masked, 1, topK, 1).p, `mask, top-k ${topK}`);
    }
  });
});

describe('sample: mixed greedy and temperature sequences in one dispatch', () => {
  it('each sequence uses its own parameters and u', async () => {
    const V = 10;
    const neg = SMALL.map((x) => -x);
    const rows = Float32Array.from([...SMALL, ...SMALL, ...neg, ...SMALL, ...SMALL, ...SMALL, ...neg]);
    // u just below 1 picks the last kept token in id order; u = 0 the first.
    const params = [
      { temperature: 0, topK: 0, topP: 1, u: 0.999 },   // argmax of SMALL: 1
      { temperature: 1, topK: 2, topP: 1, u: 0.999 },   // top-2 = {1, 4}: last in id order is 4
      { temperature: 1, topK: 0, topP: 1, u: 0 },       // first token with mass: 0
      { temperature: 1, topK: 3, topP: 1, u: 0 },       // top-3 = {1, 4, 7}: first is 1
      { temperature: 2, topK: 1, topP: 1, u: 0.999 },   // top-1: the argmax whatever u is
      { temperature: 0.5, topK: 0, topP: 0.05, u: 0.999 }, // nucleus of one: the argmax
      { temperature: 1, topK: 0, topP: 1, u: 0.999 },   // -SMALL: last token, 9
    ];
    const got = await sample(rows, V, params);
    expect(Array.from(got)).toEqual([1, 4, 0, 1, 1, 1, 9]);
  });
});
