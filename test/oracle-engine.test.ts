// Our engine against an independent implementation: llama.cpp (node-llama-cpp, prebuilt CPU
// binary) on GGUFs written from the same random weights, for each architecture family, with
// f32 KV caches on both sides and with both sides' default f16 caches. Each
// case also checks the test-side tooling on the same files: the GGUF writer's metadata and
// tensors, llama.cpp's tokenizer against the HF tokenizer, wide greedy margins, and the
// HF-semantics CPU reference against llama.cpp.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import { afterAll, describe, expect, it } from 'vitest';
import { TextTokenizer } from '../src/models/tokenizer.js';
import { readGguf, writeGgufFromHf } from './helpers/gguf-writer.js';
import { HfReference } from './helpers/hf-reference.js';
import { disposeOracle, logSoftmax, maxLogProbDiff, oracleGreedy, oracleTokenize } from './helpers/llama-oracle.js';
import { F32_KV_TYPES, greedy, openRunner, SERVER_KV_TYPES } from './helpers/model-harness.js';
import { caseName, ORACLE_CASES, ORACLE_STORY } from './helpers/oracle-cases.js';
import { makeRandomCheckpoint } from './helpers/random-checkpoint.js';

const STEPS = 32;
// Both sides compute in f32 (llama.cpp with an f32 KV cache, flash attention off) and differ
// only in summation order and in exp/rsqrt implementations: over 2 layers that moves
// log-probs by ~1e-5 relative to values of ~10 (observed 3.5e-5 to 8e-5), so 1e-3 has
// ample headroom while a real bug (RoPE pairing, GQA mapping, a missing bias or norm)
// moves them by ~1.
const LOGPROB_TOLERANCE = 1e-3;
// With f16 KV caches both sides round every key and value to 11 significant bits, but not
// the same way: llama.cpp also rounds q and the attention weights to f16 for its f16 dot
// products, and the f32 values each side rounds differ in their last bits. On these random
// checkpoints (peaked attention) that moves log-probs by up to 2.4e-2 (observed), about as
// much as either cache moves them from f32 (2e-2 to 3e-2); 5e-2 bounds it, while a real bug
// still moves them by ~1.
const F16_LOGPROB_TOLERANCE = 5e-2;

describe('engine vs llama.cpp on random checkpoints', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'mlxcel-oracle-'));
  afterAll(async () => {
    await disposeOracle();
    rmSync(tmp, { recursive: true, force: true });
  });
  const samples = [ORACLE_STORY, 'Hello world! 1234567 café  naïve — 日本語 🙂\n\ttabs   and spaces', " don't 'RE 3.14 x=y+1;"];

  for (const c of ORACLE_CASES) {
    it(caseName(c), async () => {
      const dir = join(tmp, `${c.arch}-${c.tokenizer}`);
      const ck = makeRandomCheckpoint(c, dir);
      const gguf = `${dir}.gguf`;
      writeGgufFromHf(dir, gguf);

      // The GGUF writer: llama.cpp's metadata and tensor names for the family.
      const info = readGguf(gguf);
      const meta = (k: string) => info.metadata.get(k);
      expect(meta('general.architecture')).toBe(c.arch);
      expect(meta(`${c.arch}.attention.head_count_kv`)).toBe(2);
      expect(meta(`${c.arch}.block_count`)).toBe(2);
      expect(meta('tokenizer.ggml.pre')).toBe(c.tokenizer === 'qwen3' ? 'qwen2' : 'llama-bpe');
      expect((meta('tokenizer.ggml.tokens') as string[]).length).toBe(ck.vocabSize);
      expect(info.tensors.some((t) => t.name === 'output.weight')).toBe(!c.tie);
      expect(info.tensors.some((t) => t.name === 'rope_freqs.weight')).toBe(!!c.ropeScaling);
      if (c.arch === 'qwen2') expect(info.tensors.some((t) => t.name === 'blk.1.attn_q.bias')).toBe(true);
      if (c.arch === 'qwen3') expect(info.tensors.some((t) => t.name === 'blk.1.attn_k_norm.weight')).toBe(true);

      // llama.cpp and our tokenizer tokenize like the HF tokenizer (pre-tokenizer, merges, special tokens).
      const hf = new Tokenizer(JSON.parse(readFileSync(join(dir, 'tokenizer.json'), 'utf8')), JSON.parse(readFileSync(join(dir, 'tokenizer_config.json'), 'utf8')));
      const hfIds = (text: string) => hf.encode(text, { add_special_tokens: false }).ids;
      for (const text of samples) expect(await oracleTokenize(gguf, text)).toEqual(hfIds(text));
      expect(await oracleTokenize(gguf, c.special, true)).toEqual(hfIds(c.special));
      const tokenizer = await TextTokenizer.load(dir);
      expect(tokenizer.encode(ORACLE_STORY, false)).toEqual(hfIds(ORACLE_STORY));

      const prompt = [...(c.tokenizer === 'llama3_1' ? [ck.bosId] : []), ...hfIds(ORACLE_STORY)];
      const oracle = await oracleGreedy(gguf, prompt, STEPS);
      // A continuation worth comparing: hot tokens, varied, with wide top-1/top-2 margins.
      expect(oracle.tokens).toHaveLength(STEPS);
      expect(oracle.tokens.every((t) => ck.hotTokens.includes(t))).toBe(true);
      expect(new Set(oracle.tokens).size).toBeGreaterThanOrEqual(5);

      // The HF-semantics reference agrees with llama.cpp on the GGUF: Q/K order, biases,
      // q/k norms, llama3 RoPE factors and tied output all converted faithfully; its float64
      // logits give the margins.
      const ref = new HfReference(dir);
      expect(maxLogProbDiff(ref.logits(prompt), oracle.firstLogProbs)).toBeLessThan(1e-3);
      const reference = ref.greedyWithMargins(prompt, STEPS);
      expect(reference.tokens).toEqual(oracle.tokens);
      expect(Math.min(...reference.margins)).toBeGreaterThan(0.15);

      // Our engine with an f32 KV cache against llama.cpp with one, then with the default f16
      // cache against llama.cpp's own default f16 cache.
      const oracle16 = await oracleGreedy(gguf, prompt, STEPS, { f16KvCache: true });
      for (const [kv, expected, tolerance] of [[F32_KV_TYPES, oracle, LOGPROB_TOLERANCE], [SERVER_KV_TYPES, oracle16, F16_LOGPROB_TOLERANCE]] as const) {
        const ours = await greedy(await openRunner(dir, 256, { kvTypes: kv }), prompt, STEPS);
        expect(ours.tokens).toEqual(expected.tokens);
        const diff = maxLogProbDiff(ours.promptLogits, expected.firstLogProbs);
        if (process.env.ORACLE_VERBOSE) console.info(`${caseName(c)}, ${kv.k} KV: max log-prob diff ${diff.toExponential(2)}`);
        expect(diff).toBeLessThan(tolerance);
        // The same distribution, not just the same argmax: the top token's log-prob agrees.
        const top = expected.tokens[0];
        expect(Math.abs(logSoftmax(ours.promptLogits)[top] - expected.firstLogProbs[top])).toBeLessThan(tolerance);
      }
    });
  }
});
