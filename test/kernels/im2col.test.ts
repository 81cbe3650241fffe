// im2col.wgsl through Ops.im2col: the columns of a 3-tap 1-D convolution with padding 1, in
// PyTorch's (channel-major) and MLX's (tap-major) flattening, strides 1 and 2, and a shape
// whose values need the second dispatch dimension (more than 65535 workgroups of 64). A
// gather copies values, so the columns must equal the reference exactly; rows past the
// step's tokens stay poisoned. The layernorm.wgsl OUT variant (Whisper's pre-norm) is checked
// beside it: the normed rows go to y and x is left as it was.
//
// LayerNorm tolerance: |got - want| <= (2 * width + 16) * 2^-24 * (|want| + 1): the f32 mean
// and the sum of squared deviations each carry relative error <= width * 2^-24 (gamma
// bound), reaching the normalised value (of order 1 over the row) through one subtract and
// the square root; inverseSqrt is allowed 2 ULP; the weight product and bias add round once each.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectClose, expectPoisoned, Harness, POISON_BITS, randomF32, rng } from './harness.js';

let h: Harness;
beforeAll(async () => { h = await Harness.open(); });
afterAll(() => h?.destroy());

function reference(x: Float32Array, channels: number, framesIn: number, framesOut: number, stride: number, tapMajor: boolean): Float32Array {
  const width = 3 * channels;
  const out = new Float32Array(framesOut * width);
  for (let t = 0; t < framesOut; t++) {
    for (let c = 0; c < channels; c++) {
      for (let k = 0; k < 3; k++) {
        const at = t * stride + k - 1;
        out[t * width + (tapMajor ? k * channels + c : c * 3 + k)] = at >= 0 && at < framesIn ? x[at * channels + c]! : 0;
      }
    }
  }
  return out;
}

describe('im2col', () => {
  for (const [channels, framesIn, stride, tapMajor] of [[5, 9, 1, false], [5, 9, 2, true], [64, 30, 2, false], [7, 4, 1, true]] as const) {
    it(`${channels} channels, ${framesIn} frames, stride ${stride}, ${tapMajor ? 'tap' : 'channel'}-major`, async () => {
      const framesOut = Math.floor((framesIn - 1) / stride) + 1;
      const x = randomF32(rng(channels * framesIn), framesIn * channels);
      const cols = h.poisoned((framesOut + 2) * 3 * channels, POISON_BITS, 'cols');
      await h.run(h.ops.im2col('cols', h.uploadF32(x), cols, { channels, framesIn, kernelSize: 3, stride, pad: 1, tapMajor }), { tokens: framesOut, seqs: 1 });
      const got = await h.readF32(cols, (framesOut + 2) * 3 * channels);
      expect([...got.subarray(0, framesOut * 3 * channels)]).toEqual([...reference(x, channels, framesIn, framesOut, stride, tapMajor)]);
      expectPoisoned('rows past the step', got, framesOut * 3 * channels, (framesOut + 2) * 3 * channels);
    });
  }

  it('spreads a large gather over the second dispatch dimension (1500 frames x 3 x 1024 channels)', async () => {
    const channels = 1024;
    const framesIn = 3000;
    const framesOut = 1500;
    const x = randomF32(rng(3), framesIn * channels);
    const cols = h.poisoned(framesOut * 3 * channels, POISON_BITS, 'cols');
    await h.run(h.ops.im2col('cols', h.uploadF32(x), cols, { channels, framesIn, kernelSize: 3, stride: 2, pad: 1, tapMajor: false }), { tokens: framesOut, seqs: 1 });
    const got = await h.readF32(cols, framesOut * 3 * channels);
    const want = reference(x, channels, framesIn, framesOut, 2, false);
    let mismatches = 0;
    for (let i = 0; i < want.length; i++) if (got[i] !== want[i]) mismatches++;
    expect(mismatches).toBe(0);
  });
});

describe('layernorm: the OUT variant', () => {
  it('writes LayerNorm(x) * weight + bias to y, leaving x', async () => {
    const width = 64;
    const rows = 5;
    const rand = rng(17);
    const x = randomF32(rand, rows * width, -3, 3);
    const weight = randomF32(rand, width, 0.5, 1.5);
    const bias = randomF32(rand, width, -0.5, 0.5);
    const xBuf = h.uploadF32(x);
    const y = h.poisoned((rows + 1) * width, POISON_BITS, 'y');
    await h.run(h.ops.layernorm('ln', xBuf, h.uploadF32(weight), h.uploadF32(bias), { width, eps: 1e-5, out: y }), { tokens: rows, seqs: 1 });
    const want = new Float64Array(rows * width);
    for (let r = 0; r < rows; r++) {
      const row = x.subarray(r * width, (r + 1) * width);
      const mean = row.reduce((a, v) => a + v, 0) / width;
      const sd = Math.sqrt(row.reduce((a, v) => a + (v - mean) ** 2, 0) / width + Math.fround(1e-5));
      for (let i = 0; i < width; i++) want[r * width + i] = ((row[i]! - mean) / sd) * weight[i]! + bias[i]!;
    }
    const got = await h.readF32(y, (rows + 1) * width);
    expectClose('y', got.subarray(0, rows * width), want, (i) => (2 * width + 16) * 2 ** -24 * (Math.abs(want[i]!) + 1));
    expectPoisoned('rows past the step', got, rows * width, (rows + 1) * width);
    expect([...(await h.readF32(xBuf, rows * width))]).toEqual([...x]);
  });
});
