// config.json + generation_config.json of a Hugging Face checkpoint, normalised to the
// fields the decoder needs.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

export interface RopeScaling {
  rope_type?: string;
  type?: string;
  factor?: number;
  low_freq_factor?: number;
  high_freq_factor?: number;
  original_max_position_embeddings?: number;
}

export interface Quantization {
  bits: 4 | 8;
  groupSize: number;
}

export interface ModelConfig {
  modelType: string;
  hidden: number;
  layers: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  intermediate: number;
  vocab: number;
  rmsEps: number;
  ropeTheta: number;
  ropeScaling?: RopeScaling;
  maxPositions: number;
  tieEmbeddings: boolean;
  quantization?: Quantization;
  /** Ids that end generation: config eos plus generation_config eos (which may be a list). */
  eosTokenIds: number[];
  bosTokenId?: number;
}

type Json = Record<string, unknown>;

function readJson(path: string): Json | undefined {
  return existsSync(path) ? (JSON.parse(readFileSync(path, 'utf8')) as Json) : undefined;
}

const ids = (v: unknown): number[] => (v == null ? [] : Array.isArray(v) ? (v as number[]) : [v as number]);

export function readModelConfig(dir: string): ModelConfig {
  const c = readJson(join(dir, 'config.json'));
  if (!c) throw new Error(`${dir}: no config.json`);
  const gen = readJson(join(dir, 'generation_config.json')) ?? {};
  const num = (key: string, fallback?: number): number => {
    const v = c[key] ?? fallback;
    if (typeof v !== 'number') throw new Error(`config.json: ${key} missing`);
    return v;
  };
  const heads = num('num_attention_heads');
  const hidden = num('hidden_size');
  const q = (c.quantization ?? c.quantization_config) as { bits?: number; group_size?: number } | undefined;
  let quantization: Quantization | undefined;
  if (q && q.bits !== undefined) {
    if (q.bits !== 4 && q.bits !== 8) throw new Error(`quantization: ${q.bits}-bit weights are not supported (4 or 8)`);
    quantization = { bits: q.bits, groupSize: q.group_size ?? 64 };
  }
  return {
    modelType: String(c.model_type ?? ''),
    hidden,
    layers: num('num_hidden_layers'),
    heads,
    kvHeads: num('num_key_value_heads', heads),
    headDim: num('head_dim', hidden / heads),
    intermediate: num('intermediate_size'),
    vocab: num('vocab_size'),
    rmsEps: num('rms_norm_eps', 1e-6),
    ropeTheta: num('rope_theta', 10000),
    ropeScaling: (c.rope_scaling ?? undefined) as RopeScaling | undefined,
    maxPositions: num('max_position_embeddings', 4096),
    tieEmbeddings: Boolean(c.tie_word_embeddings ?? false),
    quantization,
    eosTokenIds: [...new Set([...ids(c.eos_token_id), ...ids(gen.eos_token_id)])],
    bosTokenId: typeof c.bos_token_id === 'number' ? c.bos_token_id : undefined,
  };
}
