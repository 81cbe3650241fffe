// rope_kv_write.wgsl + attention.wgsl recorded together (Ops.attention, as a layer records them) and replayed
// for two passes: a mixed pass (fresh prefill, continuation chunk, decodes, several
// sequences of different lengths) and then one decode token per sequence. The paged cache
// uses a shuffled block table; slots no sequence owns (and slots past each sequence's
// length) hold NaN poison, so attention reading one position too far, or the wrong
// block, turns the output into NaN. GQA maps query head h to KV head h / (heads / kv_heads).
//
// Cache check: bit-exact (the rotary embedding runs with zero frequencies here, so k and v
// are copied as they are, and q left as it is), and every other slot untouched.
// Attention tolerance, per (token, head, channel), first-order error propagation:
//   A * (2 ds + (2 L + 2 (3 + 2 G) + 16) * 2^-24),  A = sum_j p_j |v_j|,
// where ds = (head_dim + 2) 2^-24 * scale * max_j sum_d |q_d k_jd| bounds the f32 score
// error (which moves a softmax weight by at most 2 ds relatively), L = context length (one
// rounding per step of the running sums), and WGSL allows exp 3 + 2|x| ULP for
// |x| <= G = the largest score gap from the running max.
// f16 caches (rgba16float texels): the keys and values drawn are rounded to f16 first, so
// the cache holds them exactly (checked bit for bit, as read back widened) and the
// reference attends over the same values with the same tolerance; the rounding of a
// computed key or value is rope-kv-write.test.ts's.
// With sinks (GPT-OSS), each head's sink logit joins the softmax's denominator: the
// reference adds exp(sink - max) to the sum (the max over scores and sink), and the sinks
// are drawn around the scores' range so that they move the output.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BatchMeta } from '../../src/runtime/ops.js';
import type { KvTypes } from '../../src/models/model.js';
import { expectClose, expectPoisoned, expectUnchanged, Harness, kvRound, POISON_BITS, rng } from './harness.js';

let cpu: Harness;
/** Ops told the adapter is a GPU: decode steps run attention_decode_workgroup.wgsl. */
let gpuLayout: Harness;
/** Ops told WGSL cannot read storage textures: the caches are read through sampled bindings. */
let sampled: Harness;
beforeAll(async () => {
  cpu = await Harness.open();
  gpuLayout = await Harness.open({ asGpu: true });
  sampled = await Harness.open({ noStorageTextureReads: true });
});
afterAll(() => {
  cpu?.destroy();
  gpuLayout?.destroy();
  sampled?.destroy();
});

const U = 2 ** -24;
const MAX_TOKENS = 32;

/** `types`: the cache's key and value types (default f32 both); `sinks`: per-head sink logits. */
interface Config { heads: number; kvHeads: number; headDim: number; blockSize: number; qScale: number; types?: KvTypes; sinks?: boolean }
/** A sequence: `history` positions already cached, then `chunk` new tokens in pass 1, then one decode token in pass 2. */
interface SeqSpec { history: number; chunk: number }

interface Seq extends SeqSpec {
  table: number[];
  /** [len, kv_dim] keys/values by position, filled as the test goes. */
  k: Float32Array[];
  v: Float32Array[];
}

function shuffle<T>(a: T[], rand: () => number): T[] {
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [a[i], a[j]] = [a[j]!, a[i]!];
  }
  return a;
}

const randVec = (rand: () => number, n: number, scale = 1) => Float32Array.from({ length: n }, () => scale * (2 * rand() - 1));

async function runScenario(h: Harness, cfg: Config, specs: SeqSpec[], order: number[], seed: number): Promise<void> {
  const rand = rng(seed);
  const { heads, kvHeads, headDim, blockSize } = cfg;
  const kvDim = kvHeads * headDim;
  const qDim = heads * headDim;
  const scale = 1 / Math.sqrt(headDim);
  const types = cfg.types ?? { k: 'f32', v: 'f32' };
  // Keys and values as the cache holds them: the reference attends over the same values.
  const kv = (side: 'k' | 'v', x: Float32Array) => kvRound(x, types[side]);

  // Block ids: every sequence gets enough blocks for history + chunk + 1 decode, drawn from
  // a shuffled pool that also holds two blocks nobody owns.
  const need = specs.map((s) => Math.ceil((s.history + s.chunk + 1) / blockSize));
  const nBlocks = need.reduce((a, b) => a + b, 0) + 2;
  const pool = shuffle([...Array(nBlocks).keys()], rand);
  const seqs: Seq[] = specs.map((s, i) => ({ ...s, table: pool.splice(0, need[i]!), k: [], v: [] }));
  const slotOf = (s: Seq, j: number) => s.table[Math.floor(j / blockSize)]! * blockSize + (j % blockSize);

  // Cache: poison everywhere, then each sequence's history at its slots.
  const slots = nBlocks * blockSize;
  const kCache = new Float32Array(slots * kvDim);
  const vCache = new Float32Array(slots * kvDim);
  new Uint32Array(kCache.buffer).fill(POISON_BITS);
  new Uint32Array(vCache.buffer).fill(POISON_BITS);
  for (const s of seqs) {
    for (let j = 0; j < s.history; j++) {
      s.k.push(kv('k', randVec(rand, kvDim)));
      s.v.push(kv('v', randVec(rand, kvDim)));
      kCache.set(s.k[j]!, slotOf(s, j) * kvDim);
      vCache.set(s.v[j]!, slotOf(s, j) * kvDim);
    }
  }
  const kCacheTex = h.kvCache(kCache, 'k_cache', types.k);
  const vCacheTex = h.kvCache(vCache, 'v_cache', types.v);

  const qBuf = h.poisoned(MAX_TOKENS * qDim, POISON_BITS, 'q');
  const kBuf = h.poisoned(MAX_TOKENS * kvDim, POISON_BITS, 'k');
  const vBuf = h.poisoned(MAX_TOKENS * kvDim, POISON_BITS, 'v');
  const outBuf = h.poisoned(MAX_TOKENS * qDim, POISON_BITS, 'attn');
  const tableEntries = seqs.reduce((n, s) => n + s.table.length, 0);
  // rope_kv_write and attention read only these three of the batch metadata.
  const meta: Pick<BatchMeta, 'tokenPos' | 'tokenTable' | 'blockTable'> = {
    tokenPos: h.poisoned(MAX_TOKENS, POISON_BITS, 'token_pos'),
    tokenTable: h.poisoned(MAX_TOKENS, POISON_BITS, 'token_table'),
    blockTable: h.poisoned(tableEntries + 4, POISON_BITS, 'block_table'),
  };
  const sinks = cfg.sinks ? randVec(rand, heads, 3) : undefined;
  const dispatches = h.ops.attention('self_attn', { q: qBuf, k: kBuf, v: vBuf, heads, kvHeads, cache: { k: kCacheTex, v: vCacheTex }, blockSize }, outBuf, {
    headDim, invFreq: h.uploadF32(new Float32Array(headDim / 2)), scale, sinks: sinks && h.uploadF32(sinks, 'sinks'),
  }, meta);

  // Block table in sequence order (offsets differ from the token order below).
  const tableOffset: number[] = [];
  const blockTable: number[] = [];
  for (const s of seqs) { tableOffset.push(blockTable.length); blockTable.push(...s.table); }
  h.write(meta.blockTable, Uint32Array.from(blockTable));

  for (const pass of [1, 2]) {
    // Tokens of this pass, sequences in `order`, each sequence's tokens contiguous.
    const tokens: { seq: number; pos: number }[] = [];
    for (const si of order) {
      const s = seqs[si]!;
      const start = pass === 1 ? s.history : s.history + s.chunk;
      const count = pass === 1 ? s.chunk : 1;
      for (let i = 0; i < count; i++) tokens.push({ seq: si, pos: start + i });
    }
    const M = tokens.length;
    expect(M).toBeLessThanOrEqual(MAX_TOKENS);
    const q = new Float32Array(MAX_TOKENS * qDim);
    const k = new Float32Array(MAX_TOKENS * kvDim);
    const v = new Float32Array(MAX_TOKENS * kvDim);
    for (const a of [q, k, v]) new Uint32Array(a.buffer).fill(POISON_BITS);
    tokens.forEach((t, m) => {
      q.set(randVec(rand, qDim, cfg.qScale), m * qDim);
      const s = seqs[t.seq]!;
      expect(s.k.length).toBe(t.pos);
      s.k.push(kv('k', randVec(rand, kvDim)));
      s.v.push(kv('v', randVec(rand, kvDim)));
      k.set(s.k[t.pos]!, m * kvDim);
      v.set(s.v[t.pos]!, m * kvDim);
      kCache.set(s.k[t.pos]!, slotOf(s, t.pos) * kvDim);
      vCache.set(s.v[t.pos]!, slotOf(s, t.pos) * kvDim);
    });
    h.write(qBuf, q);
    h.write(kBuf, k);
    h.write(vBuf, v);
    h.write(meta.tokenPos, Uint32Array.from(tokens, (t) => t.pos));
    h.write(meta.tokenTable, Uint32Array.from(tokens, (t) => tableOffset[t.seq]!));
    h.poison(outBuf, MAX_TOKENS * qDim);
    await h.run(dispatches, { tokens: M, seqs: seqs.length });

    const what = `pass ${pass} (heads ${heads}/${kvHeads}, d ${headDim}, block ${blockSize}, M ${M})`;
    const gotK = await h.readKvCache(kCacheTex, slots * kvDim);
    const gotV = await h.readKvCache(vCacheTex, slots * kvDim);
    expectUnchanged(`${what}: k_cache`, gotK, kv('k', kCache), 0, slots * kvDim);
    expectUnchanged(`${what}: v_cache`, gotV, kv('v', vCache), 0, slots * kvDim);

    // Reference: causal attention over the sequence's positions 0..=pos, float64.
    const want = new Float64Array(M * qDim);
    const tol = new Float64Array(M * qDim);
    const group = heads / kvHeads;
    tokens.forEach((t, m) => {
      const s = seqs[t.seq]!;
      const L = t.pos + 1;
      for (let hd = 0; hd < heads; hd++) {
        const qo = (m * heads + hd) * headDim;
        const ko = Math.floor(hd / group) * headDim;
        const scores = new Float64Array(L);
        let magMax = 0;
        for (let j = 0; j < L; j++) {
          let dot = 0;
          let mag = 0;
          for (let d = 0; d < headDim; d++) {
            dot += q[qo + d]! * s.k[j]![ko + d]!;
            mag += Math.abs(q[qo + d]! * s.k[j]![ko + d]!);
          }
          scores[j] = dot * Math.fround(scale);
          magMax = Math.max(magMax, mag);
        }
        const sink = sinks?.[hd];
        const mx = Math.max(...scores, sink ?? -Infinity);
        const gap = mx - Math.min(...scores);
        const w = scores.map((x) => Math.exp(x - mx));
        const sum = w.reduce((a, b) => a + b, sink === undefined ? 0 : Math.exp(sink - mx));
        const ds = (headDim + 2) * U * scale * magMax;
        const rel = 2 * ds + (2 * L + 2 * (3 + 2 * gap) + 16) * U;
        for (let d = 0; d < headDim; d++) {
          let o = 0;
          let a = 0;
          for (let j = 0; j < L; j++) {
            o += w[j]! * s.v[j]![ko + d]!;
            a += w[j]! * Math.abs(s.v[j]![ko + d]!);
          }
          want[qo + d] = o / sum;
          tol[qo + d] = (a / sum) * rel;
        }
      }
    });
    const got = await h.readF32(outBuf, MAX_TOKENS * qDim);
    expectClose(`${what}: attention`, got.subarray(0, M * qDim), want, (i) => tol[i]!);
    expectPoisoned(`${what}: rows >= M`, got, M * qDim, MAX_TOKENS * qDim);
  }
}

describe('rope_kv_write + attention, paged cache, several sequences per pass', () => {
  // Fresh prefill, a decode deep into its context, a continuation chunk, a first token.
  const mixed: SeqSpec[] = [
    { history: 0, chunk: 7 },
    { history: 10, chunk: 1 },
    { history: 3, chunk: 5 },
    { history: 0, chunk: 1 },
  ];
  it('GQA 6/2 heads, head_dim 8, block 4', () => runScenario(cpu, { heads: 6, kvHeads: 2, headDim: 8, blockSize: 4, qScale: 6 }, mixed, [1, 0, 3, 2], 1));
  it('GQA 8/2 heads, head_dim 128, block 4', () => runScenario(cpu, { heads: 8, kvHeads: 2, headDim: 128, blockSize: 4, qScale: 3 }, mixed, [2, 3, 0, 1], 2));
  it('MHA 3/3 heads, head_dim 128, block 16, contexts crossing several blocks', () =>
    runScenario(cpu, { heads: 3, kvHeads: 3, headDim: 128, blockSize: 16, qScale: 3 }, [
      { history: 40, chunk: 3 }, { history: 0, chunk: 13 }, { history: 15, chunk: 1 }, { history: 16, chunk: 2 },
    ], [0, 1, 2, 3], 3));
  it('MQA 4/1 heads, head_dim 256 (the maximum), block 8', () =>
    runScenario(cpu, { heads: 4, kvHeads: 1, headDim: 256, blockSize: 8, qScale: 2 }, [{ history: 9, chunk: 2 }, { history: 0, chunk: 3 }], [1, 0], 4));
  it('peaked softmax (large scores): 6/3 heads, head_dim 8, block 1', () =>
    runScenario(cpu, { heads: 6, kvHeads: 3, headDim: 8, blockSize: 1, qScale: 40 }, [{ history: 5, chunk: 4 }, { history: 2, chunk: 1 }, { history: 0, chunk: 2 }], [2, 0, 1], 5));
  it('attention sinks: GQA 6/2 heads, head_dim 16, block 4', () =>
    runScenario(cpu, { heads: 6, kvHeads: 2, headDim: 16, blockSize: 4, qScale: 3, sinks: true }, mixed, [1, 0, 3, 2], 11));
});

describe('GPU layout: pass 2 (decode only) through attention_decode_workgroup.wgsl, on llvmpipe', () => {
  // Pass 2's contexts: 71 positions (three of the kernel's 32-position tiles), 2 (inside
  // the first), 64 (ending on a tile's last position) and 33 (on a tile's first).
  it('GQA 8/2 heads, head_dim 128, block 4, contexts of 2 to 71 positions', () =>
    runScenario(gpuLayout, { heads: 8, kvHeads: 2, headDim: 128, blockSize: 4, qScale: 3 }, [
      { history: 70, chunk: 0 }, { history: 0, chunk: 1 }, { history: 60, chunk: 3 }, { history: 30, chunk: 2 },
    ], [2, 3, 0, 1], 6));
  it('MQA 4/1 heads, head_dim 256 (two output vectors per invocation), block 8', () =>
    runScenario(gpuLayout, { heads: 4, kvHeads: 1, headDim: 256, blockSize: 8, qScale: 2 }, [{ history: 40, chunk: 2 }, { history: 0, chunk: 3 }], [1, 0], 7));
  it('peaked softmax (large scores): 6/3 heads, head_dim 8 (fewer output vectors than invocations), block 1', () =>
    runScenario(gpuLayout, { heads: 6, kvHeads: 3, headDim: 8, blockSize: 1, qScale: 40 }, [{ history: 35, chunk: 4 }, { history: 2, chunk: 1 }], [1, 0], 8));
  it('attention sinks: GQA 6/2 heads, head_dim 16, block 4, contexts of 1 to 40 positions', () =>
    runScenario(gpuLayout, { heads: 6, kvHeads: 2, headDim: 16, blockSize: 4, qScale: 3, sinks: true }, [{ history: 38, chunk: 1 }, { history: 0, chunk: 0 }], [1, 0], 12));
});

describe('f16 KV cache (rgba16float texels), keys and values typed apart', () => {
  const mixed: SeqSpec[] = [{ history: 0, chunk: 7 }, { history: 10, chunk: 1 }, { history: 3, chunk: 5 }, { history: 0, chunk: 1 }];
  it('f16 keys and values, GQA 8/2 heads, head_dim 128, block 4', () =>
    runScenario(cpu, { heads: 8, kvHeads: 2, headDim: 128, blockSize: 4, qScale: 3, types: { k: 'f16', v: 'f16' } }, mixed, [2, 3, 0, 1], 11));
  it('f32 keys, f16 values, read through sampled bindings', () =>
    runScenario(sampled, { heads: 6, kvHeads: 2, headDim: 8, blockSize: 4, qScale: 6, types: { k: 'f32', v: 'f16' } }, mixed, [1, 0, 3, 2], 12));
  it('GPU layout, f16 keys, f32 values, contexts past one tile', () =>
    runScenario(gpuLayout, { heads: 4, kvHeads: 1, headDim: 256, blockSize: 8, qScale: 2, types: { k: 'f16', v: 'f32' } }, [{ history: 40, chunk: 2 }, { history: 0, chunk: 3 }], [1, 0], 13));
});

describe('KV cache read through sampled bindings (adapters whose WGSL cannot read storage textures)', () => {
  const mixed: SeqSpec[] = [{ history: 0, chunk: 7 }, { history: 10, chunk: 1 }, { history: 3, chunk: 5 }, { history: 0, chunk: 1 }];
  it('GQA 8/2 heads, head_dim 128, block 4', () => runScenario(sampled, { heads: 8, kvHeads: 2, headDim: 128, blockSize: 4, qScale: 3 }, mixed, [2, 3, 0, 1], 9));
  it('GPU layout, MQA 4/1 heads, head_dim 256, block 8', async () => {
    const h = await Harness.open({ asGpu: true, noStorageTextureReads: true });
    try {
      await runScenario(h, { heads: 4, kvHeads: 1, headDim: 256, blockSize: 8, qScale: 2 }, [{ history: 40, chunk: 2 }, { history: 0, chunk: 3 }], [1, 0], 10);
    } finally {
      h.destroy();
    }
  });
});
