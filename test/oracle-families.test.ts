// Each architecture family beyond Llama/Qwen against llama.cpp (node-llama-cpp) on GGUFs
// written from the same random weights, as test/oracle-engine.test.ts does for Llama and
// Qwen: 32 greedy tokens agree and the prompt's next-token log-probs agree within
// LOGPROB_TOLERANCE. The prompt (~20 tokens) plus the 32 steps run well past each sliding
// window (8), so windowed layers are exercised beyond it, and Gemma 3's six layers include
// its global layer (other RoPE base and scaling) next to five local ones.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { TextTokenizer } from '../src/models/tokenizer.js';
import { writeGgufFromHf } from './helpers/gguf-writer.js';
import { disposeOracle, logSoftmax, maxLogProbDiff, oracleGreedy } from './helpers/llama-oracle.js';
import { greedy, openRunner } from './helpers/model-harness.js';
import { ORACLE_STORY } from './helpers/oracle-cases.js';
import { makeRandomCheckpoint, type RandomCheckpointOptions } from './helpers/random-checkpoint.js';

const STEPS = 32;
// As oracle-engine.test.ts: both sides in f32, differing in summation order and exp/tanh/rsqrt
// implementations; a real bug (a missing (1 + w), a window off by one, the wrong RoPE base
// on one layer) moves log-probs by ~1. Observed: SmolLM3 5e-5; Granite 1.5e-3 (its
// multipliers amplify rounding); Gemma 2 6.8e-3 and Gemma 3 2.2e-2: llama.cpp's CPU GELU
// reads a table indexed by the f16-rounded input (GGML_GELU_FP16), a relative error up to
// 2^-11 per activation, over 6 layers for Gemma 3. Each case states its tolerance.
const LOGPROB_TOLERANCE = 1e-3;
const WINDOW = 8;

const shape = { hidden: 64, layers: 2, heads: 4, kvHeads: 2, headDim: 16, intermediate: 128 };

interface FamilyCase extends RandomCheckpointOptions {
  label: string;
  /** Prepend the tokenizer's BOS to the prompt. */
  bos: boolean;
  /** Log-prob tolerance where it is not LOGPROB_TOLERANCE (see above). */
  tolerance?: number;
}

const CASES: FamilyCase[] = [
  {
    ...shape, label: 'gemma3_text: 5 sliding + 1 global layer, local/global RoPE, q/k norm, tied', arch: 'gemma3_text', tokenizer: 'gemma3', layers: 6, tie: true, seed: 3, bos: true, tolerance: 5e-2,
    ropeTheta: 1e6, ropeScaling: { rope_type: 'linear', factor: 8 },
    extraConfig: { sliding_window: WINDOW, sliding_window_pattern: 6, rope_local_base_freq: 10000, final_logit_softcapping: null, attn_logit_softcapping: null },
  },
  {
    ...shape, label: 'gemma2: alternating sliding layers, attention and final soft-capping', arch: 'gemma2', tokenizer: 'gemma3', seed: 4, bos: true, tie: true, tolerance: 2e-2,
    extraConfig: { sliding_window: WINDOW, attn_logit_softcapping: 4, final_logit_softcapping: 12 },
  },
  { ...shape, label: 'smollm3: every 4th layer NoPE', arch: 'smollm3', tokenizer: 'llama3_1', layers: 4, seed: 6, bos: true },
  {
    ...shape, label: 'granite: embedding, attention, residual and logit multipliers', arch: 'granite', tokenizer: 'llama3_1', seed: 7, bos: true, tolerance: 3e-3,
    extraConfig: { embedding_multiplier: 2, attention_multiplier: 0.3, residual_multiplier: 0.5, logits_scaling: 2 },
  },
];

describe('families vs llama.cpp on random checkpoints', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'mlxcel-families-'));
  afterAll(() => disposeOracle());

  for (const c of CASES) {
    it(c.label, async () => {
      const dir = join(tmp, c.arch);
      const ck = makeRandomCheckpoint(c, dir);
      const gguf = `${dir}.gguf`;
      writeGgufFromHf(dir, gguf);
      const tokenizer = await TextTokenizer.load(dir);
      const prompt = [...(c.bos ? [ck.bosId] : []), ...tokenizer.encode(ORACLE_STORY, false)];
      expect(prompt.length).toBeGreaterThan(WINDOW);

      const oracle = await oracleGreedy(gguf, prompt, STEPS);
      const ours = await greedy(await openRunner(dir), prompt, STEPS);
      const diff = maxLogProbDiff(ours.promptLogits, oracle.firstLogProbs);
      if (process.env.ORACLE_VERBOSE) console.info(`${c.arch}: max log-prob diff ${diff.toExponential(2)}`);
      expect(ours.tokens).toEqual(oracle.tokens);
      const tolerance = c.tolerance ?? LOGPROB_TOLERANCE;
      expect(diff).toBeLessThan(tolerance);
      const top = oracle.tokens[0]!;
      expect(Math.abs(logSoftmax(ours.promptLogits)[top]! - oracle.firstLogProbs[top]!)).toBeLessThan(tolerance);
    });
  }
});
