// rope.wgsl through Ops.rope: in-place rotary embedding with HF rotate_half pairing
// (i, i + head_dim/2) per head, angle = f32(pos) * inv_freq[i] from a host table.
//
// Tolerance: |got - want| <= 2^-11 * (|xa| + |xb|) + 2^-22 * |want|. The reference forms
// the angle exactly as the kernel does (one f32 product), then uses float64 cos/sin; WGSL
// only promises f32 cos/sin to 2^-11 absolute error, and each output is xa*c -/+ xb*s.
// Positions stay below 2048 so angles are small enough for that bound to be meaningful on
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

/** Runs rope on a [MAX_TOKENS, heads, head_dim] buffer; rows >= M must come back bit-identical. */
async function runRope(heads: number, headDim: number, pos: number[], theta: number, seed: number) {
  const rand = rng(seed);
  const M = pos.length;
  const freq = invFreq(headDim, theta);
  const x = randomF32(rand, MAX_TOKENS * heads * headDim);
  const xBuf = h.uploadF32(x, 'q');
  const posBuf = h.uploadU32([...pos, ...new Array(MAX_TOKENS - M).fill(0)], 'token_pos');
  await h.run(h.ops.rope('rope', xBuf, heads, headDim, posBuf, h.uploadF32(freq)), { tokens: M, seqs: 1 });
  const got = await h.readF32(xBuf, MAX_TOKENS * heads * headDim);
  const ref = reference(x, pos, freq, M, heads, headDim);
  expectUnchanged(`rope M=${M}: rows >= M`, got, x, M * heads * headDim, MAX_TOKENS * heads * headDim);
  return { got, ...ref, n: M * heads * headDim };
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
