// rmsnorm.wgsl through Ops.rmsnorm: y[r, :] = x[src(r), :] / sqrt(mean(x^2) + eps) * weight,
// per token and per sampling sequence (seqLast). Qwen3's per-head q/k norm is fused into
// rope_kv_write.wgsl and checked in rope-kv-write.test.ts.
//
// Tolerance: |got - want| <= (width + 16) * 2^-24 * |want|: the f32 sum of squares has
// relative error <= width * 2^-24 (gamma bound), which reaches the result halved by the
// square root; WGSL allows inverseSqrt 2 ULP (4 * 2^-24); the divide, the eps add and the
// two products round once each. Rows >= the row count must stay poisoned.
import { afterAll, beforeAll, describe, it } from 'vitest';
import { expectClose, expectPoisoned, Harness, POISON_BITS, randomF32, rng } from './harness.js';

let h: Harness;
beforeAll(async () => { h = await Harness.open(); });
afterAll(() => h?.destroy());

const MAX_TOKENS = 16;

/** x [rows, width] with per-row magnitudes from 1e-4 (eps dominates) to 1e3, one row of zeros. */
function input(rand: () => number, rows: number, width: number): Float32Array {
  const x = new Float32Array(rows * width);
  const mags = [1, 1e-4, 1e3, 0, 0.01, 30];
  for (let r = 0; r < rows; r++) {
    const mag = mags[r % mags.length]!;
    for (let i = 0; i < width; i++) x[r * width + i] = mag * (2 * rand() - 1);
  }
  return x;
}

function reference(x: Float32Array, weight: Float32Array, width: number, eps: number, srcRows: number[]): Float64Array {
  const out = new Float64Array(srcRows.length * width);
  srcRows.forEach((src, r) => {
    let ss = 0;
    for (let i = 0; i < width; i++) ss += x[src * width + i]! ** 2;
    const inv = 1 / Math.sqrt(ss / width + Math.fround(eps));
    for (let i = 0; i < width; i++) out[r * width + i] = x[src * width + i]! * inv * weight[i]!;
  });
  return out;
}

const tolFor = (width: number, want: Float64Array) => (i: number) => (width + 16) * 2 ** -24 * Math.abs(want[i]!) + 1e-35;

describe('rmsnorm: one row per token', () => {
  for (const [width, eps] of [[172, 1e-6], [37, 1e-5], [1, 1e-6], [300, 1e-5]] as const) {
    it(`width ${width}, eps ${eps}, M = 13, 1, 5, 16`, async () => {
      const rand = rng(width);
      const weight = randomF32(rand, width, 0.5, 1.5);
      const xBuf = h.poisoned(MAX_TOKENS * width, POISON_BITS, 'x');
      const yBuf = h.poisoned(MAX_TOKENS * width, POISON_BITS, 'y');
      const d = h.ops.rmsnorm('norm', xBuf, h.uploadF32(weight), yBuf, { width, eps });
      for (const M of [13, 1, 5, 16]) {
        const x = input(rand, M, width);
        h.write(xBuf, x);
        h.poison(yBuf, MAX_TOKENS * width);
        await h.run(d, { tokens: M, seqs: 1 });
        const got = await h.readF32(yBuf, MAX_TOKENS * width);
        const want = reference(x, weight, width, eps, [...Array(M).keys()]);
        expectClose(`width ${width} M=${M}`, got.subarray(0, M * width), want, tolFor(width, want));
        expectPoisoned(`width ${width} M=${M}: rows >= M`, got, M * width, MAX_TOKENS * width);
      }
    });
  }
});

describe('rmsnorm: per sequence (final norm of each sampling sequence\'s last token)', () => {
  const cases: { seqLast: number[]; tokens: number }[] = [
    { seqLast: [4, 9, 12], tokens: 13 },
    { seqLast: [12, 0, 7, 7], tokens: 13 },
    { seqLast: [0], tokens: 1 },
    { seqLast: [3, 4, 5, 6, 7, 8, 9], tokens: 10 },
  ];
  for (const { seqLast, tokens } of cases) {
    it(`tokens=${tokens}, seqLast=[${seqLast}]`, async () => {
      const width = 172;
      const rand = rng(seqLast.length * 31 + tokens);
      const weight = randomF32(rand, width, 0.5, 1.5);
      const x = input(rand, tokens, width);
      const yBuf = h.poisoned(MAX_TOKENS * width, POISON_BITS, 'head_in');
      const d = h.ops.rmsnorm('model.norm', h.uploadF32(x), h.uploadF32(weight), yBuf, { width, eps: 1e-5, seqLast: h.uploadU32(seqLast) });
      await h.run(d, { tokens, seqs: seqLast.length });
      const got = await h.readF32(yBuf, MAX_TOKENS * width);
      const S = seqLast.length;
      const want = reference(x, weight, width, 1e-5, seqLast);
      expectClose(`seqLast=[${seqLast}]`, got.subarray(0, S * width), want, tolFor(width, want));
      expectPoisoned(`seqLast=[${seqLast}]: rows >= seqs`, got, S * width, MAX_TOKENS * width);
    });
  }
});
