// The recurrent layers' kernels against a CPU reference (f64, token by token from a zero
// state): ssm_conv.wgsl (Mamba-2's conv with bias and SiLU; LFM2's gated conv) and
// the selective scan (4 heads of 8 channels in 2 groups, state size 16) in both layouts
// (a CPU adapter's: ssm_scan.wgsl walks every chunk; a GPU's: ssm_scan_chunk.wgsl over
// chunks of several tokens, in parallel over 16 segments of their positions, and
// ssm_scan.wgsl over decode steps), and rmsnorm_gated.wgsl. Two sequences in their own
// state slots run (a) each whole in one pass (37 tokens: segments of 3, the last one
// short; 5 tokens: segments of one and empty ones) and (b) in chunks that split the conv
// window and the scan (20 + 13 tokens, then single decode steps, beside the other
// sequence's chunks of 2 and 3): both give the reference's outputs and final states, so a
// chunked prefill equals token-by-token decode.
// Tolerance: every output is a sum of at most 16 f32 products a few steps deep (the conv's
// 4 taps, the scan's 16 state values carried over <= 37 tokens with exp and softplus within
// a few ULP, the segments' decay products regrouping the same factors); each value within
// 1e-5 of the magnitudes it is made from plus 1e-6, orders of magnitude below what a lost
// state, a tap off by one, a segment carried wrong or the wrong group gives.
import { afterAll, beforeAll, describe, it } from 'vitest';
import { expectClose, Harness, randomF32, rng } from './harness.js';

let h: Harness;
/** The scans' two layouts: a CPU adapter's walk over every chunk, a GPU's chunked-parallel scan beside the decode steps' walk. */
const harness = {} as Record<'cpu' | 'gpu', Harness>;
beforeAll(async () => {
  h = harness.cpu = await Harness.open();
  harness.gpu = await Harness.open({ asGpu: true });
});
afterAll(() => {
  h?.destroy();
  harness.gpu?.destroy();
});

const H = 4;
const P = 8;
const G = 2;
const N = 16;
const K = 4;
const INNER = H * P;
const CONV = INNER + 2 * G * N;
const PROJ = 2 * INNER + 2 * G * N + H;
const LENGTHS = [37, 5];
const SLOTS = 2;
const TOL = (mag: number) => 1e-5 * mag + 1e-6;

const silu = (x: number) => x / (1 + Math.exp(-x));
const softplus = (x: number) => (x > 20 ? x : Math.log1p(Math.exp(x)));

/** A sequence's conv over `input(t, c)` from a zero window: [T, channels]. */
function convRef(T: number, channels: number, w: Float32Array, bias: Float32Array | undefined, input: (t: number, c: number) => number, post: (t: number, c: number, v: number) => number) {
  const out = new Float64Array(T * channels);
  const state = new Float64Array((K - 1) * channels);
  for (let c = 0; c < channels; c++) {
    const win = new Array<number>(K - 1).fill(0);
    for (let t = 0; t < T; t++) {
      const u = input(t, c);
      let acc = u * w[c * K + K - 1]!;
      for (let k = 0; k < K - 1; k++) acc += win[k]! * w[c * K + k]!;
      win.shift();
      win.push(u);
      out[t * channels + c] = post(t, c, acc + (bias ? bias[c]! : 0));
    }
    for (let k = 0; k < K - 1; k++) state[k * channels + c] = win[k]!;
  }
  return { out, state };
}

/** The selective scan of one sequence from a zero state: y [T, INNER] and the state [H, P, N]. */
function scanRef(T: number, xbc: Float64Array, proj: Float32Array, aLog: Float32Array, dtBias: Float32Array, d: Float32Array) {
  const y = new Float64Array(T * INNER);
  const s = new Float64Array(H * P * N);
  for (let t = 0; t < T; t++) {
    for (let hh = 0; hh < H; hh++) {
      const g = Math.floor(hh / (H / G));
      const dt = softplus(proj[t * PROJ + INNER + CONV + hh]! + dtBias[hh]!);
      const decay = Math.exp(-dt * Math.exp(aLog[hh]!));
      for (let p = 0; p < P; p++) {
        const x = xbc[t * CONV + hh * P + p]!;
        let acc = 0;
        for (let n = 0; n < N; n++) {
          const i = (hh * P + p) * N + n;
          s[i] = decay * s[i]! + dt * x * xbc[t * CONV + INNER + g * N + n]!;
          acc += xbc[t * CONV + INNER + G * N + g * N + n]! * s[i]!;
        }
        y[t * INNER + hh * P + p] = acc + d[hh]! * x;
      }
    }
  }
  return { y, s };
}

/** Steps of chunks: [sequence, first token, tokens]. */
type Plan = Array<Array<[number, number, number]>>;
const WHOLE: Plan = [[[0, 0, 37], [1, 0, 5]]];
const SPLIT: Plan = [[[0, 0, 20], [1, 0, 2]], [[0, 20, 13], [1, 2, 3]], [[0, 33, 1]], [[0, 34, 1]], [[0, 35, 1]], [[0, 36, 1]]];

describe('ssm_conv + ssm_scan', () => {
  const rand = rng(40);
  const seqs = LENGTHS.map((T) => randomF32(rand, T * PROJ, -1, 1));
  const convW = randomF32(rand, CONV * K, -0.6, 0.6);
  const convB = randomF32(rand, CONV, -0.3, 0.3);
  const aLog = Float32Array.from({ length: H }, () => Math.log(0.05 + 0.45 * rand()));
  const dtBias = randomF32(rand, H, -3, -1);
  const d = randomF32(rand, H, 0.5, 1.5);
  const ref = seqs.map((proj, i) => {
    const T = LENGTHS[i]!;
    const conv = convRef(T, CONV, convW, convB, (t, c) => proj[t * PROJ + INNER + c]!, (_t, _c, v) => silu(v));
    return { conv, scan: scanRef(T, conv.out, proj, aLog, dtBias, d) };
  });
  const mag = (v: ArrayLike<number>) => Math.max(...Array.from(v, Math.abs));

  for (const [label, plan] of [['each sequence in one pass', WHOLE], ['chunks splitting the conv window and the scan, then decode steps', SPLIT]] as const) {
    for (const layout of ['cpu', 'gpu'] as const) it(`${label} (${layout} layout)`, async () => {
      const h = harness[layout];
      const MAXT = 48;
      const chunks = h.activation(4 * MAXT, 'chunks');
      const proj = h.activation(MAXT * PROJ, 'proj');
      const xbc = h.activation(MAXT * CONV, 'xbc');
      const y = h.activation(MAXT * INNER, 'y');
      // Poisoned states: a chunk at position 0 must not read them.
      const convState = h.activation(SLOTS * (K - 1) * CONV, 'conv_state');
      const ssmState = h.activation(SLOTS * INNER * N, 'ssm_state');
      const dispatches = [
        h.ops.ssmConv('conv', chunks, proj, h.uploadF32(convW), convState, xbc, { channels: CONV, inStride: PROJ, inOffset: INNER, kernel: K, gated: false, bias: h.uploadF32(convB) }),
        ...h.ops.ssmScan('scan', chunks, xbc, proj, { aLog: h.uploadF32(aLog), dtBias: h.uploadF32(dtBias), d: h.uploadF32(d) }, ssmState, y, {
          heads: H, headDim: P, groups: G, stateSize: N, convDim: CONV, projStride: PROJ, dtOffset: INNER + CONV,
        }),
      ];
      const got = LENGTHS.map((T) => ({ xbc: new Float32Array(T * CONV), y: new Float32Array(T * INNER) }));
      for (const step of plan) {
        const meta: number[] = [];
        const rows: number[] = [];
        let at = 0;
        for (const [s, first, n] of step) {
          meta.push(at, n, s, first);
          rows.push(...seqs[s]!.subarray(first * PROJ, (first + n) * PROJ));
          at += n;
        }
        h.write(chunks, Uint32Array.from(meta));
        h.write(proj, Float32Array.from(rows));
        await h.run(dispatches, { tokens: at, seqs: 0, chunks: step.length });
        const outX = await h.readF32(xbc, at * CONV);
        const outY = await h.readF32(y, at * INNER);
        at = 0;
        for (const [s, first, n] of step) {
          got[s]!.xbc.set(outX.subarray(at * CONV, (at + n) * CONV), first * CONV);
          got[s]!.y.set(outY.subarray(at * INNER, (at + n) * INNER), first * INNER);
          at += n;
        }
      }
      const states = { conv: await h.readF32(convState, SLOTS * (K - 1) * CONV), ssm: await h.readF32(ssmState, SLOTS * INNER * N) };
      for (const [s, r] of ref.entries()) {
        expectClose(`seq ${s} conv`, got[s]!.xbc, r.conv.out, () => TOL(mag(r.conv.out)));
        expectClose(`seq ${s} scan`, got[s]!.y, r.scan.y, () => TOL(mag(r.scan.y)));
        expectClose(`seq ${s} conv state`, states.conv.subarray(s * (K - 1) * CONV, (s + 1) * (K - 1) * CONV), r.conv.state, () => TOL(1));
        expectClose(`seq ${s} ssm state`, states.ssm.subarray(s * INNER * N, (s + 1) * INNER * N), r.scan.s, () => TOL(mag(r.scan.s)));
      }
    });
  }

  it('the gated short conv (LFM2), split into chunks, and the gated grouped RMSNorm', async () => {
    const C = 32;
    const T = 7;
    const bcx = randomF32(rand, T * 3 * C, -1, 1);
    const w = randomF32(rand, C * K, -0.6, 0.6);
    const want = convRef(T, C, w, undefined, (t, c) => bcx[t * 3 * C + c]! * bcx[t * 3 * C + 2 * C + c]!, (t, c, v) => bcx[t * 3 * C + C + c]! * v);
    const chunks = h.activation(16, 'chunks');
    const x = h.activation(T * 3 * C, 'bcx');
    const out = h.activation(T * C, 'out');
    const state = h.activation((K - 1) * C, 'state');
    const conv = h.ops.ssmConv('short_conv', chunks, x, h.uploadF32(w), state, out, { channels: C, inStride: 3 * C, inOffset: 0, kernel: K, gated: true });
    const got = new Float32Array(T * C);
    for (const [first, n] of [[0, 2], [2, 1], [3, 4]] as const) {
      h.write(chunks, Uint32Array.from([0, n, 0, first]));
      h.write(x, bcx.subarray(first * 3 * C, (first + n) * 3 * C));
      await h.run(conv, { tokens: n, seqs: 0, chunks: 1 });
      got.set(await h.readF32(out, n * C), first * C);
    }
    expectClose('short conv', got, want.out, () => TOL(mag(want.out)));

    // y * silu(z) normed over groups of 8 of 32, z at column 0 of rows of 40.
    const yHost = randomF32(rand, T * C, -2, 2);
    const z = randomF32(rand, T * 40, -2, 2);
    const weight = randomF32(rand, C, 0.5, 1.5);
    const yBuf = h.uploadF32(yHost);
    await h.run(h.ops.rmsnormGated('norm', yBuf, h.uploadF32(z), h.uploadF32(weight), { width: C, group: 8, zStride: 40, eps: 1e-5 }), { tokens: T, seqs: 0 });
    const normed = new Float64Array(T * C);
    for (let t = 0; t < T; t++) {
      for (let g = 0; g < C / 8; g++) {
        const v = Array.from({ length: 8 }, (_, i) => yHost[t * C + g * 8 + i]! * silu(z[t * 40 + g * 8 + i]!));
        const inv = 1 / Math.sqrt(v.reduce((a, b) => a + b * b, 0) / 8 + 1e-5);
        v.forEach((vi, i) => { normed[t * C + g * 8 + i] = vi * inv * weight[g * 8 + i]!; });
      }
    }
    expectClose('gated norm', await h.readF32(yBuf, T * C), normed, () => TOL(mag(normed)));
  });
});
