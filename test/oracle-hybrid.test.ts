// The hybrid state-space families against llama.cpp (node-llama-cpp) on GGUFs written from
// the same random weights, as test/oracle-families.test.ts does for the transformers:
// Nemotron-H with every layer kind (Mamba-2 with 8 heads in 2 groups, attention without
// RoPE, a squared-ReLU MLP), LFM2 (gated short convolutions and attention with q/k norms)
// and dense Granite 4.0-H (Mamba-2 with one group, since llama.cpp norms the gated output
// per group where transformers norms it whole; NoPE attention; the shared SwiGLU MLP,
// which llama.cpp takes as ffn_gate / ffn_up split from input_linear; the multipliers), and
// Granite 4.0-H with experts. Nemotron-H's weights are stored in bf16 and dense Granite's in
// f16 (both sides read the same rounded values). Observed log-prob gaps: 2.6e-5, 2.4e-5,
// 2.1e-5, 1.9e-5.
// 32 greedy tokens agree and the prompt's next-token log-probs agree within the tolerance
// below. The prompt (~20 tokens) is prefilled in chunks of 5 tokens (a chunk boundary
// inside the conv window and the scan), and the 32 decode steps run far past the conv
// window. Tolerance: both sides compute in f32 but llama.cpp's scan, conv and norms sum in
// other orders; a real bug (the state lost at a chunk boundary, a conv tap off by one, the
// wrong norm group) moves log-probs by far more than 1e-2. Both sides' KV caches are f32.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, it } from 'vitest';
import { disposeOracle } from './helpers/llama-oracle.js';
import { F32_KV_TYPES } from './helpers/model-harness.js';
import { expectMatchesLlamaCpp } from './helpers/oracle-cases.js';
import type { RandomCheckpointOptions } from './helpers/random-checkpoint.js';

const STEPS = 32;
const LOGPROB_TOLERANCE = 1e-3;
const shape = { hidden: 64, layers: 4, heads: 4, kvHeads: 2, headDim: 16, intermediate: 128 };

const CASES: Array<RandomCheckpointOptions & { label: string }> = [
  { ...shape, label: 'nemotron_h: Mamba-2, attention, Mamba-2, squared-ReLU MLP (bf16)', arch: 'nemotron_h', tokenizer: 'stories', seed: 21, dtype: 'BF16' },
  { ...shape, label: 'lfm2: short conv, attention, short conv, attention (tied)', arch: 'lfm2', tokenizer: 'stories', seed: 22, tie: true },
  { ...shape, label: 'granitemoehybrid: Mamba-2 and NoPE attention with shared SwiGLU MLPs, Granite multipliers (f16)', arch: 'granitemoehybrid', tokenizer: 'stories', seed: 23, dtype: 'F16' },
  {
    ...shape, label: 'granitemoehybrid with experts: 8 experts, top 2, beside the shared MLP', arch: 'granitemoehybrid', tokenizer: 'stories', seed: 24,
    extraConfig: { num_local_experts: 8, num_experts_per_tok: 2, intermediate_size: 64 },
  },
];

describe('hybrid families vs llama.cpp on random checkpoints', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'mlxcel-hybrid-'));
  afterAll(async () => {
    await disposeOracle();
    rmSync(tmp, { recursive: true, force: true });
  });
  for (const [i, c] of CASES.entries()) {
    it(c.label, async () => {
      await expectMatchesLlamaCpp(c, join(tmp, `${i}-${c.arch}`), { bos: true, steps: STEPS, tolerance: LOGPROB_TOLERANCE, maxTokens: 5, kvTypes: F32_KV_TYPES });
    });
  }
});
