// A sequence-classifier reranker (XLMRobertaForSequenceClassification, as bge-reranker)
// against llama.cpp's ranking context (node-llama-cpp's createRankingContext) on a GGUF
// written from the same random weights: score = sigmoid(out_proj(tanh(dense(h[<s>])))) of
// the query and document pair, <s> q </s></s> d </s>. The pairs run batched in one pass.
// A generative reranker (Qwen3-Reranker's yes/no logits) on a random Qwen3 against the
// log-probabilities llama.cpp gives the two answer tokens after the same prompt: our logit
// is logit(yes) - logit(no) = logprob(yes) - logprob(no); observed max diff 4e-6.
// Classifier: observed max |score diff| 2e-4 (f32 on both sides; llama.cpp's GELU is its tanh form
// from an f16 table, ours erf), and the same order; a wrong pooled row or a missing tanh
// moves scores by O(0.1).
import { appendFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadEmbedder } from '../src/engine/embedder.js';
import { TextTokenizer } from '../src/models/tokenizer.js';
import { makeEncoderCheckpoint } from './helpers/encoder-checkpoint.js';
import { writeGgufFromHf } from './helpers/gguf-writer.js';
import { disposeOracle, oracleGreedy, oracleRank } from './helpers/llama-oracle.js';
import { testGpu } from './helpers/model-harness.js';
import { makeRandomCheckpoint } from './helpers/random-checkpoint.js';
import { qwen3RerankPrompt } from '../src/server/native/rerank.js';

const SCORE_TOLERANCE = 1e-3;
/** As oracle-engine.test.ts's log-prob tolerance: f32 on both sides. */
const LOGIT_TOLERANCE = 1e-3;
const QUERY = 'what is the capital of france?';
const DOCUMENTS = ['paris is the capital of france.', 'the quick brown fox jumps over the lazy dog.', 'berlin is a city in germany.', 'hi', 'a giant panda eats bamboo in china.'];

const sigmoid = (x: number) => 1 / (1 + Math.exp(-x));
const order = (scores: number[]) => scores.map((s, i) => [s, i] as const).sort((a, b) => b[0] - a[0] || a[1] - b[1]).map(([, i]) => i);

describe('rerankers vs llama.cpp on random checkpoints', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'mlxcel-rerank-'));
  afterAll(async () => {
    await disposeOracle();
    rmSync(tmp, { recursive: true, force: true });
  });

  it('xlm-roberta sequence classifier', async () => {
    const dir = join(tmp, 'xlmr-reranker');
    makeEncoderCheckpoint({ arch: 'xlm-roberta', hidden: 64, layers: 2, heads: 4, intermediate: 128, seed: 41, classifier: true }, dir);
    const gguf = `${dir}.gguf`;
    writeGgufFromHf(dir, gguf, { pooling: 'rank' });
    const tokenizer = await TextTokenizer.load(dir);
    const query = tokenizer.encode(QUERY, false);
    const docs = DOCUMENTS.map((d) => tokenizer.encode(d, false));
    const oracle = await oracleRank(gguf, query, docs);
    const reranker = await loadEmbedder({ modelDir: dir, gpu: await testGpu(), pooling: 'rank', batchSize: 128, maxSeqs: 8 });
    try {
      const pairs = DOCUMENTS.map((d) => tokenizer.encodePair(QUERY, d));
      pairs.forEach((p, i) => expect(p).toEqual([2, ...query, 3, 3, ...docs[i]!, 3]));
      const scores = (await reranker.rank(pairs)).map(sigmoid);
      const diff = Math.max(...scores.map((s, i) => Math.abs(s - oracle[i]!)));
      if (process.env.ORACLE_VERBOSE) appendFileSync(process.env.ORACLE_VERBOSE, `rerank: ours ${scores.join(', ')}; llama.cpp ${oracle.join(', ')}; max diff ${diff}\n`);
      expect(diff).toBeLessThan(SCORE_TOLERANCE);
      expect(order(scores)).toEqual(order(oracle));
      // Spread enough that the order means something.
      expect(Math.max(...oracle) - Math.min(...oracle)).toBeGreaterThan(0.05);
    } finally {
      await reranker.close();
    }
  });

  it('qwen3 generative reranker: logit(yes) - logit(no) at the end of its prompt', async () => {
    const dir = join(tmp, 'qwen3-reranker');
    makeRandomCheckpoint({ arch: 'qwen3', tokenizer: 'qwen3', hidden: 64, layers: 2, heads: 4, kvHeads: 2, headDim: 16, intermediate: 128, seed: 9, tie: true }, dir);
    const gguf = `${dir}.gguf`;
    writeGgufFromHf(dir, gguf);
    const tokenizer = await TextTokenizer.load(dir);
    const [yes, no] = ['yes', 'no'].map((w) => tokenizer.encode(w, false)[0]!);
    const prompts = DOCUMENTS.slice(0, 3).map((d) => tokenizer.encode(qwen3RerankPrompt('Given a web search query, retrieve relevant passages that answer the query', QUERY, d), false));
    const expected: number[] = [];
    for (const p of prompts) {
      const { firstLogProbs } = await oracleGreedy(gguf, p, 1);
      expected.push(firstLogProbs[yes!]! - firstLogProbs[no!]!);
    }
    const reranker = await loadEmbedder({ modelDir: dir, gpu: await testGpu(), pooling: 'rank', batchSize: 256, maxSeqs: 4 });
    try {
      expect(reranker.info.reranker).toBe('generative');
      const logits = await reranker.rank(prompts);
      const diff = Math.max(...logits.map((x, i) => Math.abs(x - expected[i]!)));
      if (process.env.ORACLE_VERBOSE) appendFileSync(process.env.ORACLE_VERBOSE, `qwen3 rerank: ours ${logits.join(', ')}; llama.cpp ${expected.join(', ')}; max diff ${diff}\n`);
      expect(diff).toBeLessThan(LOGIT_TOLERANCE);
    } finally {
      await reranker.close();
    }
  });
});
