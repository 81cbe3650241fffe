// A mixture-of-experts block's kernels against a CPU reference: moe_route.wgsl (top-k of
// the router logits, ties to the lower expert, both routings, renormalised or not, the
// slots grouped by expert), then moe_matmul.wgsl (each expert's gate/up GLU and down
// projection over the slots routed to it; weights split into parts at expert boundaries)
// and moe_combine.wgsl (the weighted sum into h), in f32, bf16, q4 g32 and q3 g32 (fields
// straddling words, a chunk starting mid-texel, rows padded to whole texels), and as GPT-OSS
// runs it: MXFP4 experts (scales e8m0 0 among them) with gate and up rows alternating,
// per-expert biases large enough that the clamped GLU (quick GELU of min(gate, 7) times
// clamp(up, -7, 7) + 1) clamps. The batch has tokens choosing different experts, a tie, and
// two experts no token chooses; a decode step (one token) runs through the same recorded
// dispatches.
//
// Tolerances: routing weights are softmaxes of <= 8 logits, within 16 * 2^-23 relative
// (WGSL's exp is 3 + 2|x| ULP for |x| <= 10 here; the divisions 2.5 ULP). The block's output
// adds three f32 stages (64- and 32-term dot products, SiLU, the weighted sum), each off by
// at most n * 2^-24 <= 2^-18 of the sum of the magnitudes it adds: each value within 2^-18
// of the magnitudes it is computed from (mag below, which bounds those of every stage), a
// bound a wrong weight, slot or expert exceeds by orders of magnitude. Words past the step's slots
// and tokens keep their poison.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MoeRouting } from '../../src/runtime/ops/moe.js';
import type { WeightFormat } from '../../src/runtime/kernel-source.js';
import { expectClose, expectPoisoned, Harness, POISON_BITS, POISON_U32, randomF32, rng } from './harness.js';
import { quantizeMxfp4 } from '../helpers/mxfp4.js';

let h: Harness;
beforeAll(async () => { h = await Harness.open(); });
afterAll(() => h?.destroy());

const E = 8;
const K = 2;
const H = 64;
const I = 32;
const MAX_TOKENS = 8;
/** Experts no token of the batch chooses (their logits far below the rest). */
const UNCHOSEN = [5, 7];

/** The CPU routing of one token: chosen experts in order and their weights. */
function route(logits: Float32Array, routing: MoeRouting, renormalize: boolean): { ids: number[]; w: number[] } {
  const order = [...logits.keys()].sort((a, b) => logits[b]! - logits[a]! || a - b).slice(0, K);
  const max = Math.max(...logits);
  const all = [...logits].reduce((n, v) => n + Math.exp(v - max), 0);
  let w = order.map((e) => (routing === 'topk_softmax' ? Math.exp(logits[e]! - logits[order[0]!]!) : Math.exp(logits[e]! - max) / all));
  if (routing === 'topk_softmax' || renormalize) {
    const sum = w.reduce((a, b) => a + b, 0);
    w = w.map((v) => v / sum);
  }
  return { ids: order, w };
}

function silu(x: number): number {
  return x / (1 + Math.exp(-x));
}

/** GPT-OSS's clamped GLU (swiglu_limit 7). */
const LIMIT = 7;
function clampedGlu(g: number, u: number): number {
  const gate = Math.min(g, LIMIT);
  return (gate / (1 + Math.exp(-1.702 * gate))) * (Math.min(Math.max(u, -LIMIT), LIMIT) + 1);
}

/** MXFP4 blocks of `values` with every seventh block's scale e8m0 0 (2^-127: values that vanish). */
function mxfp4WithTinyBlocks(values: Float32Array) {
  const m = quantizeMxfp4(values);
  for (let b = 0; b < m.scales.length; b += 7) m.scales[b] = 0;
  return m;
}

describe('moe route + expert matmul + combine', () => {
  const cases: Array<[WeightFormat, MoeRouting, boolean]> = [['f32', 'softmax_topk', true], ['bf16', 'softmax_topk', false], ['q4', 'topk_softmax', false], ['q3', 'softmax_topk', false], ['mxfp4', 'topk_softmax', false]];
  for (const [format, routing, renormalize] of cases) {
    // GPT-OSS's experts: alternating gate/up rows, biases, the clamped GLU.
    const gptOss = format === 'mxfp4';
    it(`${format}, ${routing}${renormalize ? ', renormalised' : ''}${gptOss ? ', alternating gate/up rows, biases, clamped GLU' : ''}: a batch of 6 and a decode step`, async () => {
      const rand = rng(format.length * 31 + (renormalize ? 1 : 0));
      // Each expert: gate rows, then up rows; then the down projections, expert after expert.
      const gateUpHost = randomF32(rand, E * 2 * I * H, -0.3, 0.3);
      const downHost = randomF32(rand, E * H * I, -0.3, 0.3);
      const opts = { groupSize: 32 };
      // Parts split at expert boundaries (3 + 5 experts; 6 + 2).
      const blocks = (v: Float32Array) => (gptOss ? mxfp4WithTinyBlocks(v) : undefined);
      const gateUp = h.weight(gateUpHost, E * 2 * I, H, format, { ...opts, parts: [3 * 2 * I, 5 * 2 * I], mxfp4: blocks(gateUpHost) });
      const down = h.weight(downHost, E * H, I, format, { ...opts, parts: [6 * H, 2 * H], mxfp4: blocks(downHost) });
      const gateUpBias = gptOss ? randomF32(rand, E * 2 * I, -10, 10) : undefined;
      const downBias = gptOss ? randomF32(rand, E * H, -1, 1) : undefined;
      const bias = (v?: Float32Array) => (v ? h.uploadF32(v, 'bias') : undefined);

      const logitsBuf = h.poisoned(MAX_TOKENS * E, POISON_BITS, 'logits');
      const routes = {
        experts: E, topK: K, ranges: h.poisoned(2 * E, POISON_U32, 'ranges'), slots: h.poisoned(MAX_TOKENS * K * 2, POISON_U32, 'slots'),
        weights: h.poisoned(MAX_TOKENS * K, POISON_BITS, 'weights'),
      };
      const x = h.activation(MAX_TOKENS * H, 'x');
      const hidden = h.activation(MAX_TOKENS * K * I, 'hidden');
      const out = h.activation(MAX_TOKENS * K * H, 'out');
      const hBuf = h.activation(MAX_TOKENS * H, 'h');
      const dispatches = [
        h.ops.moeRoute('route', logitsBuf, routes, { routing, renormalize }),
        ...h.ops.moeMatmul('gate_up', gateUp.gpu, x, hidden, routes, gptOss
          ? { glu: 'gelu_quick', bias: bias(gateUpBias), interleaved: true, limit: LIMIT }
          : { glu: 'silu' }),
        ...h.ops.moeMatmul('down', down.gpu, hidden, out, routes, { perSlot: true, bias: bias(downBias) }),
        h.ops.moeCombine('combine', out, routes, hBuf, H),
      ];

      for (const T of [6, 1]) {
        const logits = randomF32(rand, MAX_TOKENS * E, -3, 3);
        for (let t = 0; t < T; t++) for (const e of UNCHOSEN) logits[t * E + e] = -20 - t;
        // Token 0's top two tie: the lower expert ranks first.
        if (T > 1) { logits[2] = 4; logits[4] = 4; }
        const xs = randomF32(rand, MAX_TOKENS * H, -1, 1);
        const h0 = randomF32(rand, MAX_TOKENS * H, -1, 1);
        new Uint32Array(xs.buffer).fill(POISON_BITS, T * H);
        new Uint32Array(h0.buffer).fill(POISON_BITS, T * H);
        h.write(logitsBuf, logits);
        h.write(x, xs);
        h.write(hBuf, h0);
        h.poison(routes.slots, MAX_TOKENS * K * 2, POISON_U32);
        h.poison(hidden, MAX_TOKENS * K * I);
        h.poison(out, MAX_TOKENS * K * H);
        await h.run(dispatches, { tokens: T, seqs: T });
        const what = `${format} T=${T}`;

        // Routing: each slot's expert and weight, the counts, starts and grouped order.
        const want = Array.from({ length: T }, (_, t) => route(logits.subarray(t * E, (t + 1) * E), routing, renormalize));
        if (T > 1) expect(want[0]!.ids).toEqual([2, 4]);
        const slots = await h.readU32(routes.slots, MAX_TOKENS * K * 2);
        const weights = await h.readF32(routes.weights, MAX_TOKENS * K);
        const ranges = await h.readU32(routes.ranges, 2 * E);
        const n = T * K;
        expect([...Array(n).keys()].map((s) => slots[2 * s + 1])).toEqual(want.flatMap((r) => r.ids));
        expectClose(`${what} weights`, weights.subarray(0, n), want.flatMap((r) => r.w), (i) => 16 * 2 ** -23 * Math.abs(want[Math.floor(i / K)]!.w[i % K]!));
        const counts = Array.from({ length: E }, (_, e) => want.flatMap((r) => r.ids).filter((id) => id === e).length);
        expect([...ranges.subarray(0, E)]).toEqual(counts);
        for (const e of UNCHOSEN) expect(ranges[e]).toBe(0);
        const starts = counts.map((_, e) => counts.slice(0, e).reduce((a, b) => a + b, 0));
        expect([...ranges.subarray(E)]).toEqual(starts);
        const order = counts.flatMap((_, e) => [...Array(n).keys()].filter((s) => want[Math.floor(s / K)]!.ids[s % K] === e));
        expect([...Array(n).keys()].map((i) => slots[2 * i])).toEqual(order);
        expectPoisoned(`${what} slots past the step`, slots, 2 * n, 2 * MAX_TOKENS * K, POISON_U32);

        // The block: h + sum_j w_j * down_e(silu(gate_e x) * up_e x), from the decoded weights.
        const G = gateUp.effective;
        const D = down.effective;
        const wantH = new Float64Array(T * H);
        const mag = new Float64Array(T * H);
        for (let t = 0; t < T; t++) {
          const xv = xs.subarray(t * H, (t + 1) * H);
          for (const [j, e] of want[t]!.ids.entries()) {
            const act = new Float64Array(I);
            const actMag = new Float64Array(I);
            for (let r = 0; r < I; r++) {
              // Gate and up rows: gate rows then up rows, or (GPT-OSS) alternating.
              const [gr, ur] = gptOss ? [e * 2 * I + 2 * r, e * 2 * I + 2 * r + 1] : [e * 2 * I + r, e * 2 * I + I + r];
              let g = gateUpBias?.[gr] ?? 0, u = gateUpBias?.[ur] ?? 0, gm = Math.abs(g), um = Math.abs(u);
              for (let c = 0; c < H; c++) {
                const gw = G[gr * H + c]!, uw = G[ur * H + c]!;
                g += gw * xv[c]!; u += uw * xv[c]!; gm += Math.abs(gw * xv[c]!); um += Math.abs(uw * xv[c]!);
              }
              act[r] = gptOss ? clampedGlu(g, u) : silu(g) * u;
              actMag[r] = (gm + 1) * (um + 1);
            }
            for (let c = 0; c < H; c++) {
              let y = downBias?.[e * H + c] ?? 0, ym = Math.abs(y);
              for (let r = 0; r < I; r++) { y += D[(e * H + c) * I + r]! * act[r]!; ym += Math.abs(D[(e * H + c) * I + r]!) * actMag[r]!; }
              wantH[t * H + c]! += want[t]!.w[j]! * y;
              mag[t * H + c]! += ym;
            }
          }
          for (let c = 0; c < H; c++) { wantH[t * H + c]! += h0[t * H + c]!; mag[t * H + c]! += Math.abs(h0[t * H + c]!); }
        }
        const gotH = await h.readF32(hBuf, MAX_TOKENS * H);
        expectClose(`${what} h`, gotH.subarray(0, T * H), wantH, (i) => 2 ** -18 * mag[i]!);
        expectPoisoned(`${what} h past the step's tokens`, gotH, T * H, MAX_TOKENS * H);
        expectPoisoned(`${what} expert outputs past the step's slots`, await h.readF32(out, MAX_TOKENS * K * H), n * H, MAX_TOKENS * K * H);
      }
    });
  }
});
