// rope_kv_write.wgsl through Ops.ropeKvWrite: rotary embedding with HF rotate_half pairing
// (i, i + head_dim/2) per head, angle = f32(pos) * inv_freq[i] from a host table, of q in
// place and of k into the paged KV cache, with v copied there, in one dispatch; and with a
// head norm, fused after a per-head RMSNorm (Qwen3's q/k norm, each with its own weight),
// checked against the unfused math: RMSNorm, then RoPE, in float64. The cache is poisoned
// and each token given a block of its own, reached through a block table of poison but for
// the one entry its position selects, so a write to the wrong slot shows up; v must land
// bit-exact, and every slot not written must keep its poison. With MROPE (Qwen2.5-VL), each
// pair's position is its section's stream of the token's three, the same bound applying.
//
// Tolerance: |got - want| <= 2^-11 * (|xa| + |xb|) + 2^-22 * |want|. The reference forms
// the angle exactly as the kernel does (one f32 product), then uses float64 cos/sin; WGSL
// only promises f32 cos/sin to 2^-11 absolute error, and each output is xa*c -/+ xb*s.
// With norm, the normed pair's own error (rmsnorm.test.ts: (head_dim + 16) * 2^-24
// relative) is added to the pair's bound. Positions stay below 2048 so angles are small enough for that bound to be meaningful on
// llvmpipe (its range reduction is measured below, not assumed, in 'large positions').
// Into an f16 cache, k's bound grows by the store's rounding (2^-11 |want|) and v must be
// v rounded to f16, bit for bit.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { KvType } from '../../src/runtime/tensors.js';
import { expectClose, expectUnchanged, Harness, kvRound, POISON_BITS, randomF32, rng } from './harness.js';

let h: Harness;
beforeAll(async () => { h = await Harness.open(); });
afterAll(() => h?.destroy());

const MAX_TOKENS = 16;

function invFreq(headDim: number, theta: number): Float32Array {
  return Float32Array.from({ length: headDim / 2 }, (_, i) => Math.pow(theta, (-2 * i) / headDim));
}

/** `pos(m, i)`: the position pair i of token m turns by. */
function reference(x: Float32Array, pos: (m: number, i: number) => number, freq: Float32Array, M: number, heads: number, headDim: number) {
  const half = headDim / 2;
  const want = new Float64Array(M * heads * headDim);
  const tol = new Float64Array(M * heads * headDim);
  for (let m = 0; m < M; m++) {
    for (let hd = 0; hd < heads; hd++) {
      const row = (m * heads + hd) * headDim;
      for (let i = 0; i < half; i++) {
        const angle = Math.fround(pos(m, i) * freq[i]!);
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

const BLOCK = 64;

interface RopeKvRun {
  heads: number;
  kvHeads: number;
  headDim: number;
  pos: number[];
  freq: Float32Array;
  /** [MAX_TOKENS, heads, head_dim] and [MAX_TOKENS, kv_heads, head_dim]. */
  q: Float32Array;
  k: Float32Array;
  v: Float32Array;
  /** q's head-norm weight, then k's. */
  headNorm?: Float32Array;
  /** The cache's type (default f32). */
  type?: KvType;
  /** Multimodal RoPE: the sections and each token's (t, h, w) positions. */
  mrope?: { sections: [number, number]; positions: number[] };
}

/**
 * Runs Ops.ropeKvWrite over M = pos.length tokens, token m in a block of its own: returns q
 * (all MAX_TOKENS rows; rows >= M must come back bit-identical) and the first M tokens' k
 * and v rows as read back from the cache, after checking every other cache slot kept its
 * poison.
 */
async function runRopeKv(r: RopeKvRun): Promise<{ q: Float32Array; k: Float32Array; v: Float32Array }> {
  const M = r.pos.length;
  const kvDim = r.kvHeads * r.headDim;
  const pad = (a: number[]) => [...a, ...new Array(MAX_TOKENS - a.length).fill(POISON_BITS)];
  const tokenTable: number[] = [];
  const blockTable: number[] = [];
  r.pos.forEach((p, m) => {
    tokenTable.push(blockTable.length);
    blockTable.push(...new Array(Math.floor(p / BLOCK)).fill(POISON_BITS), m);
  });
  const slot = (m: number) => m * BLOCK + (r.pos[m]! % BLOCK);
  const cacheWords = MAX_TOKENS * BLOCK * kvDim;
  const qBuf = h.uploadF32(r.q, 'q');
  const poison = new Float32Array(cacheWords);
  new Uint32Array(poison.buffer).fill(POISON_BITS);
  const type = r.type ?? 'f32';
  const kCache = h.kvCache(poison, 'k_cache', type);
  const vCache = h.kvCache(poison, 'v_cache', type);
  const meta = {
    tokenPos: h.uploadU32(pad(r.pos), 'token_pos'), tokenTable: h.uploadU32(pad(tokenTable), 'token_table'), blockTable: h.uploadU32(blockTable, 'block_table'),
    ropePos: r.mrope && h.uploadU32(r.mrope.positions, 'rope_pos'),
  };
  await h.run(h.ops.ropeKvWrite('rope_kv_write', {
    q: qBuf, k: h.uploadF32(r.k, 'k'), v: h.uploadF32(r.v, 'v'), heads: r.heads, kvHeads: r.kvHeads, cache: { k: kCache, v: vCache }, blockSize: BLOCK,
  }, { headDim: r.headDim, invFreq: h.uploadF32(r.freq), headNorm: r.headNorm && h.uploadF32(r.headNorm), eps: 1e-6, mrope: r.mrope && { sections: r.mrope.sections } }, meta), { tokens: M, seqs: 1 });
  const q = await h.readF32(qBuf, r.q.length);
  expectUnchanged(`q M=${M}: rows >= M`, q, r.q, M * r.heads * r.headDim, r.q.length);
  const rows = async (cache: GPUTexture, what: string) => {
    const all = await h.readKvCache(cache, cacheWords);
    const out = new Float32Array(M * kvDim);
    const written = new Set(r.pos.map((_, m) => slot(m)));
    for (let m = 0; m < M; m++) out.set(all.subarray(slot(m) * kvDim, (slot(m) + 1) * kvDim), m * kvDim);
    const untouched = new Float32Array(cacheWords);
    new Uint32Array(untouched.buffer).fill(POISON_BITS);
    for (const s of written) untouched.set(all.subarray(s * kvDim, (s + 1) * kvDim), s * kvDim);
    expectUnchanged(`${what}: slots not written`, all, kvRound(untouched, type), 0, cacheWords);
    return out;
  };
  const k = await rows(kCache, 'k_cache');
  const v = await rows(vCache, 'v_cache');
  expectUnchanged(`v_cache M=${M}: v copied`, v, kvRound(r.v.slice(0, M * kvDim), type), 0, M * kvDim);
  return { q, k, v };
}

/** rope over q and k [MAX_TOKENS, heads, head_dim] of random values: results and references of q's and k's first M rows, concatenated. */
async function runRope(heads: number, headDim: number, pos: number[], theta: number, seed: number, kvHeads = Math.max(1, heads - 1), type: KvType = 'f32') {
  const rand = rng(seed);
  const M = pos.length;
  const freq = invFreq(headDim, theta);
  const q = randomF32(rand, MAX_TOKENS * heads * headDim);
  const k = randomF32(rand, MAX_TOKENS * kvHeads * headDim);
  const out = await runRopeKv({ heads, kvHeads, headDim, pos, freq, q, k, v: randomF32(rand, MAX_TOKENS * kvHeads * headDim), type });
  const refQ = reference(q, (m) => pos[m]!, freq, M, heads, headDim);
  const refK = reference(k, (m) => pos[m]!, freq, M, kvHeads, headDim);
  // An f16 store rounds to nearest: half an f16 ulp, 2^-11 relative, more.
  if (type === 'f16') refK.tol.forEach((t, i) => (refK.tol[i] = t + 2 ** -11 * Math.abs(refK.want[i]!)));
  const got = Float32Array.from([...out.q.subarray(0, M * heads * headDim), ...out.k]);
  return { got, want: Float64Array.from([...refQ.want, ...refK.want]), tol: Float64Array.from([...refQ.tol, ...refK.tol]), n: got.length };
}

describe('rope_kv_write', () => {
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

  it('f16 cache: k rotated then rounded to f16, v rounded to f16 exactly, other slots untouched', async () => {
    const r = await runRope(5, 128, [0, 1, 2, 100, 101, 5, 6], 10000, 41, 4, 'f16');
    expectClose('rope f16', r.got.subarray(0, r.n), r.want, (i) => r.tol[i]!);
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

describe('rope_kv_write with multimodal RoPE (MROPE)', () => {
  it('turns each rotary pair by its section\'s position stream, sections ending inside a vec4, and writes the cache at token_pos', async () => {
    const [heads, kvHeads, headDim] = [2, 1, 16];
    const rand = rng(77);
    const pos = [0, 1, 2, 3, 4];
    // (t, h, w) per token, unrelated to its cache position.
    const positions = [5, 5, 5, 9, 9, 10, 9, 10, 9, 300, 2, 7, 0, 0, 40];
    const sections: [number, number] = [2, 3];
    const stream = (i: number) => (i < sections[0] ? 0 : i < sections[0] + sections[1] ? 1 : 2);
    const at = (m: number, i: number) => positions[3 * m + stream(i)]!;
    const freq = invFreq(headDim, 10000);
    const q = randomF32(rand, MAX_TOKENS * heads * headDim);
    const k = randomF32(rand, MAX_TOKENS * kvHeads * headDim);
    const out = await runRopeKv({ heads, kvHeads, headDim, pos, freq, q, k, v: randomF32(rand, MAX_TOKENS * kvHeads * headDim), mrope: { sections, positions } });
    for (const [what, x, got, n] of [['q', q, out.q, heads], ['k', k, out.k, kvHeads]] as const) {
      const ref = reference(x, at, freq, pos.length, n, headDim);
      expectClose(`mrope (${what})`, got.subarray(0, pos.length * n * headDim), ref.want, (i) => ref.tol[i]!);
    }
  });
});

describe('rope_kv_write with per-head RMSNorm (NORM)', () => {
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
      // Per-head magnitudes from 1e-4 (eps dominates) to 1e3, and a head of zeros.
      const mags = [1, 1e-4, 1e3, 0, 0.01, 30];
      const inputs = [c.heads, c.kvHeads].map((heads, j) => {
        const rows = MAX_TOKENS * heads;
        const x = new Float32Array(rows * c.headDim);
        for (let r = 0; r < rows; r++) for (let i = 0; i < c.headDim; i++) x[r * c.headDim + i] = mags[(r + j) % mags.length]! * (2 * rand() - 1);
        return { heads, x, weight: randomF32(rand, c.headDim, 0.5, 1.5) };
      });
      const [q, k] = [inputs[0]!, inputs[1]!];
      const out = await runRopeKv({
        heads: c.heads, kvHeads: c.kvHeads, headDim: c.headDim, pos: c.pos, freq, q: q.x, k: k.x,
        v: randomF32(rand, MAX_TOKENS * c.kvHeads * c.headDim), headNorm: Float32Array.from([...q.weight, ...k.weight]),
      });
      for (const [what, input, got] of [['q', q, out.q], ['k', k, out.k]] as const) {
        const ref = normedReference(input.x, input.weight, 1e-6, c.pos, freq, input.heads, c.headDim);
        expectClose(`norm + rope (${what})`, got.subarray(0, M * input.heads * c.headDim), ref.want, (i) => ref.tol[i]!);
      }
    });
  }
});
