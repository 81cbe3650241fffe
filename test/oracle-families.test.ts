// Each architecture family beyond Llama/Qwen against llama.cpp (node-llama-cpp) on GGUFs
// written from the same random weights, as test/oracle-engine.test.ts does for Llama and
// Qwen: 32 greedy tokens agree and the prompt's next-token log-probs agree within
// a case's tolerance plus F16_LOGPROB_TOLERANCE, with both sides' default f16 KV caches (the
// engine's f32 cache is compared with llama.cpp's in oracle-engine.test.ts; Qwen3-MoE and
// Mixtral compare f32 caches on both sides within their own tolerance, FamilyCase.f32Cache). The prompt
// (~20 tokens) plus the 32 steps run well past each sliding window (8), so windowed layers
// are exercised beyond it; a checkpoint with windows is run in passes of WINDOW tokens, so
// its window layers' rings (window + WINDOW - 1 positions, the engine's layout) wrap
// several times. Gemma 3's six layers include its global layer (other RoPE
// base and scaling) next to five local ones. Phi-3's sliding window is not compared:
// llama.cpp turns it off (test/sliding-window.test.ts checks the windowed attention against
// the CPU reference). The Gemma 3 decoder is also loaded from a
// multimodal gemma3 checkpoint (text_config, the decoder under language_model.model., vision
// tower and projector tensors beside it), which must decode as the text checkpoint does.
// Qwen3-MoE and Mixtral go to llama.cpp with their experts stacked (ffn_*_exps); their
// dense/sparse mixes, mlx-lm's stacked layout, quantized experts and Mixtral's sliding
// window are checked against the CPU reference in test/moe-checkpoints.test.ts.
// GPT-OSS's MXFP4 experts go to llama.cpp twice: as f32 holding the same values (the greedy
// and log-prob comparison), and as GGML_MXFP4 blocks as its converter writes them, whose
// log-probs agree only within MXFP4_TOLERANCE: llama.cpp's CPU MXFP4 dot products round
// their activations to Q8_0 (8 bits per 32 values), which moves the log-probs by ~0.1 (a
// wrong nibble order or scale moves them by whole units). The GPT-OSS checkpoint uses the
// 512-token stories tokenizer, as every case here: the family is the point, and a large
// vocabulary costs a case ~10 s (random embeddings, the GGUF's vocabulary, both sides'
// tokenizer loads); oracle-engine.test.ts runs the 128k and 151k vocabularies against
// llama.cpp, server-vision.e2e.test.ts Gemma 3's 262k against the CPU reference. Seeds are picked for wide greedy margins (the smallest
// top1-top2 logit gap over the 32 steps, our f32 run: 0.20 to 1.49). The same checkpoint as
// mlx-lm converts it (experts stacked under mlp.experts in
// MLX's mxfp4 mode, gate and up split) must decode exactly as the published layout does.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { writeGgufFromHf } from './helpers/gguf-writer.js';
import { disposeOracle, maxLogitsLogProbDiff, maxLogProbDiff, oracleGreedy } from './helpers/llama-oracle.js';
import { F32_KV_TYPES, greedy, openRunner, SERVER_KV_TYPES } from './helpers/model-harness.js';
import { expectMatchesLlamaCpp } from './helpers/oracle-cases.js';
import { mlxGptOssCheckpoint, type RandomCheckpointOptions } from './helpers/random-checkpoint.js';

const STEPS = 32;
// With f32 KV caches, as oracle-engine.test.ts: both sides in f32, differing in summation
// order and exp/tanh/rsqrt implementations; a real bug (a missing (1 + w), a window off by
// one, the wrong RoPE base on one layer) moves log-probs by ~1. Observed on these shapes with
// the families' own vocabularies: SmolLM3 5e-5; OLMo 2 2e-5; Phi-3 5e-5 and 3e-4;
// Granite 1.5e-3 (its multipliers amplify rounding); Gemma 2 6.8e-3 and Gemma 3 2.2e-2:
// llama.cpp's CPU GELU reads a table indexed by the f16-rounded input (GGML_GELU_FP16), a
// relative error up to 2^-11 per activation, over 6 layers for Gemma 3. Each case states
// its tolerance.
const LOGPROB_TOLERANCE = 1e-3;
// Both sides' default f16 KV caches add their rounding's error, as oracle-engine.test.ts
// states (each side rounds other values to f16), to a case's own: observed 4.7e-3 (Granite)
// to 2.6e-2 (Phi-3's long factors), Gemma 3 1.6e-2.
const F16_LOGPROB_TOLERANCE = 5e-2;
const MXFP4_TOLERANCE = 0.5;
const WINDOW = 8;

const shape = { hidden: 64, layers: 2, heads: 4, kvHeads: 2, headDim: 16, intermediate: 128 };

/**
 * GPT-OSS's YaRN in small (16 rotary dims, original context 1138, factor 32): rope_theta puts
 * the correction range (beta_fast 32 to beta_slow 1 rotations) at dims 1.0001 to 2.9997.
 * llama.cpp always rounds the range out to whole dims (transformers' truncate); GPT-OSS sets
 * truncate false, which we follow, so there the two agree to 1e-4 of the ramp.
 */
const YARN_ORIGINAL = 1138;
const YARN_THETA = Math.exp((8 * Math.log(YARN_ORIGINAL / (2 * Math.PI * 32))) / 1.0001);

interface FamilyCase extends RandomCheckpointOptions {
  label: string;
  /** Prepend the tokenizer's BOS to the prompt. */
  bos: boolean;
  /** Log-prob tolerance where it is not LOGPROB_TOLERANCE (see above). */
  tolerance?: number;
  /**
   * GPT-OSS: also compare the GGUF whose experts are GGML_MXFP4, within MXFP4_TOLERANCE (see
   * above), and our engine on the checkpoint as mlx-lm converts it, which must decode the same.
   */
  mxfp4?: boolean;
  /**
   * Both sides' KV caches in f32 (the tolerance without F16_LOGPROB_TOLERANCE): a mixture of
   * experts whose router sees a near tie picks another expert for an input moved by the f16
   * cache's rounding, which moves the log-probs past the tolerance or the greedy tokens apart.
   */
  f32Cache?: boolean;
}

const GEMMA3: FamilyCase = {
  ...shape, label: 'gemma3_text: 5 sliding + 1 global layer, local/global RoPE, q/k norm, tied', arch: 'gemma3_text', tokenizer: 'stories', layers: 6, tie: true, seed: 4, bos: true, tolerance: 5e-2,
  ropeTheta: 1e6, ropeScaling: { rope_type: 'linear', factor: 8 },
  extraConfig: { sliding_window: WINDOW, sliding_window_pattern: 6, rope_local_base_freq: 10000, final_logit_softcapping: null, attn_logit_softcapping: null },
};

const CASES: FamilyCase[] = [
  {
    // Four MXFP4 experts, top 2, biases everywhere, one sliding (window 8) and one full layer,
    // a sink logit per head (drawn ~N(0, 4), as large as the scores).
    ...shape, intermediate: 64, label: 'gpt_oss: MXFP4 experts (4, top 2, clamped SwiGLU, biases), attention sinks, sliding + full layers, YaRN',
    arch: 'gpt_oss', tokenizer: 'stories', seed: 12, bos: true, mxfp4: true,
    ropeTheta: YARN_THETA, maxPositions: 32 * YARN_ORIGINAL,
    ropeScaling: { rope_type: 'yarn', factor: 32, beta_fast: 32, beta_slow: 1, original_max_position_embeddings: YARN_ORIGINAL, truncate: false },
    extraConfig: { sliding_window: WINDOW },
  },
  GEMMA3,
  // The same decoder in a multimodal gemma3 checkpoint: text_config, the decoder under
  // language_model.model., vision tower and projector tensors beside it (not read).
  { ...GEMMA3, label: 'gemma3 multimodal checkpoint: decoder under language_model.model., vision tower ignored', multimodal: true },
  {
    ...shape, label: 'gemma2: alternating sliding layers, attention and final soft-capping', arch: 'gemma2', tokenizer: 'stories', seed: 3, bos: true, tie: true, tolerance: 2e-2,
    extraConfig: { sliding_window: WINDOW, attn_logit_softcapping: 4, final_logit_softcapping: 12 },
  },
  { ...shape, label: 'smollm3: every 4th layer NoPE', arch: 'smollm3', tokenizer: 'stories', layers: 4, seed: 12, bos: true },
  {
    ...shape, label: 'granite: embedding, attention, residual and logit multipliers', arch: 'granite', tokenizer: 'stories', seed: 8, bos: true, tolerance: 3e-3,
    extraConfig: { embedding_multiplier: 2, attention_multiplier: 0.3, residual_multiplier: 0.5, logits_scaling: 2 },
  },
  {
    ...shape, label: 'olmo2: norms after each block, q/k RMSNorm over all heads', arch: 'olmo2', tokenizer: 'stories', seed: 11, bos: true,
  },
  {
    // The prompt's prefill is a batch whose tokens pick different experts of the 8.
    ...shape, label: 'qwen3_moe: 8 experts, top-2 renormalised, q/k norm', arch: 'qwen3_moe', tokenizer: 'stories', seed: 12, bos: true, f32Cache: true,
  },
  { ...shape, label: 'mixtral: 8 experts, top-2, f16 weights (llama.cpp: llama with experts)', arch: 'mixtral', tokenizer: 'stories', seed: 13, bos: true, dtype: 'F16', f32Cache: true },
  {
    // Phi-4-mini's shape in small: RoPE over 3/4 of each head (24 of 32), fused qkv and
    // gate_up, longrope with the context (256) past original_max_position_embeddings (64), so
    // both sides rotate with the long factors and scale by the attention factor sqrt(2).
    // No sliding_window: llama.cpp ignores Phi-3's (it runs every layer with full attention).
    ...shape, hidden: 128, headDim: 32, label: 'phi3: fused qkv/gate_up, partial rotary, longrope long factors', arch: 'phi3', tokenizer: 'stories', seed: 9, bos: true,
    extraConfig: {
      partial_rotary_factor: 0.75, original_max_position_embeddings: 64,
      rope_scaling: { type: 'longrope', short_factor: ropeFactors(0.1), long_factor: ropeFactors(0.7) },
    },
  },
  {
    // The same with original_max_position_embeddings (1024) past the context: short factors.
    ...shape, hidden: 128, headDim: 32, label: 'phi3: longrope short factors', arch: 'phi3', tokenizer: 'stories', seed: 9, bos: true,
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
  afterAll(async () => {
    await disposeOracle();
    rmSync(tmp, { recursive: true, force: true });
  });
  const oracle = (f16KvCache: boolean) => (gguf: string, prompt: number[]) => oracleGreedy(gguf, prompt, STEPS, { f16KvCache });

  for (const [i, c] of CASES.entries()) {
    it(c.label, async () => {
      const dir = join(tmp, `${i}-${c.arch}`);
      const f16 = !c.f32Cache;
      const tolerance = (c.tolerance ?? LOGPROB_TOLERANCE) + (f16 ? F16_LOGPROB_TOLERANCE : 0);
      const kvTypes = f16 ? SERVER_KV_TYPES : F32_KV_TYPES;
      const maxTokens = c.extraConfig?.sliding_window ? WINDOW : undefined;
      const { prompt, ours } = await expectMatchesLlamaCpp(c, dir, { bos: c.bos, steps: STEPS, tolerance, oracle: oracle(f16), kvTypes, maxTokens });
      expect(prompt.length).toBeGreaterThan(WINDOW);
      if (!c.mxfp4) return;
      writeGgufFromHf(dir, `${dir}-mxfp4.gguf`, { name: 'random checkpoint' });
      const mxfp4 = maxLogProbDiff(ours.promptLogits, (await oracle(f16)(`${dir}-mxfp4.gguf`, prompt)).firstLogProbs);
      if (process.env.ORACLE_VERBOSE) console.info(`${c.arch}: max log-prob diff with GGML_MXFP4 experts ${mxfp4.toExponential(2)}`);
      expect(mxfp4).toBeLessThan(MXFP4_TOLERANCE);
      mlxGptOssCheckpoint(dir, `${dir}-mlx`);
      const mlx = await greedy(await openRunner(`${dir}-mlx`, 256, { kvTypes, maxTokens }), prompt, STEPS);
      expect(mlx.tokens).toEqual(ours.tokens);
      expect(maxLogitsLogProbDiff(mlx.promptLogits, ours.promptLogits)).toBeLessThan(1e-5);
    });
  }
});
