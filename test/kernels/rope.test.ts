// rope.wgsl through Ops.rope: in-place rotary embedding with HF rotate_half pairing
// (i, i + head_dim/2) per head, angle = f32(pos) * inv_freq[i] from a host table, of q and
// k in one dispatch (each case runs both, with different head counts, and q alone); and
// with `norm`, fused after a per-head RMSNorm (Qwen3's q/k norm, each with its own
// weight), checked against the unfused math: RMSNorm, then RoPE, in float64.
//
// Tolerance: |got - want| <= 2^-11 * (|xa| + |xb|) + 2^-22 * |want|. The reference forms
// the angle exactly as the kernel does (one f32 product), then uses float64 cos/sin; WGSL
// only promises f32 cos/sin to 2^-11 absolute error, and each output is xa*c -/+ xb*s.
// With norm, the normed pair's own error (rmsnorm.test.ts: (head_dim + 16) * 2^-24
// relative) is added to the pair's bound. Positions stay below 2048 so angles are small enough for that bound to be meaningful on
// llvmpipe (its range reduction is measured below, not assumed, in 'large positions').
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectClose, expectUnchanged, Harness, randomF32, rng } from './harness.js';

let h: Harness;
beforeAll(async () => { h = await Harness.open(); });
afterAll(() => h?.destroy());

const MAX_TOKENS = 16;

function invFreq(headDim: number, theta: number): Float32Array {
  return Float32Array.from({ length: headDim / 2 }, (_, i) => Math.pow(theta, (-2 * i) / headDim));
}

function reference(x: Float32Array, pos: ArrayLike<number>, freq: Float32Array, M: number, heads: number, headDim: number) {
  const half = headDim / 2;
  const want = new Float64Array(M * heads * headDim);
  const tol = new Float64Array(M * heads * headDim);
  for (let m = 0; m < M; m++) {
    for (let hd = 0; hd < heads; hd++) {
      const row = (m * heads + hd) * headDim;
      for (let i = 0; i < half; i++) {
        const angle = Math.fround(pos[m]! * freq[i]!);
        const c = Math.cos(angle);
        const s = Math.sin(angle);
        const xa = x[row + i]!;
        const xb = x[row + i + half]!;
        want[row + i] = xa * c - xb * s;
        want[row + i + half] = xb * c + xa * s;
        const t = 2 ** -11 * (Math.abs(xa) + Math.abs(xb));
        tol[row + i] = t + 2 ** -22 * Math.abs(want[row + i]!);
        tol[row + i + half] = t + 2 ** -22 * Math.abs(want[row + i + half]!);
      }
    }
  }
  return { want, tol };
}

/**
 * Runs rope on q [MAX_TOKENS, heads, head_dim] and, with kvHeads > 0, k [MAX_TOKENS,
 * kvHeads, head_dim] in the same dispatch; rows >= M must come back bit-identical. Returns
 * q and k's results and references concatenated.
 */
async function runRope(heads: number, headDim: number, pos: number[], theta: number, seed: number, kvHeads = Math.max(1, heads - 1)) {
  const rand = rng(seed);
  const M = pos.length;
  const freq = invFreq(headDim, theta);
  const posBuf = h.uploadU32([...pos, ...new Array(MAX_TOKENS - M).fill(0)], 'token_pos');
  const inputs = [heads, kvHeads].filter((n) => n > 0).map((n, i) => {
    const x = randomF32(rand, MAX_TOKENS * n * headDim);
    return { x, buf: h.uploadF32(x, i === 0 ? 'q' : 'k'), heads: n };
  });
  const [q, k] = inputs;
  await h.run(h.ops.rope('rope', { x: q!.buf, heads }, k && { x: k.buf, heads: k.heads }, { headDim, tokenPos: posBuf, invFreq: h.uploadF32(freq) }), { tokens: M, seqs: 1 });
  const got: number[] = [];
  const want: number[] = [];
  const tol: number[] = [];
  for (const input of inputs) {
    const all = await h.readF32(input.buf, MAX_TOKENS * input.heads * headDim);
    const n = M * input.heads * headDim;
    expectUnchanged(`rope M=${M}, ${input.heads} heads: rows >= M`, all, input.x, n, all.length);
    const ref = reference(input.x, pos, freq, M, input.heads, headDim);
    got.push(...all.subarray(0, n));
    want.push(...ref.want);
    tol.push(...ref.tol);
  }
  return { got: Float32Array.from(got), want: Float64Array.from(want), tol: Float64Array.from(tol), n: got.length };
}

describe('rope', () => {
  const cases = [
    { heads: 3, headDim: 8, pos: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], theta: 10000 },
    { heads: 3, headDim: 8, pos: [17], theta: 10000 },
    { heads: 5, headDim: 128, pos: [0, 1, 2, 100, 101, 5, 6], theta: 10000 },
    { heads: 2, headDim: 128, pos: [1000, 1500, 2047, 3, 0], theta: 1e6 },
    { heads: 1, headDim: 64, pos: [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 11, 12, 13, 14, 15, 16], theta: 500000 },
  ];
  for (const c of cases) {
    it(`heads ${c.heads} head_dim ${c.headDim} positions [${c.pos}]`, async () => {
      const r = await runRope(c.heads, c.headDim, c.pos, c.theta, c.heads * 7 + c.headDim);
      expectClose('rope', r.got.subarray(0, r.n), r.want, (i) => r.tol[i]!);
    });
  }

  it('q alone (no k heads)', async () => {
    const r = await runRope(3, 8, [4, 9, 1], 10000, 41, 0);
    expectClose('rope q only', r.got.subarray(0, r.n), r.want, (i) => r.tol[i]!);
  });

  it('position 0 is the identity (bit-exact)', async () => {
    const r = await runRope(4, 16, [0, 0, 0], 10000, 99);
    expectClose('pos 0', r.got.subarray(0, r.n), r.want, () => 0);
  });

  it('large positions (up to 32767): error measured against the 2^-11 bound', async () => {
    const r = await runRope(2, 128, [4095, 8191, 16383, 32767], 10000, 5);
    let worst = 0;
    for (let i = 0; i < r.n; i++) worst = Math.max(worst, Math.abs(r.got[i]! - r.want[i]!) / r.tol[i]!);
    // Not a spec guarantee outside [-pi, pi]; a regression guard on the implementation.
    expect(worst, 'worst |err| / tol at large angles').toBeLessThanOrEqual(1);
  });
});

describe('rope with per-head RMSNorm (NORM)', () => {
  /** Per-head RMSNorm (as rmsnorm.wgsl rounds eps) then RoPE, in float64. */
  function normedReference(x: Float32Array, weight: Float32Array, eps: number, pos: number[], freq: Float32Array, heads: number, headDim: number) {
    const exact = new Float64Array(pos.length * heads * headDim);
    for (let r = 0; r < pos.length * heads; r++) {
      let ss = 0;
      for (let i = 0; i < headDim; i++) ss += x[r * headDim + i]! ** 2;
      const inv = 1 / Math.sqrt(ss / headDim + Math.fround(eps));
      for (let i = 0; i < headDim; i++) exact[r * headDim + i] = x[r * headDim + i]! * inv * weight[i]!;
    }
    const half = headDim / 2;
    const want = new Float64Array(exact.length);
    const tol = new Float64Array(exact.length);
    for (let r = 0; r < pos.length * heads; r++) {
      const m = Math.floor(r / heads);
      for (let i = 0; i < half; i++) {
        const angle = Math.fround(pos[m]! * freq[i]!);
        const [c, s] = [Math.cos(angle), Math.sin(angle)];
        const a = r * headDim + i;
        const b = a + half;
        const [ya, yb] = [exact[a]!, exact[b]!];
        want[a] = ya * c - yb * s;
        want[b] = yb * c + ya * s;
        const t = (2 ** -11 + (headDim + 16) * 2 ** -24) * (Math.abs(ya) + Math.abs(yb)) + 1e-35;
        tol[a] = t + 2 ** -22 * Math.abs(want[a]!);
        tol[b] = t + 2 ** -22 * Math.abs(want[b]!);
      }
    }
    return { want, tol };
  }

  const cases = [
    { heads: 3, kvHeads: 2, headDim: 8, pos: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12] },
    { heads: 16, kvHeads: 8, headDim: 128, pos: [5] },
    { heads: 8, kvHeads: 8, headDim: 128, pos: [0, 1, 2, 100, 101] },
    { heads: 1, kvHeads: 1, headDim: 64, pos: [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 11, 12, 13, 14, 15, 16] },
  ];
  for (const c of cases) {
    it(`q ${c.heads} heads, k ${c.kvHeads}, head_dim ${c.headDim}, ${c.pos.length} tokens`, async () => {
      const rand = rng(c.heads * 31 + c.headDim);
      const M = c.pos.length;
      const freq = invFreq(c.headDim, 1e6);
      const posBuf = h.uploadU32([...c.pos, ...new Array(MAX_TOKENS - M).fill(0)], 'token_pos');
      // Per-head magnitudes from 1e-4 (eps dominates) to 1e3, and a head of zeros.
      const mags = [1, 1e-4, 1e3, 0, 0.01, 30];
      const inputs = [c.heads, c.kvHeads].map((heads, j) => {
        const rows = MAX_TOKENS * heads;
        const x = new Float32Array(rows * c.headDim);
        for (let r = 0; r < rows; r++) for (let i = 0; i < c.headDim; i++) x[r * c.headDim + i] = mags[(r + j) % mags.length]! * (2 * rand() - 1);
        const weight = randomF32(rand, c.headDim, 0.5, 1.5);
        return { heads, x, weight, buf: h.uploadF32(x, j === 0 ? 'q' : 'k') };
      });
      const [q, k] = inputs.map((i) => ({ x: i.buf, heads: i.heads, norm: h.uploadF32(i.weight) }));
      await h.run(h.ops.rope('rope', q!, k, { headDim: c.headDim, tokenPos: posBuf, invFreq: h.uploadF32(freq), eps: 1e-6 }), { tokens: M, seqs: 1 });
      for (const [j, input] of inputs.entries()) {
        const what = j === 0 ? 'q' : 'k';
        const got = await h.readF32(input.buf, input.x.length);
        const n = M * input.heads * c.headDim;
        const ref = normedReference(input.x, input.weight, 1e-6, c.pos, freq, input.heads, c.headDim);
        expectClose(`norm + rope (${what})`, got.subarray(0, n), ref.want, (i) => ref.tol[i]!);
        expectUnchanged(`norm + rope (${what}) M=${M}: rows >= M`, got, input.x, n, input.x.length);
      }
    });
  }
});
