// glu.wgsl through Ops.glu (SiLU): gate = silu(gate) * up = gate / (1 + exp(-gate)) * up in
// place over [M, width], including gates large enough that exp(-gate) overflows f32; rows
// past M stay untouched; a range of more workgroups than one dimension takes.
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

  it('a range over 65535 workgroups: a SigLIP MLP\'s 4096 patches x 4304, laid over two dimensions', async () => {
    const [M, width] = [4096, 4304];
    const n = M * width;
    // Periodic values (random ones cost seconds at this size); the check reads a sample and
    // the whole tail past the first dimension's 65535 x 64 invocations of 4 elements.
    const gate = new Float32Array(n).map((_, i) => ((i % 17) - 8) * 0.75);
    const up = new Float32Array(n).map((_, i) => ((i % 13) - 6) * 0.25);
    const gateBuf = h.uploadBytes(new Uint8Array(gate.buffer), 'gate');
    await h.run(h.ops.glu(gateBuf, h.uploadBytes(new Uint8Array(up.buffer), 'up'), width), { tokens: M, seqs: 1 });
    const got = await h.readF32(gateBuf, n);
    const firstDimension = 65535 * 64 * 4;
    const checked = [...Array.from({ length: Math.ceil(firstDimension / 997) }, (_, k) => k * 997), ...Array.from({ length: n - firstDimension }, (_, k) => firstDimension + k)];
    const silu = (i: number) => (gate[i]! / (1 + Math.exp(-gate[i]!))) * up[i]!;
    expectClose(`width ${width} M=${M}`, Float32Array.from(checked, (i) => got[i]!), Float64Array.from(checked, silu), (k) => (8 + 2 * Math.abs(gate[checked[k]!]!)) * 2 ** -23 * Math.abs(silu(checked[k]!)) + 2 ** -118);
  });
});
