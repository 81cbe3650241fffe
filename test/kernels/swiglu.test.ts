// glu.wgsl through Ops.glu (SiLU): gate = silu(gate) * up = gate / (1 + exp(-gate)) * up in
// place over [M, width], including gates large enough that exp(-gate) overflows f32; rows
// past M stay untouched.
//
// Tolerance: |got - want| <= (8 + 2 |gate|) * 2^-23 * |want| + 2^-118: WGSL allows exp
// 3 + 2|x| ULP (its effect on 1 + exp(-g) is damped, never amplified), the division 2.5 ULP
// and the add and product 1 ULP each; 2^-118 (3e-36) admits -0 once exp(-gate) overflows
// f32 (gate < -88.7, where |want| < 1e-36) and flushed subnormals.
import { afterAll, beforeAll, describe, it } from 'vitest';
import { expectClose, expectPoisoned, Harness, POISON_BITS, randomF32, rng } from './harness.js';

let h: Harness;
beforeAll(async () => { h = await Harness.open(); });
afterAll(() => h?.destroy());

const MAX_TOKENS = 16;
const EXTREMES = [0, -0, 1e-8, -1e-8, 20, -20, 30, -30, 87, -87, 89, -89, 100, -100, 1e4, -1e4];

describe('swiglu', () => {
  for (const width of [172, 4, 1028]) {
    it(`width ${width}, M = 13, 1, 5, 16`, async () => {
      const rand = rng(width);
      const n = MAX_TOKENS * width;
      const gateBuf = h.poisoned(n, POISON_BITS, 'gate');
      const upBuf = h.poisoned(n, POISON_BITS, 'up');
      const d = h.ops.glu(gateBuf, upBuf, width);
      for (const M of [13, 1, 5, 16]) {
        const gate = randomF32(rand, n, -8, 8);
        const up = randomF32(rand, n, -2, 2);
        for (let i = 0; i < EXTREMES.length && i < M * width; i++) gate[(i * 37) % (M * width)] = EXTREMES[i]!;
        // Rows >= M: poison, which must be neither used nor overwritten.
        new Uint32Array(gate.buffer).fill(POISON_BITS, M * width);
        h.write(gateBuf, gate);
        h.write(upBuf, up);
        await h.run(d, { tokens: M, seqs: 1 });
        const got = await h.readF32(gateBuf, n);
        const want = new Float64Array(M * width);
        for (let i = 0; i < M * width; i++) {
          const g = gate[i]!;
          want[i] = (g / (1 + Math.exp(-g))) * up[i]!;
        }
        expectClose(`width ${width} M=${M}`, got.subarray(0, M * width), want, (i) => (8 + 2 * Math.abs(gate[i]!)) * 2 ** -23 * Math.abs(want[i]!) + 2 ** -118);
        expectPoisoned(`width ${width} M=${M}: rows >= M`, got, M * width, n);
      }
    });
  }
});
