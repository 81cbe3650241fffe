// Embedding models against llama.cpp (node-llama-cpp's createEmbeddingContext) on GGUFs
// written from the same random weights: a Qwen3 decoder embedder pooled by its last token
// (Qwen3-Embedding) and by the mean of its tokens, on the 512-token stories tokenizer (both
// sides are given the same token ids: the pooling is the point), and a BERT encoder
// (bidirectional attention, LayerNorm, GELU, absolute positions, token types) pooled by mean
// and by [CLS] as its sentence-transformers 1_Pooling config says. Several inputs of
// different lengths run in one batched pass (sorted by length, packed) and come back in the
// caller's order.
// Both sides compute in f32, in different summation orders and activation approximations
// (llama.cpp's CPU GELU is the tanh form read from an f16 table; ours is erf GELU). Observed
// (ORACLE_VERBOSE=file writes them): cosine > 0.999997 everywhere; max abs diff 6.0e-3
// (Qwen3, entries up to ~2.5) and 1.8e-3 (BERT). A real bug (a wrong row pooled, attention
// leaking across packed sequences or staying causal, a missing norm) moves them by O(1).
import { appendFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadEmbedder } from '../src/engine/embedder.js';
import type { Pooling } from '../src/runtime/ops/pooling.js';
import { TextTokenizer } from '../src/models/tokenizer.js';
import { writeGgufFromHf } from './helpers/gguf-writer.js';
import { disposeOracle, oracleEmbeddings } from './helpers/llama-oracle.js';
import { testGpu } from './helpers/model-harness.js';
import { makeEncoderCheckpoint } from './helpers/encoder-checkpoint.js';
import { makeRandomCheckpoint } from './helpers/random-checkpoint.js';

const COSINE_MIN = 0.9999;
const MAX_ABS_DIFF = 1e-2;
const ENCODER_MAX_ABS_DIFF = 5e-3;
const TEXTS = ['Once upon a time, in a small village, there lived a curious cat named Mia.', 'Hi', 'The quick brown fox jumps over the lazy dog, twice.'];
const shape = { hidden: 64, layers: 2, heads: 4, kvHeads: 2, headDim: 16, intermediate: 128 };

function cosine(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let ab = 0, aa = 0, bb = 0;
  for (let i = 0; i < a.length; i++) {
    ab += a[i]! * b[i]!;
    aa += a[i]! * a[i]!;
    bb += b[i]! * b[i]!;
  }
  return ab / Math.sqrt(aa * bb);
}

function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}

describe('embeddings vs llama.cpp on random checkpoints', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'mlxcel-embed-'));
  afterAll(async () => {
    await disposeOracle();
    rmSync(tmp, { recursive: true, force: true });
  });

  for (const pooling of ['last', 'mean'] as Pooling[]) {
    it(`qwen3 decoder embedder, ${pooling} pooling`, async () => {
      const dir = join(tmp, `qwen3-${pooling}`);
      makeRandomCheckpoint({ ...shape, arch: 'qwen3', tokenizer: 'stories', seed: 21 }, dir);
      const gguf = `${dir}.gguf`;
      writeGgufFromHf(dir, gguf, { pooling });
      const tokenizer = await TextTokenizer.load(dir);
      const oracle = await oracleEmbeddings(gguf, TEXTS.map((t) => tokenizer.encode(t, false)));
      const embedder = await loadEmbedder({ modelDir: dir, gpu: await testGpu(), pooling, batchSize: 128, maxSeqs: 4 });
      try {
        const hidden = embedder.info.hidden;
        const raw = await embedder.embed(oracle.map((o) => ({ tokens: o.tokens, dims: hidden, normalize: -1 })));
        oracle.forEach((o, i) => {
          const cos = cosine(raw[i]!, o.vector);
          const diff = maxAbsDiff(raw[i]!, o.vector);
          if (process.env.ORACLE_VERBOSE) appendFileSync(process.env.ORACLE_VERBOSE, `${pooling} #${i}: cosine ${cos}, max abs diff ${diff.toExponential(2)}, max abs ${maxAbsDiff(o.vector, new Float32Array(o.vector.length)).toFixed(2)}\n`);
          expect(cos).toBeGreaterThan(COSINE_MIN);
          expect(diff).toBeLessThan(MAX_ABS_DIFF);
        });
        // Euclidean normalisation, and Matryoshka truncation re-normalised, on the GPU.
        const [unit, cut] = await embedder.embed([
          { tokens: oracle[0]!.tokens, dims: hidden, normalize: 2 },
          { tokens: oracle[0]!.tokens, dims: 16, normalize: 2 },
        ]);
        const norm = (v: ArrayLike<number>) => Math.hypot(...Array.from(v));
        expect(norm(unit!)).toBeCloseTo(1, 5);
        expect(cut!.length).toBe(16);
        expect(norm(cut!)).toBeCloseTo(1, 5);
        const head = raw[0]!.slice(0, 16);
        expect(maxAbsDiff(cut!, head.map((x) => x / norm(head)))).toBeLessThan(1e-5);
      } finally {
        await embedder.close();
      }
    });
  }

  for (const pooling of ['mean', 'cls'] as const) {
    it(`bert encoder (bidirectional attention, LayerNorm, GELU, absolute positions), ${pooling} pooling from 1_Pooling`, async () => {
      const dir = join(tmp, `bert-${pooling}`);
      makeEncoderCheckpoint({ arch: 'bert', hidden: 64, layers: 2, heads: 4, intermediate: 128, seed: 31, pooling }, dir);
      const gguf = `${dir}.gguf`;
      writeGgufFromHf(dir, gguf, { pooling });
      const tokenizer = await TextTokenizer.load(dir);
      const oracle = await oracleEmbeddings(gguf, TEXTS.map((t) => tokenizer.encode(t, true)));
      oracle.forEach((o, i) => expect(o.tokens).toEqual(tokenizer.encode(TEXTS[i]!, true)));
      const embedder = await loadEmbedder({ modelDir: dir, gpu: await testGpu(), batchSize: 128, maxSeqs: 4 });
      try {
        expect(embedder.info.pooling).toBe(pooling);
        const raw = await embedder.embed(oracle.map((o) => ({ tokens: o.tokens, dims: 64, normalize: -1 })));
        oracle.forEach((o, i) => {
          if (process.env.ORACLE_VERBOSE) appendFileSync(process.env.ORACLE_VERBOSE, `bert ${pooling} #${i}: cosine ${cosine(raw[i]!, o.vector)}, max abs diff ${maxAbsDiff(raw[i]!, o.vector)}\n`);
          expect(cosine(raw[i]!, o.vector)).toBeGreaterThan(COSINE_MIN);
          expect(maxAbsDiff(raw[i]!, o.vector)).toBeLessThan(ENCODER_MAX_ABS_DIFF);
        });
      } finally {
        await embedder.close();
      }
    });
  }
});
