// config.json + generation_config.json of a Hugging Face checkpoint, normalised to the
// fields the decoder needs. Reads both transformers spellings of RoPE (v4: rope_theta +
// rope_scaling; v5: rope_parameters, one dict or one per layer type) and a multimodal
// wrapper's decoder fields from its text_config. A rope type or field value the engine
// cannot honour is refused here, with the file and field in the message; the only
// defaults are transformers' own.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/** The RoPE frequency scalings the engine implements (rope.ts); unscaled RoPE has none. */
export type RopeScaling =
  | { type: 'linear'; factor: number }
  | { type: 'llama3'; factor: number; lowFreqFactor: number; highFreqFactor: number; originalMaxPositions: number };

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

export type RopeConfig = Pick<ModelConfig, 'headDim' | 'ropeTheta' | 'ropeScaling'>;

type Rope = Pick<ModelConfig, 'ropeTheta' | 'ropeScaling'>;
type Json = Record<string, unknown>;

/** transformers' default rope_theta (RotaryEmbeddingConfigMixin.default_theta, LlamaConfig, Qwen2Config, Qwen3Config). */
const DEFAULT_ROPE_THETA = 10000;
/** mlx-lm's default quantization group size. */
const DEFAULT_GROUP_SIZE = 64;

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
const show = (v: unknown): string => JSON.stringify(v) ?? String(v);

/** Typed reads of `obj`'s fields (null counts as absent); errors name `file` and `prefix` + the key. */
function fields(obj: Json, file: string, prefix = '') {
  const fail = (key: string, what: string): never => {
    throw new Error(`${file}: ${prefix}${key} ${what}`);
  };
  const number = (key: string, fallback?: number): number => {
    const v = obj[key] ?? fallback;
    if (v === undefined) return fail(key, 'is missing');
    if (typeof v !== 'number' || !Number.isFinite(v)) return fail(key, `must be a number, got ${show(v)}`);
    return v;
  };
  const positive = (key: string, fallback?: number): number => {
    const v = number(key, fallback);
    return v > 0 ? v : fail(key, `must be positive, got ${v}`);
  };
  const count = (key: string, fallback?: number): number => {
    const v = number(key, fallback);
    return Number.isInteger(v) && v > 0 ? v : fail(key, `must be a positive integer, got ${v}`);
  };
  return { fail, number, positive, count };
}

/** The decoder's fields: a multimodal wrapper's text_config (Gemma 3, Qwen2-VL) over its own. */
function decoderFields(json: Json, file: string): Json {
  const text = json.text_config;
  if (text == null) return json;
  if (!isObject(text)) throw new Error(`${file}: text_config must be an object`);
  return { ...json, ...text };
}

/** head_dim, or hidden_size // num_attention_heads as transformers derives it. */
function headSize(c: Json, file: string): { hidden: number; heads: number; headDim: number } {
  const f = fields(c, file);
  const hidden = f.count('hidden_size');
  const heads = f.count('num_attention_heads');
  const headDim = f.count('head_dim', Math.floor(hidden / heads));
  if (headDim % 2 !== 0) f.fail('head_dim', `must be even for RoPE, got ${headDim}`);
  return { hidden, heads, headDim };
}

/** The head size and RoPE of a config.json object (RoPE fields and head sizes only need be present). */
export function normalizeRope(json: Json, file = 'config.json'): RopeConfig {
  const c = decoderFields(json, file);
  return { headDim: headSize(c, file).headDim, ...rope(c, file) };
}

/** RoPE from v5's rope_parameters or v4's rope_scaling (which v5 still reads); given both, they must agree. */
function rope(c: Json, file: string): Rope {
  const v4 = c.rope_scaling ?? undefined;
  const v5 = c.rope_parameters ?? undefined;
  const fromV5 = v5 === undefined ? undefined : ropeParameters(c, v5, file);
  const fromV4 = v4 === undefined ? undefined : ropeDict(c, 'rope_scaling', v4, file);
  if (fromV4 && fromV5 && show(fromV4) !== show(fromV5)) throw new Error(`${file}: rope_scaling and rope_parameters disagree`);
  return fromV5 ?? fromV4 ?? ropeDict(c, 'rope_scaling', {}, file);
}

/** v5's rope_parameters: one dict, or one per layer type ({full_attention: {...}, sliding_attention: {...}}). */
function ropeParameters(c: Json, v5: unknown, file: string): Rope {
  const perLayer = isObject(v5) && Object.keys(v5).length > 0 && Object.values(v5).every(isObject);
  if (!perLayer) return ropeDict(c, 'rope_parameters', v5, file);
  const ropes = Object.entries(v5).map(([layerType, d]) => ropeDict(c, `rope_parameters.${layerType}`, d, file));
  if (ropes.some((r) => show(r) !== show(ropes[0]))) {
    throw new Error(`${file}: rope_parameters differ by layer type (${Object.keys(v5).join(', ')}); one RoPE for every layer is supported`);
  }
  return ropes[0]!;
}

/** One rope dict (`name` is where it sits), with rope_theta and partial_rotary_factor from it or the top level. */
function ropeDict(c: Json, name: string, d: unknown, file: string): Rope {
  if (!isObject(d)) throw new Error(`${file}: ${name} must be an object, got ${show(d)}`);
  const f = fields(d, file, `${name}.`);
  const type = d.rope_type ?? d.type ?? 'default';
  if (d.rope_type != null && d.type != null && d.rope_type !== d.type) {
    f.fail('rope_type', `${show(d.rope_type)} and ${name}.type ${show(d.type)} disagree`);
  }
  if (typeof type !== 'string') return f.fail('rope_type', `must be a string, got ${show(type)}`);
  for (const [obj, at] of [[c, ''], [d, `${name}.`]] as const) {
    const p = obj.partial_rotary_factor;
    if (p != null && p !== 1) throw new Error(`${file}: ${at}partial_rotary_factor ${show(p)}: RoPE over part of each head is not supported`);
  }
  const outer = c.rope_theta == null ? undefined : fields(c, file).positive('rope_theta');
  const inner = d.rope_theta == null ? undefined : f.positive('rope_theta');
  if (outer !== undefined && inner !== undefined && outer !== inner) f.fail('rope_theta', `${inner} and rope_theta ${outer} disagree`);
  const ropeTheta = inner ?? outer ?? DEFAULT_ROPE_THETA;
  switch (type) {
    case 'default':
      return { ropeTheta };
    case 'linear':
      return { ropeTheta, ropeScaling: { type, factor: f.positive('factor') } };
    case 'llama3': {
      const lowFreqFactor = f.number('low_freq_factor');
      const highFreqFactor = f.number('high_freq_factor');
      if (highFreqFactor <= lowFreqFactor) f.fail('high_freq_factor', `${highFreqFactor} must exceed low_freq_factor ${lowFreqFactor}`);
      const originalMaxPositions = llama3Context(c, d, name, file);
      return { ropeTheta, ropeScaling: { type, factor: f.positive('factor'), lowFreqFactor, highFreqFactor, originalMaxPositions } };
    }
    default:
      return f.fail('rope_type', `"${type}" is not supported (supported: default, linear, llama3)`);
  }
}

/**
 * llama3's original_max_position_embeddings: from the rope dict, else from the top level,
 * else max_position_embeddings (transformers v5's standardize_rope_params does the same).
 */
function llama3Context(c: Json, d: Json, name: string, file: string): number {
  const key = 'original_max_position_embeddings';
  const inner = d[key] == null ? undefined : fields(d, file, `${name}.`).count(key);
  const outer = c[key] == null ? undefined : fields(c, file).count(key);
  if (inner !== undefined && outer !== undefined && inner !== outer) throw new Error(`${file}: ${name}.${key} ${inner} and ${key} ${outer} disagree`);
  return inner ?? outer ?? fields(c, file).count('max_position_embeddings');
}

/** MLX affine quantization (`quantization`, or the `quantization_config` copy mlx-lm also writes). */
function quantization(json: Json, file: string): Quantization | undefined {
  const name = json.quantization != null ? 'quantization' : 'quantization_config';
  const q = json[name];
  if (q == null) return undefined;
  if (!isObject(q)) throw new Error(`${file}: ${name} must be an object, got ${show(q)}`);
  const f = fields(q, file, `${name}.`);
  if (name === 'quantization_config' && q.quant_method != null) f.fail('quant_method', `${show(q.quant_method)} is not supported (MLX affine quantization only)`);
  if (q.mode != null && q.mode !== 'affine') f.fail('mode', `${show(q.mode)} is not supported (affine only)`);
  const perLayer = Object.keys(q).filter((k) => isObject(q[k]) || typeof q[k] === 'boolean');
  if (perLayer.length) throw new Error(`${file}: ${name} sets ${perLayer.join(', ')} separately; one bits/group_size for every layer is supported`);
  const bits = f.number('bits');
  if (bits !== 4 && bits !== 8) throw new Error(`${file}: ${name}.bits ${bits}: only 4- and 8-bit weights are supported`);
  return { bits, groupSize: f.count('group_size', DEFAULT_GROUP_SIZE) };
}

/** Settings of the supported families that change the output and that the engine does not implement. */
function refuseUnsupported(c: Json, file: string): void {
  const f = fields(c, file);
  if (c.hidden_act != null && c.hidden_act !== 'silu') f.fail('hidden_act', `${show(c.hidden_act)} is not supported (silu only)`);
  if (c.use_sliding_window === true) f.fail('use_sliding_window', 'true is not supported (full attention only)');
}

/** An id or list of ids; `where` names the field in errors. */
function tokenIds(v: unknown, where: string): number[] {
  const list: unknown[] = v == null ? [] : Array.isArray(v) ? v : [v];
  for (const id of list) if (!Number.isInteger(id) || (id as number) < 0) throw new Error(`${where} must be token ids, got ${show(v)}`);
  return list as number[];
}

/**
 * The parsed config.json (and generation_config.json, for its eos ids) as a ModelConfig;
 * `file` names the config in errors.
 */
export function normalizeConfig(json: Json, generationConfig: Json = {}, file = 'config.json'): ModelConfig {
  const c = decoderFields(json, file);
  const f = fields(c, file);
  const { hidden, heads, headDim } = headSize(c, file);
  const kvHeads = f.count('num_key_value_heads', heads);
  if (heads % kvHeads !== 0) f.fail('num_key_value_heads', `${kvHeads} does not divide num_attention_heads ${heads}`);
  refuseUnsupported(c, file);
  const tie = c.tie_word_embeddings ?? false;
  if (typeof tie !== 'boolean') f.fail('tie_word_embeddings', `must be true or false, got ${show(tie)}`);
  const eos = [
    ...tokenIds(c.eos_token_id, `${file}: eos_token_id`),
    ...tokenIds(generationConfig.eos_token_id, `${file} (generation_config.json): eos_token_id`),
  ];
  return {
    modelType: String(c.model_type ?? ''),
    hidden,
    layers: f.count('num_hidden_layers'),
    heads,
    kvHeads,
    headDim,
    intermediate: f.count('intermediate_size'),
    vocab: f.count('vocab_size'),
    rmsEps: f.positive('rms_norm_eps', 1e-6),
    ...rope(c, file),
    maxPositions: f.count('max_position_embeddings', 4096),
    tieEmbeddings: tie === true,
    quantization: quantization(json, file),
    eosTokenIds: [...new Set(eos)],
    bosTokenId: typeof c.bos_token_id === 'number' ? c.bos_token_id : undefined,
  };
}

function readJson(path: string): Json | undefined {
  if (!existsSync(path)) return undefined;
  const v: unknown = JSON.parse(readFileSync(path, 'utf8'));
  if (!isObject(v)) throw new Error(`${path}: not a JSON object`);
  return v;
}

export function readModelConfig(dir: string): ModelConfig {
  const file = join(dir, 'config.json');
  const c = readJson(file);
  if (!c) throw new Error(`${dir}: no config.json`);
  return normalizeConfig(c, readJson(join(dir, 'generation_config.json')), file);
}
