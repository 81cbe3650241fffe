// config.json + generation_config.json of a Hugging Face checkpoint, normalised to the
// fields every decoder family shares. Reads both transformers spellings of RoPE (v4:
// rope_theta + rope_scaling; v5: rope_parameters, one dict or one per layer type) and a
// multimodal wrapper's decoder fields from its text_config. Each family reads the fields
// only it uses itself (its `configure`, through a ConfigReader) and refuses values it
// cannot honour; normalizeConfig runs that check too. A rope type or field value the
// engine cannot honour is refused here, with the file and field in the message; the only
// defaults are transformers' own.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { refuseAudioCheckpoint } from './model-kinds.js';
import { isQuantBits, QUANT_BITS, QUANT_GROUP_SIZES, type QuantBits } from './quantize.js';

/** The RoPE frequency scalings the engine implements (rope.ts); unscaled RoPE has none. */
export type RopeScaling =
  | { type: 'linear'; factor: number }
  | { type: 'llama3'; factor: number; lowFreqFactor: number; highFreqFactor: number; originalMaxPositions: number }
  /** Phi-3's: per-frequency divisors, short up to originalMaxPositions of context, long past it; rotated values times attentionFactor. */
  | { type: 'longrope'; shortFactor: number[]; longFactor: number[]; originalMaxPositions: number; attentionFactor: number }
  /**
   * YaRN (GPT-OSS): frequencies above the correction range kept, below it divided by
   * factor, a linear ramp between (rope.ts); rotated values times attentionFactor.
   */
  | { type: 'yarn'; factor: number; originalMaxPositions: number; betaFast: number; betaSlow: number; truncate: boolean; attentionFactor: number };

/** MLX quantization of one module: affine (QUANT_BITS x QUANT_GROUP_SIZES), or mxfp4 (4 bits, groups of 32). */
export interface ModuleQuantization {
  bits: QuantBits;
  groupSize: number;
  mode?: 'mxfp4';
}

/** The checkpoint-wide quantization, and per-module overrides by module path (false: not quantized). */
export interface Quantization extends ModuleQuantization {
  modules: Record<string, ModuleQuantization | false>;
}

/**
 * The quantization of module `prefix` (its weight `<prefix>.weight`), as mlx-lm's loader
 * decides it: the module's own entry if the config has one, else the checkpoint-wide one
 * when the checkpoint has `<prefix>.scales`, else none (a float weight).
 */
export function moduleQuantization(q: Quantization | undefined, prefix: string, hasScales: boolean): ModuleQuantization | undefined {
  const own = q?.modules[prefix];
  if (own !== undefined) return own === false ? undefined : own;
  return q && hasScales ? q : undefined;
}

/**
 * What a layer keeps in the KV cache: every position ('full'), the last `window` positions
 * it attends to (a sliding-window layer), or nothing ('none': a recurrent layer, an
 * MLP-only one).
 */
export type LayerKv = 'full' | 'none' | { window: number };

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
  /** Dims of each head that rotate: head_dim * partial_rotary_factor. */
  rotaryDim: number;
  /** v5's rope_parameters given per layer type (full_attention, sliding_attention): each type's RoPE. */
  layerRopes?: Record<string, Rope>;
  maxPositions: number;
  tieEmbeddings: boolean;
  quantization?: Quantization;
  /** Ids that end generation: config eos plus generation_config eos (which may be a list). */
  eosTokenIds: number[];
  bosTokenId?: number;
  /** Set by a hybrid family's configure where layers carry recurrent state (LoadedModel.states). */
  recurrent?: true;
  /** Per layer, what it keeps in the KV cache: set by the family's configure (every layer 'full' until then). */
  layerKv: LayerKv[];
}

export type RopeConfig = Pick<ModelConfig, 'rotaryDim' | 'ropeTheta' | 'ropeScaling'>;

export type Rope = Pick<ModelConfig, 'ropeTheta' | 'ropeScaling'>;
export type Json = Record<string, unknown>;

/** transformers' default rope_theta (RotaryEmbeddingConfigMixin.default_theta, LlamaConfig, Qwen2Config, Qwen3Config). */
const DEFAULT_ROPE_THETA = 10000;
/** mlx-lm's default quantization group size. */
const DEFAULT_GROUP_SIZE = 64;

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
const show = (v: unknown): string => JSON.stringify(v) ?? String(v);

/** Typed reads of `obj`'s fields (null counts as absent); errors name `file` and `prefix` + the key. */
/** Typed reads of a config object's fields (`prefix` names a nested object's in errors). */
export function configFields(obj: Json, file: string, prefix = '') {
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
  /** A value of `allowed` (`fallback` when absent). */
  const oneOf = <T>(key: string, allowed: readonly T[], fallback: T): T => {
    const v = (obj[key] ?? fallback) as T;
    return allowed.includes(v) ? v : fail(key, `${show(v)} is not supported (supported: ${allowed.map(show).join(', ')})`);
  };
  const bool = (key: string, fallback: boolean): boolean => {
    const v = obj[key] ?? fallback;
    return typeof v === 'boolean' ? v : fail(key, `must be true or false, got ${show(v)}`);
  };
  /** A number or absent (undefined). */
  const optional = (key: string): number | undefined => (obj[key] == null ? undefined : number(key));
  return { file, fail, number, positive, count, oneOf, bool, optional, raw: obj };
}

/** A family's typed reads of the decoder's config fields (ModelConfig's and its own). */
export type ConfigReader = ReturnType<typeof configFields>;

/** The decoder's fields of config.json `json` as a family reads them. */
export function configReader(json: Json, file = 'config.json'): ConfigReader {
  return configFields(decoderFields(json, file), file);
}

/**
 * transformers' config-class defaults for fields a checkpoint's config.json leaves out,
 * where they are not the shared ones below: Gemma 3's 4B+ checkpoints give their
 * text_config only the fields that differ from Gemma3TextConfig's.
 */
const CONFIG_CLASS_DEFAULTS: Record<string, Json> = {
  gemma3_text: {
    vocab_size: 262208, hidden_size: 2304, intermediate_size: 9216, num_hidden_layers: 26, num_attention_heads: 8, num_key_value_heads: 4,
    head_dim: 256, hidden_activation: 'gelu_pytorch_tanh', max_position_embeddings: 131072, rms_norm_eps: 1e-6, rope_theta: 1_000_000,
    query_pre_attn_scalar: 256, sliding_window: 4096, rope_local_base_freq: 10_000, sliding_window_pattern: 6,
  },
};

/**
 * The decoder's fields: a multimodal wrapper's text_config (Gemma 3, Qwen2-VL) over its
 * own, over its config class's defaults (CONFIG_CLASS_DEFAULTS).
 */
function decoderFields(json: Json, file: string): Json {
  const text = json.text_config;
  if (text != null && !isObject(text)) throw new Error(`${file}: text_config must be an object`);
  const merged = text == null ? json : { ...json, ...text };
  const defaults = CONFIG_CLASS_DEFAULTS[String(merged.model_type)];
  return defaults ? { ...defaults, ...merged } : merged;
}

/** head_dim, or hidden_size // num_attention_heads as transformers derives it. */
function headSize(c: Json, file: string): { hidden: number; heads: number; headDim: number } {
  const f = configFields(c, file);
  const hidden = f.count('hidden_size');
  const heads = f.count('num_attention_heads');
  const headDim = f.count('head_dim', Math.floor(hidden / heads));
  if (headDim % 2 !== 0) f.fail('head_dim', `must be even for RoPE, got ${headDim}`);
  return { hidden, heads, headDim };
}

/** The rotary dims and RoPE of a config.json object (RoPE fields and head sizes only need be present). */
export function normalizeRope(json: Json, file = 'config.json'): RopeConfig {
  const c = decoderFields(json, file);
  const { headDim } = headSize(c, file);
  const r = rope(c, file);
  return { rotaryDim: rotaryDim(c, headDim, file), ropeTheta: r.ropeTheta, ropeScaling: r.ropeScaling };
}

/** RoPE from v5's rope_parameters or v4's rope_scaling (which v5 still reads); given both, they must agree. */
function rope(c: Json, file: string): Rope & { layerRopes?: Record<string, Rope> } {
  const v4 = c.rope_scaling ?? undefined;
  const v5 = c.rope_parameters ?? undefined;
  const fromV5 = v5 === undefined ? undefined : ropeParameters(c, v5, file);
  const fromV4 = v4 === undefined ? undefined : ropeDict(c, 'rope_scaling', v4, file);
  if (fromV4 && fromV5 && show(fromV4) !== show({ ropeTheta: fromV5.ropeTheta, ropeScaling: fromV5.ropeScaling })) {
    throw new Error(`${file}: rope_scaling and rope_parameters disagree`);
  }
  return fromV5 ?? fromV4 ?? ropeDict(c, 'rope_scaling', {}, file);
}

/**
 * v5's rope_parameters: one dict, or one per layer type ({full_attention: {...},
 * sliding_attention: {...}}); per type, the full-attention one (else the first) is the
 * model's RoPE, and every type's is in layerRopes for the families that tell layers apart.
 */
function ropeParameters(c: Json, v5: unknown, file: string): Rope & { layerRopes?: Record<string, Rope> } {
  const perLayer = isObject(v5) && Object.keys(v5).length > 0 && Object.values(v5).every(isObject);
  if (!perLayer) return ropeDict(c, 'rope_parameters', v5, file);
  const layerRopes = Object.fromEntries(Object.entries(v5).map(([layerType, d]) => [layerType, ropeDict(c, `rope_parameters.${layerType}`, d, file)]));
  return { ...(layerRopes.full_attention ?? Object.values(layerRopes)[0]!), layerRopes };
}

/** The RoPE of every layer, for a family whose layers all use one: refuses per-layer-type RoPEs that differ. */
export function oneRope(cfg: ModelConfig, file = 'config.json'): void {
  const ropes = Object.values(cfg.layerRopes ?? {});
  if (ropes.some((r) => show(r) !== show(ropes[0]))) {
    throw new Error(`${file}: rope_parameters differ by layer type (${Object.keys(cfg.layerRopes!).join(', ')}); one RoPE for every layer is supported`);
  }
}

/** head_dim * partial_rotary_factor (top level, or in rope_parameters), as transformers takes it. */
function rotaryDim(c: Json, headDim: number, file: string): number {
  const v5 = isObject(c.rope_parameters) ? c.rope_parameters : {};
  const inner = v5.partial_rotary_factor == null ? undefined : configFields(v5, file, 'rope_parameters.').positive('partial_rotary_factor');
  const outer = c.partial_rotary_factor == null ? undefined : configFields(c, file).positive('partial_rotary_factor');
  if (inner !== undefined && outer !== undefined && inner !== outer) throw new Error(`${file}: rope_parameters.partial_rotary_factor ${inner} and partial_rotary_factor ${outer} disagree`);
  const factor = inner ?? outer ?? 1;
  if (factor > 1) throw new Error(`${file}: partial_rotary_factor ${factor} must be at most 1`);
  const dim = Math.floor(headDim * factor);
  if (dim % 8 !== 0) throw new Error(`${file}: partial_rotary_factor ${factor} rotates ${dim} of head_dim ${headDim}; a multiple of 8 is supported`);
  return dim;
}

/** One rope dict (`name` is where it sits), with rope_theta and partial_rotary_factor from it or the top level. */
function ropeDict(c: Json, name: string, d: unknown, file: string): Rope {
  if (!isObject(d)) throw new Error(`${file}: ${name} must be an object, got ${show(d)}`);
  const f = configFields(d, file, `${name}.`);
  const type = d.rope_type ?? d.type ?? 'default';
  if (d.rope_type != null && d.type != null && d.rope_type !== d.type) {
    f.fail('rope_type', `${show(d.rope_type)} and ${name}.type ${show(d.type)} disagree`);
  }
  if (typeof type !== 'string') return f.fail('rope_type', `must be a string, got ${show(type)}`);
  const outer = c.rope_theta == null ? undefined : configFields(c, file).positive('rope_theta');
  const inner = d.rope_theta == null ? undefined : f.positive('rope_theta');
  if (outer !== undefined && inner !== undefined && outer !== inner) f.fail('rope_theta', `${inner} and rope_theta ${outer} disagree`);
  const ropeTheta = inner ?? outer ?? DEFAULT_ROPE_THETA;
  switch (type) {
    case 'default':
    // Qwen2-VL's multimodal RoPE: default frequencies; the family reads mrope_section.
    case 'mrope':
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
    case 'longrope':
    case 'su':
      return { ropeTheta, ropeScaling: longrope(c, d, name, file) };
    case 'yarn':
      return { ropeTheta, ropeScaling: yarn(c, d, name, file) };
    default:
      return f.fail('rope_type', `"${type}" is not supported (supported: default, linear, llama3, longrope, yarn)`);
  }
}

/**
 * YaRN as transformers' _compute_yarn_parameters reads it: factor, beta_fast (32), beta_slow
 * (1), truncate (true: the correction range rounded out to whole dims), and the attention
 * factor attention_factor, else get_mscale(factor, mscale) / get_mscale(factor,
 * mscale_all_dim) where both are given, else get_mscale(factor) = 0.1 ln(factor) + 1. Where
 * the dict gives original_max_position_embeddings, transformers versions differ on whether
 * max_position_embeddings / original replaces factor; a config on which they disagree is refused.
 */
function yarn(c: Json, d: Json, name: string, file: string): RopeScaling {
  const f = configFields(d, file, `${name}.`);
  const factor = f.positive('factor');
  const originalMaxPositions = llama3Context(c, d, name, file);
  if (d.original_max_position_embeddings != null) {
    const ratio = configFields(c, file).count('max_position_embeddings') / originalMaxPositions;
    if (ratio !== factor) f.fail('factor', `${factor} differs from max_position_embeddings / original_max_position_embeddings = ${ratio}`);
  }
  const mscale = (m: number) => (factor <= 1 ? 1 : 0.1 * m * Math.log(factor) + 1);
  const m = f.optional('mscale');
  const mAll = f.optional('mscale_all_dim');
  const attentionFactor = f.optional('attention_factor') ?? (m && mAll ? mscale(m) / mscale(mAll) : mscale(1));
  return {
    type: 'yarn', factor, originalMaxPositions, betaFast: f.positive('beta_fast', 32), betaSlow: f.positive('beta_slow', 1), truncate: f.bool('truncate', true), attentionFactor,
  };
}

/**
 * Phi-3's longrope (transformers' _compute_longrope_parameters): short_factor and
 * long_factor divide the frequencies; the attention factor is attention_factor, else
 * sqrt(1 + ln(s) / ln(original)) for s = max_position_embeddings / original (1 when s <= 1).
 */
function longrope(c: Json, d: Json, name: string, file: string): RopeScaling {
  const f = configFields(d, file, `${name}.`);
  const list = (key: string): number[] => {
    const v = d[key];
    if (!Array.isArray(v) || !v.every((x) => typeof x === 'number' && x > 0)) return f.fail(key, `must be a list of positive numbers, got ${show(v)}`);
    return v as number[];
  };
  const originalMaxPositions = llama3Context(c, d, name, file);
  const s = configFields(c, file).count('max_position_embeddings') / originalMaxPositions;
  const attentionFactor = f.optional('attention_factor') ?? (s <= 1 ? 1 : Math.sqrt(1 + Math.log(s) / Math.log(originalMaxPositions)));
  return { type: 'longrope', shortFactor: list('short_factor'), longFactor: list('long_factor'), originalMaxPositions, attentionFactor };
}

/**
 * llama3's and longrope's original_max_position_embeddings: from the rope dict, else from the top level,
 * else max_position_embeddings (transformers v5's standardize_rope_params does the same).
 */
function llama3Context(c: Json, d: Json, name: string, file: string): number {
  const key = 'original_max_position_embeddings';
  const inner = d[key] == null ? undefined : configFields(d, file, `${name}.`).count(key);
  const outer = c[key] == null ? undefined : configFields(c, file).count(key);
  if (inner !== undefined && outer !== undefined && inner !== outer) throw new Error(`${file}: ${name}.${key} ${inner} and ${key} ${outer} disagree`);
  return inner ?? outer ?? configFields(c, file).count('max_position_embeddings');
}

/** MLX quantization (`quantization`, or the `quantization_config` copy mlx-lm also writes). */
export function readQuantization(json: Json, file: string): Quantization | undefined {
  const name = json.quantization != null ? 'quantization' : 'quantization_config';
  const q = json[name];
  if (q == null) return undefined;
  if (!isObject(q)) throw new Error(`${file}: ${name} must be an object, got ${show(q)}`);
  const f = configFields(q, file, `${name}.`);
  // GPT-OSS's mxfp4: its quantized tensors name themselves (<prefix>_blocks, _scales: checkpoint.ts).
  if (name === 'quantization_config' && q.quant_method === 'mxfp4') return undefined;
  if (name === 'quantization_config' && q.quant_method != null) f.fail('quant_method', `${show(q.quant_method)} is not supported (MLX affine quantization, or mxfp4)`);
  const all = moduleFields(q, file, `${name}.`, DEFAULT_GROUP_SIZE);
  // Per-module entries (mixed-bit checkpoints): a module path with its own block, or false
  // for a module kept in float.
  const modules: Quantization['modules'] = {};
  for (const [key, v] of Object.entries(q)) {
    if (v === false) modules[key] = false;
    else if (isObject(v)) modules[key] = moduleFields(v, file, `${name}.${key}.`, all.groupSize);
  }
  return { ...all, modules };
}

/**
 * mode, bits and group_size of a quantization block or a module's entry in it, checked
 * against what the engine loads: affine, or mxfp4 (MLX's, as mlx-lm writes GPT-OSS's experts).
 */
function moduleFields(q: Json, file: string, prefix: string, defaultGroup: number): ModuleQuantization {
  const f = configFields(q, file, prefix);
  const mode = f.oneOf('mode', ['affine', 'mxfp4'], 'affine');
  if (mode === 'mxfp4') {
    if (q.bits !== 4 || (q.group_size ?? 32) !== 32) f.fail('mode', `mxfp4 takes bits 4 and group_size 32, got ${show(q.bits)} and ${show(q.group_size)}`);
    return { bits: 4, groupSize: 32, mode };
  }
  const bits = f.number('bits');
  if (!isQuantBits(bits)) f.fail('bits', `${bits} is not supported (MLX affine ${QUANT_BITS.join(', ')} bits)`);
  const groupSize = f.count('group_size', defaultGroup);
  if (!(QUANT_GROUP_SIZES as readonly number[]).includes(groupSize)) f.fail('group_size', `${groupSize} is not supported (${QUANT_GROUP_SIZES.join(', ')})`);
  return { bits: bits as QuantBits, groupSize };
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
  const f = configFields(c, file);
  const { hidden, heads, headDim } = headSize(c, file);
  const kvHeads = f.count('num_key_value_heads', heads);
  if (heads % kvHeads !== 0) f.fail('num_key_value_heads', `${kvHeads} does not divide num_attention_heads ${heads}`);
  const tie = c.tie_word_embeddings ?? false;
  if (typeof tie !== 'boolean') f.fail('tie_word_embeddings', `must be true or false, got ${show(tie)}`);
  const eos = [
    ...tokenIds(c.eos_token_id, `${file}: eos_token_id`),
    ...tokenIds(generationConfig.eos_token_id, `${file} (generation_config.json): eos_token_id`),
  ];
  const layers = f.count('num_hidden_layers');
  return {
    modelType: String(c.model_type ?? ''),
    hidden,
    layers,
    heads,
    kvHeads,
    headDim,
    intermediate: f.count('intermediate_size'),
    vocab: f.count('vocab_size'),
    rmsEps: f.positive('rms_norm_eps', 1e-6),
    ...rope(c, file),
    rotaryDim: rotaryDim(c, headDim, file),
    maxPositions: f.count('max_position_embeddings', 4096),
    tieEmbeddings: tie === true,
    quantization: readQuantization(json, file),
    eosTokenIds: [...new Set(eos)],
    bosTokenId: typeof c.bos_token_id === 'number' ? c.bos_token_id : undefined,
    layerKv: Array<LayerKv>(layers).fill('full'),
  };
}

function readJson(path: string): Json | undefined {
  if (!existsSync(path)) return undefined;
  const v: unknown = JSON.parse(readFileSync(path, 'utf8'));
  if (!isObject(v)) throw new Error(`${path}: not a JSON object`);
  return v;
}

/** A checkpoint folder's config.json and generation_config.json; `file` names the config in
 *  errors. A checkpoint of a kind this server cannot load yet is refused (./model-kinds.ts). */
export function readConfigFiles(dir: string): { json: Json; generation?: Json; file: string } {
  const file = join(dir, 'config.json');
  const json = readJson(file);
  refuseAudioCheckpoint(dir, json);
  if (!json) throw new Error(`${dir}: no config.json`);
  return { json, generation: readJson(join(dir, 'generation_config.json')), file };
}

export function readModelConfig(dir: string): ModelConfig {
  const { json, generation, file } = readConfigFiles(dir);
  return normalizeConfig(json, generation, file);
}
