// config.ts's normaliser on config.json in each spelling transformers writes (v4 rope_theta +
// rope_scaling with rope_type or the legacy type, v5 rope_parameters, a multimodal
// wrapper's text_config) and on each value it refuses. Pure CPU.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { moduleQuantization, normalizeConfig, readModelConfig, type ModelConfig } from '../src/models/config.js';
import { checkpointNames, kvPlacements, kvRingBytes, kvTokenBytes } from '../src/models/model.js';
import { kvTextureRows } from '../src/runtime/tensors.js';
import { familyConfig, familyFor } from '../src/models/registry.js';
import { ropeAttentionFactor, ropeFreqDivisors, ropeInvFreq } from '../src/models/rope.js';

type Json = Record<string, unknown>;

// A Llama 3.1-shaped decoder, small.
const base: Json = {
  model_type: 'llama',
  hidden_size: 64,
  intermediate_size: 128,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: 16,
  vocab_size: 256,
  max_position_embeddings: 128,
  rms_norm_eps: 1e-5,
  hidden_act: 'silu',
  tie_word_embeddings: false,
  bos_token_id: 1,
  eos_token_id: [2, 3],
};
const llama3 = { factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 64 };

const norm = (over: Json): ModelConfig => normalizeConfig({ ...base, ...over });
const rope = (c: ModelConfig) => ({ ropeTheta: c.ropeTheta, ropeScaling: c.ropeScaling });
/** The message a config (the base with `over`) is refused with, by the normaliser or its family. */
const refusal = (over: Json): string => {
  try {
    familyConfig({ ...base, ...over });
  } catch (e) {
    return (e as Error).message;
  }
  throw new Error('accepted');
};

describe('normalizeConfig: spellings', () => {
  it('reads the decoder fields, eos from both files and the default RoPE', () => {
    const c = normalizeConfig({ ...base, rope_theta: 500000, rope_scaling: null }, { eos_token_id: [3, 4] });
    expect(c).toEqual({
      modelType: 'llama', hidden: 64, layers: 2, heads: 4, kvHeads: 2, headDim: 16, intermediate: 128, vocab: 256,
      rmsEps: 1e-5, ropeTheta: 500000, ropeScaling: undefined, rotaryDim: 16, maxPositions: 128, tieEmbeddings: false,
      quantization: undefined, eosTokenIds: [2, 3, 4], bosTokenId: 1, layerKv: ['full', 'full'],
    });
  });

  it('uses transformers defaults where config.json leaves a field out', () => {
    const { num_key_value_heads: _k, head_dim: _h, rms_norm_eps: _e, ...rest } = base;
    const c = normalizeConfig(rest);
    expect([c.kvHeads, c.headDim, c.rmsEps, c.ropeTheta, c.ropeScaling]).toEqual([4, 16, 1e-6, 10000, undefined]);
  });

  it('reads v5 rope_parameters like v4 rope_theta + rope_scaling', () => {
    const v4 = norm({ rope_theta: 1e6, rope_scaling: null });
    const v5 = norm({ rope_parameters: { rope_type: 'default', rope_theta: 1e6 } });
    expect(rope(v5)).toEqual(rope(v4));
    expect(rope(v5)).toEqual({ ropeTheta: 1e6, ropeScaling: undefined });
  });

  it('reads linear scaling under rope_type, the legacy type and rope_parameters', () => {
    const spellings = [
      norm({ rope_theta: 10000, rope_scaling: { rope_type: 'linear', factor: 4 } }),
      norm({ rope_theta: 10000, rope_scaling: { type: 'linear', factor: 4 } }),
      norm({ rope_parameters: { rope_type: 'linear', rope_theta: 10000, factor: 4 } }),
    ];
    for (const c of spellings) expect(rope(c)).toEqual({ ropeTheta: 10000, ropeScaling: { type: 'linear', factor: 4 } });
    const unscaled = ropeInvFreq(norm({ rope_theta: 10000 }));
    expect([...ropeInvFreq(spellings[0]!)]).toEqual([...unscaled].map((f) => Math.fround(f / 4)));
  });

  it('gives llama3 scaling identical inverse frequencies in every spelling', () => {
    const spellings = [
      norm({ rope_theta: 10000, rope_scaling: { rope_type: 'llama3', ...llama3 } }),
      norm({ rope_theta: 10000, rope_scaling: { type: 'llama3', ...llama3 } }),
      norm({ rope_parameters: { rope_type: 'llama3', rope_theta: 10000, ...llama3 } }),
      // A v5 config that also keeps the v4 fields, agreeing.
      norm({ rope_theta: 10000, rope_scaling: { rope_type: 'llama3', ...llama3 }, rope_parameters: { rope_type: 'llama3', rope_theta: 10000, ...llama3 } }),
    ];
    const expected = { type: 'llama3', factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositions: 64 };
    for (const c of spellings) {
      expect(c.ropeScaling).toEqual(expected);
      expect([...ropeInvFreq(c)]).toEqual([...ropeInvFreq(spellings[0]!)]);
    }
    // transformers' _compute_llama3_parameters: wavelengths 6.3 (< 64/4: kept), 19.9 and
    // 62.8 (smoothed), >= 199 (> 64: divided by 8).
    expect([...ropeFreqDivisors(spellings[0]!)].map((v) => +v.toFixed(5))).toEqual([1, 1.29398, 7.66739, 8, 8, 8, 8, 8]);
  });

  it("reads GPT-OSS's yarn rope_scaling as transformers' _compute_yarn_parameters does", () => {
    const gptOss = { rope_type: 'yarn', factor: 32, beta_fast: 32, beta_slow: 1, original_max_position_embeddings: 4096, truncate: false };
    const c = norm({ head_dim: 64, rope_theta: 150000, max_position_embeddings: 131072, rope_scaling: gptOss });
    expect(c.ropeScaling).toEqual({ type: 'yarn', factor: 32, originalMaxPositions: 4096, betaFast: 32, betaSlow: 1, truncate: false, attentionFactor: 1 + 0.1 * Math.log(32) });
    expect(ropeAttentionFactor(c)).toBeCloseTo(1.34657, 5);
    // Frequencies 6-19 of 32: the correction range is dims 8.09 to 17.40 (untruncated), or 8
    // to 18 rounded out (truncate, the default); below it kept, above it divided by 32.
    expect([...ropeFreqDivisors(c)].slice(6, 20).map((v) => +v.toFixed(5))).toEqual(
      [1, 1, 1, 1.1043, 1.24775, 1.43403, 1.68569, 2.04449, 2.59733, 3.55994, 5.65625, 13.75752, 32, 32]);
    const truncated = norm({ head_dim: 64, rope_theta: 150000, max_position_embeddings: 131072, rope_scaling: { ...gptOss, truncate: true } });
    expect([...ropeFreqDivisors(truncated)].slice(6, 20).map((v) => +v.toFixed(5))).toEqual(
      [1, 1, 1, 1.10727, 1.24031, 1.40969, 1.63265, 1.93939, 2.38806, 3.1068, 4.44444, 7.80488, 32, 32]);
    expect(() => norm({ head_dim: 64, max_position_embeddings: 4096, rope_scaling: gptOss })).toThrow(
      'config.json: rope_scaling.factor 32 differs from max_position_embeddings / original_max_position_embeddings = 1');
  });

  it('takes llama3 original_max_position_embeddings from the top level or max_position_embeddings as v5 does', () => {
    const { original_max_position_embeddings: _o, ...partial } = llama3;
    const top = norm({ rope_scaling: { rope_type: 'llama3', ...partial }, original_max_position_embeddings: 32 });
    const fallback = norm({ rope_scaling: { rope_type: 'llama3', ...partial } });
    expect(top.ropeScaling).toMatchObject({ originalMaxPositions: 32 });
    expect(fallback.ropeScaling).toMatchObject({ originalMaxPositions: 128 });
  });

  it('accepts per-layer-type rope_parameters that agree', () => {
    const one = { rope_type: 'default', rope_theta: 1e6 };
    const c = norm({ rope_parameters: { full_attention: one, sliding_attention: { ...one } } });
    expect(rope(c)).toEqual({ ropeTheta: 1e6, ropeScaling: undefined });
  });

  it("merges a wrapper's text_config: its model_type, the wrapper's quantization", () => {
    const { model_type: _m, ...text } = base;
    const c = normalizeConfig({
      model_type: 'qwen2_5_vl',
      architectures: ['Qwen2_5_VLForConditionalGeneration'],
      quantization: { group_size: 32, bits: 4 },
      text_config: { ...text, model_type: 'qwen2', rope_parameters: { rope_type: 'default', rope_theta: 1e6 } },
    });
    expect([c.modelType, c.hidden, c.layers, c.ropeTheta]).toEqual(['qwen2', 64, 2, 1e6]);
    expect(c.quantization).toEqual({ bits: 4, groupSize: 32, modules: {} });
    expect(normalizeConfig({ model_type: 'wrapper', text_config: text }).modelType).toBe('wrapper');
  });

  it('reads MLX quantization from quantization or quantization_config', () => {
    expect(norm({ quantization: { group_size: 64, bits: 8, mode: 'affine' } }).quantization).toEqual({ bits: 8, groupSize: 64, modules: {} });
    expect(norm({ quantization_config: { bits: 4 } }).quantization).toEqual({ bits: 4, groupSize: 64, modules: {} });
  });
});

describe('normalizeConfig: per-family fields', () => {
  it('reads per-layer-type rope_parameters, partial rotary factors and longrope', () => {
    const perType = norm({ rope_parameters: { full_attention: { rope_type: 'linear', factor: 8, rope_theta: 1e6 }, sliding_attention: { rope_type: 'default', rope_theta: 1e4 } } });
    expect([perType.ropeTheta, perType.ropeScaling]).toEqual([1e6, { type: 'linear', factor: 8 }]);
    expect(perType.layerRopes?.sliding_attention).toEqual({ ropeTheta: 1e4 });
    const phi = norm({ partial_rotary_factor: 0.5, max_position_embeddings: 256, original_max_position_embeddings: 64, rope_scaling: { type: 'longrope', short_factor: [1, 2, 3, 4], long_factor: [5, 6, 7, 8] } });
    expect(phi.rotaryDim).toBe(8);
    expect([...ropeFreqDivisors(phi, 64)]).toEqual([1, 2, 3, 4]);
    expect([...ropeFreqDivisors(phi, 65)]).toEqual([5, 6, 7, 8]);
    expect(ropeAttentionFactor(phi)).toBeCloseTo(Math.sqrt(1 + Math.log(4) / Math.log(64)), 12);
  });

  it("fills a Gemma 3 text_config's missing fields with Gemma3TextConfig's defaults", () => {
    const c = normalizeConfig({ model_type: 'gemma3', eos_token_id: [1, 106], text_config: { model_type: 'gemma3_text', hidden_size: 2560, intermediate_size: 10240, num_hidden_layers: 34 } });
    expect([c.modelType, c.hidden, c.heads, c.kvHeads, c.headDim, c.vocab, c.ropeTheta]).toEqual(['gemma3_text', 2560, 8, 4, 256, 262208, 1e6]);
  });

  it('each layer declares what it keeps in the KV cache, and a window layer keeps a ring of window + chunk - 1 positions where shorter than the context', () => {
    // Gemma 3 1B's shape: 26 layers, five windowed (512) to one global, one KV head of 256.
    const gemma = familyConfig({
      ...base, model_type: 'gemma3_text', hidden_size: 1152, num_hidden_layers: 26, num_attention_heads: 4, num_key_value_heads: 1, head_dim: 256,
      sliding_window: 512, max_position_embeddings: 32768, hidden_act: undefined, hidden_activation: 'gelu_pytorch_tanh',
    }).cfg;
    expect(gemma.layerKv.map((l) => (l === 'full' ? 'F' : l === 'none' ? '-' : l.window)).join(' ')).toBe([...Array(26).keys()].map((i) => ((i + 1) % 6 === 0 ? 'F' : 512)).join(' '));
    const rings = kvPlacements(gemma.layerKv, { slots: 4, chunk: 512, maxContext: 32768 });
    expect([rings.filter((r) => r === 1023).length, rings.filter((r) => r === 0).length]).toEqual([22, 4]);
    const f16 = { k: 'f16', v: 'f16' } as const;
    // The paged pool's bytes per position: the four global layers' 256 keys and 256 values in f16.
    expect(kvTokenBytes(gemma, f16, rings)).toBe(4 * 256 * 2 * 2);
    expect(kvTokenBytes(gemma, f16, kvPlacements(gemma.layerKv))).toBe(26 * 256 * 2 * 2);
    // 22 rings of 4 slots x 1023 positions (texture rows of 4096 texels rounded up).
    expect(kvRingBytes(gemma, f16, rings, 4)).toBe(22 * 4096 * kvTextureRows((4 * 1023 * 256) / 4) * 16);
    expect(kvPlacements(gemma.layerKv, { slots: 4, chunk: 512, maxContext: 1023 }).every((r) => r === 0)).toBe(true);
    // Mistral's window on every layer; a layer without one keeps every position.
    expect(familyConfig({ ...base, model_type: 'mistral', sliding_window: 8 }).cfg.layerKv).toEqual([{ window: 8 }, { window: 8 }]);
    expect(familyConfig({ ...base, model_type: 'mistral', sliding_window: null }).cfg.layerKv).toEqual(['full', 'full']);
  });
});

describe('normalizeConfig: refusals', () => {
  it('refuses rope types rope.ts does not implement, naming the type and file', () => {
    expect(refusal({ rope_scaling: { rope_type: 'dynamic', factor: 4, original_max_position_embeddings: 32 } }))
      .toBe('config.json: rope_scaling.rope_type "dynamic" is not supported (supported: default, linear, llama3, longrope, yarn)');
    expect(refusal({ rope_scaling: { type: 'dynamic', factor: 2 } })).toMatch(/^config\.json: rope_scaling\.rope_type "dynamic" is not supported/);
    expect(refusal({ rope_scaling: { type: 'su' } })).toBe('config.json: rope_scaling.short_factor must be a list of positive numbers, got undefined');
    expect(refusal({ rope_scaling: { rope_type: 'linear', type: 'dynamic', factor: 2 } }))
      .toBe('config.json: rope_scaling.rope_type "linear" and rope_scaling.type "dynamic" disagree');
  });

  it('refuses per-layer-type rope_parameters that differ in a family with one RoPE', () => {
    expect(refusal({ rope_parameters: { full_attention: { rope_type: 'default', rope_theta: 1e6 }, sliding_attention: { rope_type: 'default', rope_theta: 1e4 } } }))
      .toBe('config.json: rope_parameters differ by layer type (full_attention, sliding_attention); one RoPE for every layer is supported');
  });

  it('refuses a theta given twice with different values, and rope dicts that disagree', () => {
    expect(refusal({ rope_theta: 10000, rope_parameters: { rope_type: 'default', rope_theta: 500000 } }))
      .toBe('config.json: rope_parameters.rope_theta 500000 and rope_theta 10000 disagree');
    expect(norm({ rope_theta: 500000, rope_parameters: { rope_type: 'default', rope_theta: 500000 } }).ropeTheta).toBe(500000);
    expect(refusal({ rope_scaling: { rope_type: 'linear', factor: 2 }, rope_parameters: { rope_type: 'linear', factor: 4 } }))
      .toBe('config.json: rope_scaling and rope_parameters disagree');
  });

  it('refuses llama3 scaling without its required fields', () => {
    for (const key of ['factor', 'low_freq_factor', 'high_freq_factor'] as const) {
      const { [key]: _drop, ...partial } = llama3;
      expect(refusal({ rope_scaling: { rope_type: 'llama3', ...partial } })).toBe(`config.json: rope_scaling.${key} is missing`);
    }
    const { original_max_position_embeddings: _o, ...partial } = llama3;
    const { max_position_embeddings: _m, ...noMax } = base;
    expect(() => normalizeConfig({ ...noMax, rope_scaling: { rope_type: 'llama3', ...partial } })).toThrow('config.json: max_position_embeddings is missing');
    expect(refusal({ rope_scaling: { rope_type: 'llama3', ...llama3, low_freq_factor: 4, high_freq_factor: 1 } }))
      .toBe('config.json: rope_scaling.high_freq_factor 1 must exceed low_freq_factor 4');
    expect(refusal({ rope_scaling: { rope_type: 'linear' } })).toBe('config.json: rope_scaling.factor is missing');
  });

  it('refuses partial rotary factors the rope kernel cannot take', () => {
    expect(refusal({ partial_rotary_factor: 0.25 })).toBe('config.json: partial_rotary_factor 0.25 rotates 4 of head_dim 16; a multiple of 8 is supported');
    expect(refusal({ rope_parameters: { rope_type: 'default', partial_rotary_factor: 2 } })).toBe('config.json: partial_rotary_factor 2 must be at most 1');
  });

  it('refuses missing and non-numeric fields by name', () => {
    expect(refusal({ hidden_size: '64' })).toBe('config.json: hidden_size must be a number, got "64"');
    expect(refusal({ num_hidden_layers: undefined })).toBe('config.json: num_hidden_layers is missing');
    expect(refusal({ vocab_size: null })).toBe('config.json: vocab_size is missing');
    expect(refusal({ intermediate_size: 12.5 })).toBe('config.json: intermediate_size must be a positive integer, got 12.5');
    expect(refusal({ rms_norm_eps: 0 })).toBe('config.json: rms_norm_eps must be positive, got 0');
    expect(refusal({ rope_theta: 'big' })).toBe('config.json: rope_theta must be a number, got "big"');
    expect(refusal({ num_key_value_heads: 3 })).toBe('config.json: num_key_value_heads 3 does not divide num_attention_heads 4');
    expect(refusal({ tie_word_embeddings: 'yes' })).toBe('config.json: tie_word_embeddings must be true or false, got "yes"');
    expect(refusal({ eos_token_id: 'x' })).toBe('config.json: eos_token_id must be token ids, got "x"');
  });

  it('refuses settings the decoder does not implement', () => {
    expect(refusal({ hidden_act: 'gelu_pytorch_tanh' })).toBe('config.json: hidden_act "gelu_pytorch_tanh" is not supported (supported: "silu")');
    expect(refusal({ model_type: 'qwen2', use_sliding_window: true })).toBe('config.json: use_sliding_window true is not supported (supported: false)');
    expect(refusal({ attention_bias: true })).toBe('config.json: attention_bias true is not supported (supported: false)');
    expect(refusal({ model_type: 'gemma2', hidden_activation: 'relu' })).toBe('config.json: hidden_activation "relu" is not supported (supported: "gelu_pytorch_tanh", "gelu_new", "gelu")');
    expect(refusal({ model_type: 'gemma3_text', layer_types: ['full_attention'] })).toBe('config.json: layer_types must list sliding_attention or full_attention for each of the 2 layers');
    expect(refusal({ model_type: 'smollm3', no_rope_layers: [1, 2] })).toBe('config.json: no_rope_layers must be 0 or 1 for each of the 2 layers');
    expect(refusal({ model_type: 'falcon' })).toMatch(/^model_type "falcon" is not supported \(supported: bert, xlm-roberta, llama, mistral, qwen2, qwen2_5_vl, qwen2_5_vl_text, qwen3, qwen3_moe, mixtral, gpt_oss, gemma2, gemma3, gemma3_text, phi3, smollm3, granite, olmo2, lfm2, nemotron_h, granitemoehybrid\)$/);
  });

  it('refuses mixture-of-experts settings it cannot honour, naming the field', () => {
    const qwen = { model_type: 'qwen3_moe', num_experts: 8, num_experts_per_tok: 2, moe_intermediate_size: 32 };
    expect(refusal({ ...qwen, num_experts: undefined })).toBe('config.json: num_experts is missing');
    expect(refusal({ ...qwen, num_experts_per_tok: 9 })).toBe('config.json: num_experts_per_tok 9 exceeds num_experts 8');
    expect(refusal({ ...qwen, mlp_only_layers: [2] })).toBe('config.json: mlp_only_layers must be a list of layer indices below 2, got [2]');
    expect(refusal({ ...qwen, norm_topk_prob: 'yes' })).toBe('config.json: norm_topk_prob must be true or false, got "yes"');
    expect(refusal({ ...qwen, use_sliding_window: true })).toBe('config.json: use_sliding_window true is not supported (supported: false)');
    const mixtral = { model_type: 'mixtral', num_local_experts: 8, num_experts_per_tok: 2 };
    expect(refusal({ ...mixtral, hidden_act: 'gelu' })).toBe('config.json: hidden_act "gelu" is not supported (supported: "silu")');
    expect(refusal({ ...mixtral, num_local_experts: 0 })).toBe('config.json: num_local_experts must be a positive integer, got 0');
    expect(refusal({ ...mixtral, sliding_window: 0 })).toBe('config.json: sliding_window must be a positive integer, got 0');
  });

  it('refuses GPT-OSS settings it cannot honour, naming the field', () => {
    const gptOss = { model_type: 'gpt_oss', attention_bias: true, num_local_experts: 4, num_experts_per_tok: 2, sliding_window: 128 };
    expect(refusal({ ...gptOss, attention_bias: false })).toBe('config.json: attention_bias false is not supported (supported: true)');
    expect(refusal({ ...gptOss, experts_per_token: 3 })).toBe('config.json: experts_per_token 3 disagrees with num_experts_per_tok 2');
    expect(refusal({ ...gptOss, num_experts_per_tok: 5 })).toBe('config.json: num_experts_per_tok 5 exceeds num_local_experts 4');
    expect(refusal({ ...gptOss, swiglu_limit: -1 })).toBe('config.json: swiglu_limit must be positive, got -1');
    expect(refusal({ ...gptOss, sliding_window: null })).toBe('config.json: sliding_window is missing');
    expect(refusal({ ...gptOss, layer_types: ['chunked_attention', 'full_attention'] }))
      .toBe('config.json: layer_types must list sliding_attention or full_attention for each of the 2 layers');
    expect(refusal({ ...gptOss, hidden_act: 'gelu' })).toBe('config.json: hidden_act "gelu" is not supported (supported: "silu")');
  });

  it('refuses hybrid state-space settings it cannot honour, naming the field', () => {
    const nemotron = { model_type: 'nemotron_h', hybrid_override_pattern: 'M*', mamba_num_heads: 4, mamba_head_dim: 16, ssm_state_size: 16, n_groups: 2 };
    expect(refusal({ ...nemotron, hybrid_override_pattern: 'ME' })).toBe('config.json: hybrid_override_pattern "E" is not supported (M: Mamba-2, *: attention, -: MLP)');
    expect(refusal({ ...nemotron, hybrid_override_pattern: 'M' })).toBe('config.json: hybrid_override_pattern must be a string of num_hidden_layers (2) characters, got "M"');
    expect(refusal({ ...nemotron, n_groups: 3 })).toBe('config.json: n_groups 3 does not divide mamba_num_heads 4');
    expect(refusal({ ...nemotron, mlp_hidden_act: 'gelu' })).toBe('config.json: mlp_hidden_act "gelu" is not supported (supported: "relu2")');
    expect(refusal({ ...nemotron, time_step_limit: [0.001, 0.1] })).toBe('config.json: time_step_limit [0.001,0.1] is not supported (only (0, inf): no clamp)');
    expect(refusal({ ...nemotron, conv_kernel: 9 })).toBe('config.json: conv_kernel 9 is not supported (2 to 8)');
    const lfm2 = { model_type: 'lfm2', layer_types: ['conv', 'full_attention'] };
    expect(refusal({ ...lfm2, conv_bias: true })).toBe('config.json: conv_bias true is not supported (supported: false)');
    expect(refusal({ ...lfm2, layer_types: ['conv', 'sliding_attention'] })).toBe('config.json: layer_types must list num_hidden_layers (2) of "full_attention" and "conv", got ["conv","sliding_attention"]');
    const granite = { model_type: 'granitemoehybrid', layer_types: ['mamba', 'attention'], shared_intermediate_size: 64, mamba_n_heads: 8, mamba_d_head: 16, mamba_expand: 2, mamba_d_state: 16 };
    expect(refusal({ ...granite, num_local_experts: 8 })).toBe('config.json: num_experts_per_tok is missing');
    expect(refusal({ ...granite, num_local_experts: 2, num_experts_per_tok: 3 })).toBe('config.json: num_experts_per_tok 3 exceeds num_local_experts 2');
    expect(refusal({ ...granite, mamba_expand: 3 })).toBe('config.json: mamba_expand 3 * hidden_size 64 is not mamba_n_heads * mamba_d_head (128)');
  });

  it('refuses quantization it cannot read', () => {
    expect(refusal({ quantization: { group_size: 64, bits: 7 } })).toBe('config.json: quantization.bits 7 is not supported (MLX affine 2, 3, 4, 5, 6, 8 bits)');
    expect(refusal({ quantization: { group_size: 16, bits: 4 } })).toBe('config.json: quantization.group_size 16 is not supported (32, 64, 128)');
    expect(refusal({ quantization_config: { quant_method: 'gptq', bits: 4, group_size: 128 } }))
      .toBe('config.json: quantization_config.quant_method "gptq" is not supported (MLX affine quantization, or mxfp4)');
    expect(refusal({ quantization: { group_size: 64, bits: 4, mode: 'nvfp4' } })).toBe('config.json: quantization.mode "nvfp4" is not supported (supported: "affine", "mxfp4")');
    expect(refusal({ quantization: { group_size: 64, bits: 4, mode: 'mxfp4' } })).toBe('config.json: quantization.mode mxfp4 takes bits 4 and group_size 32, got 4 and 64');
    expect(refusal({ quantization: { group_size: 64, bits: 4, 'model.layers.0.mlp.down_proj': { bits: 1, group_size: 64 } } }))
      .toBe('config.json: quantization.model.layers.0.mlp.down_proj.bits 1 is not supported (MLX affine 2, 3, 4, 5, 6, 8 bits)');
  });

  it('reads per-module quantization (mixed-bit checkpoints)', () => {
    const q = { group_size: 64, bits: 3, mode: 'affine', 'model.layers.0.mlp.down_proj': { bits: 6, group_size: 64 }, lm_head: { bits: 8 }, 'model.embed_tokens': false };
    const cfg = norm({ quantization: q });
    expect(cfg.quantization).toEqual({
      bits: 3, groupSize: 64,
      modules: { 'model.layers.0.mlp.down_proj': { bits: 6, groupSize: 64 }, lm_head: { bits: 8, groupSize: 64 }, 'model.embed_tokens': false },
    });
    expect(moduleQuantization(cfg.quantization, 'model.layers.0.mlp.down_proj', true)).toEqual({ bits: 6, groupSize: 64 });
    expect(moduleQuantization(cfg.quantization, 'model.embed_tokens', false)).toBeUndefined();
    expect(moduleQuantization(cfg.quantization, 'model.layers.0.mlp.up_proj', true)).toMatchObject({ bits: 3, groupSize: 64 });
    // A module with no entry and no scales in the checkpoint is a float weight (mlx-lm's loader).
    expect(moduleQuantization(cfg.quantization, 'model.layers.0.mlp.up_proj', false)).toBeUndefined();
  });
});

describe('readModelConfig', () => {
  const dir = mkdtempSync(join(tmpdir(), 'model-config-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('reads config.json and generation_config.json from the folder', () => {
    writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...base, rope_parameters: { rope_type: 'llama3', rope_theta: 500000, ...llama3 } }));
    writeFileSync(join(dir, 'generation_config.json'), JSON.stringify({ eos_token_id: 9 }));
    const c = readModelConfig(dir);
    expect(c.eosTokenIds).toEqual([2, 3, 9]);
    expect(c.ropeTheta).toBe(500000);
    expect(c.ropeScaling?.type).toBe('llama3');
  });

  it('names the file in a refusal', () => {
    writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...base, rope_scaling: { rope_type: 'dynamic', factor: 4 } }));
    expect(() => readModelConfig(dir)).toThrow(`${join(dir, 'config.json')}: rope_scaling.rope_type "dynamic" is not supported`);
  });
});

describe('checkpointNames: where a family finds its tensors', () => {
  const names = (family: string, tensors: string[]) => checkpointNames(familyFor(family), tensors).of;

  it("maps Gemma 3's decoder to a multimodal checkpoint's layout, and leaves a text checkpoint's names", () => {
    const tensors = ['language_model.model.embed_tokens.weight', 'vision_tower.vision_model.post_layernorm.weight', 'multi_modal_projector.mm_soft_emb_norm.weight'];
    const published = names('gemma3', tensors);
    expect(published('model.layers.0.self_attn.q_proj')).toBe('language_model.model.layers.0.self_attn.q_proj');
    // The vision tower and projector are not the decoder's (load progress and the GGUF writer leave them out).
    expect(tensors.filter(checkpointNames(familyFor('gemma3'), tensors).isFamily)).toEqual(['language_model.model.embed_tokens.weight']);
    expect(published('lm_head.weight')).toBe('language_model.lm_head.weight');
    const saved = names('gemma3', ['model.language_model.embed_tokens.weight', 'model.vision_tower.vision_model.post_layernorm.weight', 'lm_head.weight']);
    expect(saved('model.norm.weight')).toBe('model.language_model.norm.weight');
    expect(saved('lm_head.weight')).toBe('lm_head.weight');
    const text = names('gemma3_text', ['model.embed_tokens.weight', 'lm_head.weight']);
    expect(text('model.embed_tokens')).toBe('model.embed_tokens');
    expect(text('lm_head.weight')).toBe('lm_head.weight');
  });

  it("maps Qwen2.5-VL's decoder to transformers' and mlx-vlm's layouts, the vision tower outside it; refuses an mrope_section that does not split the rotary pairs", () => {
    const saved = ['model.language_model.embed_tokens.weight', 'model.visual.merger.ln_q.weight', 'lm_head.weight'];
    expect(names('qwen2_5_vl', saved)('model.layers.1.self_attn.q_proj')).toBe('model.language_model.layers.1.self_attn.q_proj');
    expect(saved.filter(checkpointNames(familyFor('qwen2_5_vl'), saved).isFamily)).toEqual(['model.language_model.embed_tokens.weight', 'lm_head.weight']);
    const mlx = ['language_model.model.embed_tokens.weight', 'vision_tower.merger.ln_q.weight'];
    expect(names('qwen2_5_vl', mlx)('lm_head.weight')).toBe('language_model.lm_head.weight');
    const earlier = ['model.embed_tokens.weight', 'visual.merger.ln_q.weight'];
    expect(earlier.filter(checkpointNames(familyFor('qwen2_5_vl'), earlier).isFamily)).toEqual(['model.embed_tokens.weight']);
    // head_dim 16: 8 rotary pairs.
    expect(() => familyConfig({ ...base, model_type: 'qwen2_5_vl', rope_scaling: { type: 'mrope', mrope_section: [2, 3, 3] } })).not.toThrow();
    expect(refusal({ model_type: 'qwen2_5_vl', rope_scaling: { type: 'mrope', mrope_section: [16, 24, 24] } })).toMatch(/mrope_section must be three counts of rotary pairs adding up to head_dim \/ 2 = 8, got \[16,24,24\]/);
    expect(refusal({ model_type: 'qwen2_5_vl' })).toMatch(/mrope_section must be/);
  });

  it("finds an encoder bare or under its task model's prefix, with the classifier head at the top", () => {
    const tensors = ['roberta.embeddings.word_embeddings.weight', 'classifier.dense.weight', 'roberta.pooler.dense.weight'];
    const roberta = names('xlm-roberta', tensors);
    expect(tensors.filter(checkpointNames(familyFor('xlm-roberta'), tensors).isFamily)).toEqual(tensors.slice(0, 2));
    expect(roberta('encoder.layer.0.attention.self.query')).toBe('roberta.encoder.layer.0.attention.self.query');
    expect(roberta('classifier.out_proj.weight')).toBe('classifier.out_proj.weight');
    expect(names('bert', ['bert.embeddings.word_embeddings.weight'])('embeddings.LayerNorm.weight')).toBe('bert.embeddings.LayerNorm.weight');
    expect(names('bert', ['embeddings.word_embeddings.weight'])('embeddings.LayerNorm.weight')).toBe('embeddings.LayerNorm.weight');
  });
});
