// embedding.wgsl through Ops.embedding: out[m, :] = W[token[m], :] decoded from each weight
// format, with the table split into parts (each part writes only the ids it holds).
//
// Tolerance: exact for f32/f16/bf16 (a gather of values that are exact in f32). For the
// affine formats (2- to 8-bit), |got - want| <= 2^-22 * (2 |want| + 4): the kernel may round
// q * scale and then the sum (two f32 roundings, 2^-24 |q * scale| + 2^-24 |want|) where the
// reference rounds once; with the table in [-2, 2] every |bias| <= 2, so
// |q * scale| <= |want| + 2, and the bound has a 4x margin.
import { afterAll, beforeAll, describe, it } from 'vitest';
import { isAffine, type WeightFormat } from '../../src/runtime/kernel-source.js';
import { expectClose, expectPoisoned, Harness, randomF32, randomInts, rng } from './harness.js';

let h: Harness;
beforeAll(async () => { h = await Harness.open(); });
afterAll(() => h?.destroy());

const VOCAB = 513;
const MAX_ROWS = 16;

interface Case { format: WeightFormat; K: number; groupSize?: number; parts?: number[]; seed: number }

async function runCase(c: Case): Promise<void> {
  const rand = rng(c.seed);
  const { K } = c;
  const table = randomF32(rand, VOCAB * K, -2, 2);
  const w = h.weight(table, VOCAB, K, c.format, { groupSize: c.groupSize, parts: c.parts });
  const quantized = isAffine(c.format);
  const tokensBuf = h.uploadU32(new Uint32Array(MAX_ROWS), 'tokens');
  const outBuf = h.poisoned(MAX_ROWS * K, undefined, 'out');
  const dispatches = h.ops.embedding(w.gpu, tokensBuf, outBuf);
  // Ids at both ends of the table and of every part, repeats, and random ones.
  const edges = [0, VOCAB - 1];
  let start = 0;
  for (const n of c.parts ?? []) { edges.push(start, start + n - 1); start += n; }
  const fixed = [...edges, 7, 7];
  for (const M of [13, 1, 5, 16]) {
    const ids = randomInts(rand, MAX_ROWS, VOCAB);
    for (let i = 0; i < Math.min(M, fixed.length); i++) ids[(i * 5) % M] = fixed[i]!;
    h.write(tokensBuf, ids);
    h.poison(outBuf, MAX_ROWS * K);
    await h.run(dispatches, { tokens: M, seqs: 1 });
    const got = await h.readF32(outBuf, MAX_ROWS * K);
    const want = new Float64Array(M * K);
    for (let m = 0; m < M; m++) for (let k = 0; k < K; k++) want[m * K + k] = w.effective[ids[m]! * K + k]!;
    expectClose(`${c.format} K=${K} M=${M}`, got.subarray(0, M * K), want, (i) => (quantized ? 2 ** -22 * (2 * Math.abs(want[i]!) + 4) : 0));
    expectPoisoned(`${c.format} M=${M}: rows >= M`, got, M * K, MAX_ROWS * K);
  }
}

describe('embedding: vocab 513, every format', () => {
  for (const format of ['f32', 'f16', 'bf16'] as const) {
    it(`${format} K=172`, () => runCase({ format, K: 172, seed: 1 }));
    it(`${format} K=172 in 3 parts [200, 1, 312]`, () => runCase({ format, K: 172, parts: [200, 1, 312], seed: 2 }));
  }
  it('f32 K=4 (one quad per row)', () => runCase({ format: 'f32', K: 4, parts: [256, 257], seed: 3 }));
  it('f16 K=300 (more than one 64-wide workgroup of quads)', () => runCase({ format: 'f16', K: 300, seed: 4 }));
  it('each part alone writes exactly the rows whose ids it holds', async () => {
    // Dispatched together, a later part would overwrite a row an earlier part wrote wrongly;
    // alone, a part must leave rows of other parts' ids poisoned.
    const K = 32;
    const parts = [200, 1, 312];
    for (const format of ['f32', 'q8'] as const) {
      const rand = rng(9);
      const w = h.weight(randomF32(rand, VOCAB * K), VOCAB, K, format, { groupSize: 32, parts });
      const ids = Uint32Array.from([0, 199, 200, 201, 512, 200, 5, 201, 199, 300, 450, 100, 1]);
      const M = ids.length;
      const outBuf = h.poisoned(MAX_ROWS * K);
      const dispatches = h.ops.embedding(w.gpu, h.uploadU32(ids), outBuf);
      let start = 0;
      for (const [pi, n] of parts.entries()) {
        h.poison(outBuf, MAX_ROWS * K);
        await h.run(dispatches[pi]!, { tokens: M, seqs: 1 });
        const got = await h.readF32(outBuf, MAX_ROWS * K);
        for (let m = 0; m < MAX_ROWS; m++) {
          const row = got.subarray(m * K, (m + 1) * K);
          const mine = m < M && ids[m]! >= start && ids[m]! < start + n;
          if (mine) expectClose(`${format} part ${pi} row ${m} (id ${ids[m]})`, row, w.effective.subarray(ids[m]! * K, (ids[m]! + 1) * K), () => 2 ** -20); // q8: two roundings of q*s+b, |w| < 1
          else expectPoisoned(`${format} part ${pi} row ${m} (id ${ids[m]})`, row, 0, K);
        }
        start += n;
      }
    }
  });
  for (const [format, groupSize, K] of [['q4', 32, 160], ['q4', 64, 192], ['q8', 32, 96], ['q8', 128, 256]] as const) {
    it(`${format} group ${groupSize} K=${K}`, () => runCase({ format, K, groupSize, seed: 5 }));
    it(`${format} group ${groupSize} K=${K} in 2 parts [100, 413]`, () => runCase({ format, K, groupSize, parts: [100, 413], seed: 6 }));
  }
  // Quads of 3-, 5- and 6-bit values that straddle words, rows padded to whole texels.
  for (const [format, groupSize, K] of [['q2', 32, 96], ['q3', 64, 192], ['q5', 128, 256], ['q6', 32, 160]] as const) {
    it(`${format} group ${groupSize} K=${K} in 2 parts [100, 413]`, () => runCase({ format, K, groupSize, parts: [100, 413], seed: 7 }));
  }
});
