// Each architecture family beyond Llama/Qwen against llama.cpp (node-llama-cpp) on GGUFs
// written from the same random weights, as test/oracle-engine.test.ts does for Llama and
// Qwen: 32 greedy tokens agree and the prompt's next-token log-probs agree within
// a case's tolerance plus F16_LOGPROB_TOLERANCE, with both sides' default f16 KV caches (the
// engine's f32 cache is compared with llama.cpp's in oracle-engine.test.ts). The prompt
// (~20 tokens) plus the 32 steps run well past each sliding window (8), so windowed layers
// are exercised beyond it, and Gemma 3's six layers include its global layer (other RoPE
// base and scaling) next to five local ones. Phi-3's sliding window is not compared:
// llama.cpp turns it off (test/sliding-window.test.ts checks the windowed attention against
// the CPU reference). The Gemma 3 decoder is also loaded from a
// multimodal gemma3 checkpoint (text_config, the decoder under language_model.model., vision
// tower and projector tensors beside it), which must decode as the text checkpoint does.
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { TextTokenizer } from '../src/models/tokenizer.js';
import { writeGgufFromHf } from './helpers/gguf-writer.js';
import { disposeOracle, logSoftmax, maxLogProbDiff, oracleGreedy, type OracleResult } from './helpers/llama-oracle.js';
import { greedy, openRunner } from './helpers/model-harness.js';
import { ORACLE_STORY } from './helpers/oracle-cases.js';
import { makeRandomCheckpoint, type RandomCheckpointOptions } from './helpers/random-checkpoint.js';

const STEPS = 32;
// With f32 KV caches, as oracle-engine.test.ts: both sides in f32, differing in summation
// order and exp/tanh/rsqrt implementations; a real bug (a missing (1 + w), a window off by
// one, the wrong RoPE base on one layer) moves log-probs by ~1. Observed: SmolLM3 5e-5; OLMo 2 2e-5; Phi-3 5e-5 and 3e-4;
// Granite 1.5e-3 (its multipliers amplify rounding); Gemma 2 6.8e-3 and Gemma 3 2.2e-2:
// llama.cpp's CPU GELU reads a table indexed by the f16-rounded input (GGML_GELU_FP16), a
// relative error up to 2^-11 per activation, over 6 layers for Gemma 3. Each case states
// its tolerance.
const LOGPROB_TOLERANCE = 1e-3;
// Both sides' default f16 KV caches add their rounding's error, as oracle-engine.test.ts
// states (each side rounds other values to f16), to a case's own: observed 6e-3 (Gemma 2)
// to 3.2e-2 (Phi-3's short factors), Gemma 3 5.5e-2 (2.2e-2 with f32 caches).
const F16_LOGPROB_TOLERANCE = 5e-2;
const WINDOW = 8;

const shape = { hidden: 64, layers: 2, heads: 4, kvHeads: 2, headDim: 16, intermediate: 128 };

interface FamilyCase extends RandomCheckpointOptions {
  label: string;
  /** Prepend the tokenizer's BOS to the prompt. */
  bos: boolean;
  /** Log-prob tolerance where it is not LOGPROB_TOLERANCE (see above). */
  tolerance?: number;
}

const GEMMA3: FamilyCase = {
  ...shape, label: 'gemma3_text: 5 sliding + 1 global layer, local/global RoPE, q/k norm, tied', arch: 'gemma3_text', tokenizer: 'gemma3', layers: 6, tie: true, seed: 3, bos: true, tolerance: 5e-2,
  ropeTheta: 1e6, ropeScaling: { rope_type: 'linear', factor: 8 },
  extraConfig: { sliding_window: WINDOW, sliding_window_pattern: 6, rope_local_base_freq: 10000, final_logit_softcapping: null, attn_logit_softcapping: null },
};

const CASES: FamilyCase[] = [
  GEMMA3,
  // The same decoder in a multimodal gemma3 checkpoint: text_config, the decoder under
  // language_model.model., vision tower and projector tensors beside it (not read).
  { ...GEMMA3, label: 'gemma3 multimodal checkpoint: decoder under language_model.model., vision tower ignored', multimodal: true },
  {
    ...shape, label: 'gemma2: alternating sliding layers, attention and final soft-capping', arch: 'gemma2', tokenizer: 'gemma3', seed: 4, bos: true, tie: true, tolerance: 2e-2,
    extraConfig: { sliding_window: WINDOW, attn_logit_softcapping: 4, final_logit_softcapping: 12 },
  },
  { ...shape, label: 'smollm3: every 4th layer NoPE', arch: 'smollm3', tokenizer: 'llama3_1', layers: 4, seed: 6, bos: true },
  {
    ...shape, label: 'granite: embedding, attention, residual and logit multipliers', arch: 'granite', tokenizer: 'llama3_1', seed: 7, bos: true, tolerance: 3e-3,
    extraConfig: { embedding_multiplier: 2, attention_multiplier: 0.3, residual_multiplier: 0.5, logits_scaling: 2 },
  },
  {
    ...shape, label: 'olmo2: norms after each block, q/k RMSNorm over all heads', arch: 'olmo2', tokenizer: 'llama3_1', seed: 8, bos: true,
  },
  {
    // Phi-4-mini's shape in small: RoPE over 3/4 of each head (24 of 32), fused qkv and
    // gate_up, longrope with the context (256) past original_max_position_embeddings (64), so
    // both sides rotate with the long factors and scale by the attention factor sqrt(2).
    // No sliding_window: llama.cpp ignores Phi-3's (it runs every layer with full attention).
    ...shape, hidden: 128, headDim: 32, label: 'phi3: fused qkv/gate_up, partial rotary, longrope long factors', arch: 'phi3', tokenizer: 'llama3_1', seed: 9, bos: true,
    extraConfig: {
      partial_rotary_factor: 0.75, original_max_position_embeddings: 64,
      rope_scaling: { type: 'longrope', short_factor: ropeFactors(0.1), long_factor: ropeFactors(0.7) },
    },
  },
  {
    // The same with original_max_position_embeddings (1024) past the context: short factors.
    ...shape, hidden: 128, headDim: 32, label: 'phi3: longrope short factors', arch: 'phi3', tokenizer: 'llama3_1', seed: 10, bos: true,
    extraConfig: {
      partial_rotary_factor: 0.75, original_max_position_embeddings: 1024,
      rope_scaling: { type: 'longrope', short_factor: ropeFactors(0.1), long_factor: ropeFactors(0.7) },
    },
  },
];

/** Twelve longrope divisors 1, 1 + step, 1 + 2 step, ... (the low frequencies stretched most, as in Phi-3's). */
function ropeFactors(step: number): number[] {
  return Array.from({ length: 12 }, (_, i) => 1 + step * i);
}

describe('families vs llama.cpp on random checkpoints', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'mlxcel-families-'));
  afterAll(() => disposeOracle());
  // llama.cpp's run by GGUF content and prompt: the multimodal Gemma 3 checkpoint converts to
  // the same GGUF as its text twin, so llama.cpp runs once for both.
  const oracleRuns = new Map<string, Promise<OracleResult>>();
  const oracle = (gguf: string, prompt: number[]) => {
    const key = `${createHash('sha256').update(readFileSync(gguf)).digest('hex')} ${prompt.join(',')}`;
    if (!oracleRuns.has(key)) oracleRuns.set(key, oracleGreedy(gguf, prompt, STEPS, { f16KvCache: true }));
    return oracleRuns.get(key)!;
  };

  for (const [i, c] of CASES.entries()) {
    it(c.label, async () => {
      const dir = join(tmp, `${i}-${c.arch}`);
      const ck = makeRandomCheckpoint(c, dir);
      const gguf = `${dir}.gguf`;
      // Not the folder's name: llama.cpp gives a model named like phi3 / phi-3 Phi-3's token
      // attributes, which look up SentencePiece tokens (</s>, <unk>) our tokenizers lack.
      writeGgufFromHf(dir, gguf, { name: 'random checkpoint' });
      const tokenizer = await TextTokenizer.load(dir);
      const prompt = [...(c.bos ? [ck.bosId] : []), ...tokenizer.encode(ORACLE_STORY, false)];
      expect(prompt.length).toBeGreaterThan(WINDOW);

      const expected = await oracle(gguf, prompt);
      const ours = await greedy(await openRunner(dir), prompt, STEPS);
      const diff = maxLogProbDiff(ours.promptLogits, expected.firstLogProbs);
      if (process.env.ORACLE_VERBOSE) console.info(`${c.arch}: max log-prob diff ${diff.toExponential(2)}`);
      expect(ours.tokens).toEqual(expected.tokens);
      const tolerance = (c.tolerance ?? LOGPROB_TOLERANCE) + F16_LOGPROB_TOLERANCE;
      expect(diff).toBeLessThan(tolerance);
      const top = expected.tokens[0]!;
      expect(Math.abs(logSoftmax(ours.promptLogits)[top]! - expected.firstLogProbs[top]!)).toBeLessThan(tolerance);
    });
  }
});
