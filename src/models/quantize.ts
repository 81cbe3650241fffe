// MLX affine quantization, following mlx.core.quantize's GPU kernels (Metal, and CUDA alike;
// on a Mac that is what `mlx_lm.convert -q` runs) and laid out the way mlx-lm saves it.
//
// Per group of `groupSize` consecutive elements along the last axis K, MLX stores a scale
// and a bias so that w ≈ scale * q + bias, q in [0, 2^bits - 1]. It does NOT simply use
// scale = (max - min) / n_bins, bias = min: it anchors the group at the endpoint with the
// larger magnitude ("edge") and adjusts the scale so that edge / scale is an integer q0,
// which makes 0.0 exactly representable. Consequences worth knowing:
//  * when |max| >= |min| the scale is NEGATIVE and q = 0 decodes to max;
//  * the GPU kernels start the max reduction at 0, so an all-negative group spans [min, 0];
//  * because the scale shrinks a little, the far endpoint can fall just outside the grid and
//    is clipped: its error can reach ~|scale| (not |scale|/2). Every other element is within
//    |scale|/2 (plus float rounding).
// MLX's CPU backend differs in two details: it takes the true max and rounds halves to even
// (the GPU kernels round halves away from zero). Float ops here are exact float32 (Math.fround
// after each step); Metal's division may differ in the last ulp, so a q exactly at a rounding
// tie can come out one step apart from a Mac's.
// Packing: a row is one little-endian bit stream, element k at bits [k * bits, (k + 1) * bits)
// of it, the stream cut into u32 words low bits first. For 2, 4 and 8 bits every element
// sits inside one word; 3-, 5- and 6-bit elements can straddle two (a 32-element run fills
// exactly `bits` words, so K % 32 == 0 keeps rows word-aligned).
import { copyFileSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { f32ToBf16, f32ToF16 } from './half.js';
import {
  listCheckpointTensors, readSafetensorsBytes, readTensorF32, writeSafetensors,
  type SafetensorsWriteTensor,
} from './safetensors.js';

/** The bit widths mlx.core.quantize (affine) packs, and mlx-lm writes. */
export const QUANT_BITS = [2, 3, 4, 5, 6, 8] as const;
export type QuantBits = (typeof QUANT_BITS)[number];
export const QUANT_GROUP_SIZES = [32, 64, 128] as const;

export function isQuantBits(bits: number): bits is QuantBits {
  return (QUANT_BITS as readonly number[]).includes(bits);
}

export interface AffineQuantized {
  /** [N, K * bits / 32] */
  packed: Uint32Array;
  /** [N, K / groupSize] */
  scales: Float32Array;
  /** [N, K / groupSize] */
  biases: Float32Array;
}

const fr = Math.fround;

/** Round half away from zero, like Metal's and CUDA's round(). */
function round(x: number): number {
  return x < 0 ? -Math.round(-x) : Math.round(x);
}

function checkShape(N: number, K: number, bits: number, groupSize: number): void {
  if (!isQuantBits(bits)) throw new Error(`quantize: bits must be one of ${QUANT_BITS.join(', ')}, not ${bits}`);
  if (!(QUANT_GROUP_SIZES as readonly number[]).includes(groupSize)) throw new Error(`quantize: group size must be 32, 64 or 128, not ${groupSize}`);
  if (K % groupSize !== 0) throw new Error(`quantize: last dimension ${K} is not a multiple of the group size ${groupSize}`);
  if (!Number.isInteger(N) || N <= 0) throw new Error(`quantize: bad row count ${N}`);
}

/** Quantizes a row-major [N, K] float32 matrix, in float32 and in MLX's order of operations. */
export function quantizeAffine(weights: Float32Array, N: number, K: number, bits: QuantBits, groupSize: number): AffineQuantized {
  checkShape(N, K, bits, groupSize);
  if (weights.length !== N * K) throw new Error(`quantize: ${weights.length} values for [${N}, ${K}]`);
  const nBins = (1 << bits) - 1;
  const eps = fr(1e-7);
  const nGroups = (N * K) / groupSize;
  const packed = new Uint32Array((N * K * bits) / 32);
  const scales = new Float32Array(nGroups);
  const biases = new Float32Array(nGroups);
  for (let g = 0; g < nGroups; g++) {
    const base = g * groupSize;
    let wMin = Infinity;
    let wMax = 0; // sic: the GPU kernels' max reduction starts at 0
    for (let j = 0; j < groupSize; j++) {
      const v = weights[base + j]!;
      if (v > wMax) wMax = v;
      if (v < wMin) wMin = v;
    }
    const minDominates = Math.abs(wMin) > Math.abs(wMax);
    let scale = Math.max(fr(fr(wMax - wMin) / nBins), eps);
    if (!minDominates) scale = -scale;
    const edge = minDominates ? wMin : wMax;
    const q0 = round(fr(edge / scale));
    let bias = 0;
    if (q0 !== 0) {
      scale = fr(edge / q0);
      bias = edge;
    }
    for (let j = 0; j < groupSize; j++) {
      putBits(packed, base + j, bits, Math.min(Math.max(round(fr(fr(weights[base + j]! - bias) / scale)), 0), nBins));
    }
    scales[g] = scale;
    biases[g] = bias;
  }
  return { packed, scales, biases };
}

/** Stores q (< 2^bits, into zeroed bits) as element k of a packed bit stream. */
function putBits(packed: Uint32Array, k: number, bits: number, q: number): void {
  const at = k * bits;
  const word = at >>> 5;
  const shift = at & 31;
  packed[word]! |= q << shift;
  if (shift + bits > 32) packed[word + 1]! |= q >>> (32 - shift);
}

/** Element k of a packed bit stream. */
function getBits(packed: Uint32Array, k: number, bits: number): number {
  const at = k * bits;
  const word = at >>> 5;
  const shift = at & 31;
  let v = packed[word]! >>> shift;
  if (shift + bits > 32) v |= packed[word + 1]! << (32 - shift);
  return v & ((1 << bits) - 1);
}

/**
 * Re-packs `count` elements of `from`-bit packed words as `to`-bit ones (to >= from), into
 * dst (zeroed here): the same q values in wider fields, so they dequantize identically.
 */
export function widenPacked(src: Uint32Array, from: QuantBits, dst: Uint32Array, to: QuantBits, count: number): void {
  if (to < from) throw new Error(`widenPacked: ${from}-bit values do not fit ${to} bits`);
  dst.fill(0, 0, (count * to) / 32);
  for (let k = 0; k < count; k++) putBits(dst, k, to, getBits(src, k, from));
}

/** CPU reference: w[n, k] = scales[n, g] * q[n, k] + biases[n, g], g = k / groupSize. */
export function dequantizeAffine(
  packed: Uint32Array, scales: ArrayLike<number>, biases: ArrayLike<number>,
  N: number, K: number, bits: QuantBits, groupSize: number,
): Float32Array {
  checkShape(N, K, bits, groupSize);
  const out = new Float32Array(N * K);
  for (let k = 0; k < N * K; k++) {
    const q = getBits(packed, k, bits);
    const g = (k / groupSize) | 0;
    out[k] = scales[g]! * q + biases[g]!;
  }
  return out;
}

/** One module's quantization: the whole checkpoint's, or a per-module override's. */
export interface ModuleQuant {
  bits: QuantBits;
  groupSize: number;
}

/**
 * mlx-lm's mixed-precision recipes (mlx_lm.convert --quant-predicate): `low` bits for most
 * layers, `high` for lm_head and for v_proj and down_proj in the first and last eighth of
 * the layers and every third layer between.
 */
export const MIXED_RECIPES = {
  mixed_2_6: { low: 2, high: 6 },
  mixed_3_4: { low: 3, high: 4 },
  mixed_3_6: { low: 3, high: 6 },
  mixed_4_6: { low: 4, high: 6 },
} as const satisfies Record<string, { low: QuantBits; high: QuantBits }>;
export type MixedRecipe = keyof typeof MIXED_RECIPES;

/** What `recipe` gives module `prefix` of a model with `layers` decoder layers. */
function recipeBits(recipe: MixedRecipe, prefix: string, layers: number): QuantBits {
  const { low, high } = MIXED_RECIPES[recipe];
  const parts = prefix.split('.');
  const index = parts.length > 2 ? Number(parts[2]) || 0 : 0;
  const more = index < Math.floor(layers / 8) || index >= Math.floor((7 * layers) / 8) || (index - Math.floor(layers / 8)) % 3 === 2;
  if ((prefix.includes('v_proj') || prefix.includes('down_proj')) && more) return high;
  return prefix.includes('lm_head') ? high : low;
}

export interface QuantizeOptions extends ModuleQuant {
  /** A mixed recipe: each module's bits from it (group size `groupSize`), `bits` unused. */
  recipe?: MixedRecipe;
  /** Per module (the weight's prefix, e.g. "lm_head"): its own bits and group size, or false to keep it in float. Wins over `recipe`. */
  modules?: Record<string, ModuleQuant | false>;
}

/**
 * Which tensors mlx-lm quantizes: the weights of every nn.Linear and nn.Embedding whose last
 * dimension is divisible by the group size. In Llama/Qwen checkpoints those are exactly the
 * 2-D `.weight` tensors; norms are 1-D and projection biases stay in float.
 */
export function isQuantizable(name: string, shape: number[], groupSize: number): boolean {
  return name.endsWith('.weight') && shape.length === 2 && !name.includes('norm') && shape[1]! % groupSize === 0;
}

// Files besides the weights and config.json that belong in the output (tokenizer, templates,
// generation config). Other files (original/, *.gguf, pytorch bins) are not copied.
const COPIED_EXTENSIONS = ['.json', '.jinja', '.txt', '.model', '.tiktoken'];

/**
 * Reads an HF checkpoint (config.json + model.safetensors or an index of shards; F32/F16/BF16)
 * and writes an mlx-lm style quantized checkpoint to `outDir`:
 *  * quantized `<layer>.weight` as U32 [N, K*bits/32] plus `<layer>.scales` / `<layer>.biases`
 *    [N, K/groupSize] in the weight's own float dtype (what mlx-lm does: it converts the model
 *    to config.torch_dtype first and MLX keeps scales in the input dtype);
 *  * every other tensor copied unchanged; `lm_head.weight` dropped when embeddings are tied
 *    and `rotary_emb.inv_freq` dropped, as mlx-lm's sanitize() does;
 *  * config.json gains `quantization` and `quantization_config` = {group_size, bits, mode},
 *    plus, as mlx-lm writes them, an entry per module quantized otherwise (its path:
 *    {group_size, bits}) or kept in float (its path: false);
 *  * one `model.safetensors` (metadata {"format": "mlx"}) and a `model.safetensors.index.json`,
 *    which mlx-lm writes even for a single shard.
 * Holds the whole output in memory: fine for test models and small real ones.
 */
export function quantizeCheckpoint(inDir: string, outDir: string, opts: QuantizeOptions): { quantized: string[]; kept: string[] } {
  const bits = opts.recipe ? MIXED_RECIPES[opts.recipe].low : opts.bits;
  const { groupSize } = opts;
  checkShape(1, groupSize, bits, groupSize);
  for (const m of Object.values(opts.modules ?? {})) if (m) checkShape(1, m.groupSize, m.bits, m.groupSize);
  const config = JSON.parse(readFileSync(join(inDir, 'config.json'), 'utf8')) as Record<string, unknown>;
  if (config.quantization) throw new Error(`${inDir}: checkpoint is already quantized`);
  const tied = Boolean(config.tie_word_embeddings);
  const tensors = listCheckpointTensors(inDir);
  const layers = [...tensors.keys()].filter((n) => n.includes('down_proj') && n.endsWith('.weight')).length;
  // Each module's own quantization (false: kept in float), and the config entries of those
  // that differ from the checkpoint-wide one (mlx-lm's loader reads them by module path).
  const moduleQuant = (prefix: string): ModuleQuant | false => {
    const m = opts.modules?.[prefix];
    if (m !== undefined) return m;
    return { bits: opts.recipe ? recipeBits(opts.recipe, prefix, layers) : bits, groupSize };
  };
  const entries: Record<string, { group_size: number; bits: number } | false> = {};

  const out: SafetensorsWriteTensor[] = [];
  const quantized: string[] = [];
  const kept: string[] = [];
  for (const name of [...tensors.keys()].sort()) {
    const t = tensors.get(name)!;
    if (name.includes('rotary_emb.inv_freq') || (tied && name === 'lm_head.weight')) continue;
    const { dtype, shape } = t.info;
    const isFloat = dtype === 'F32' || dtype === 'F16' || dtype === 'BF16';
    const prefix = name.slice(0, -'.weight'.length);
    const m = name.endsWith('.weight') ? moduleQuant(prefix) : false;
    if (m === false && opts.modules?.[prefix] === false) entries[prefix] = false;
    if (isFloat && m && isQuantizable(name, shape, m.groupSize)) {
      const [N, K] = shape as [number, number];
      const q = quantizeAffine(readTensorF32(t), N, K, m.bits, m.groupSize);
      const asDtype = (a: Float32Array) => (dtype === 'F16' ? f32ToF16(a) : dtype === 'BF16' ? f32ToBf16(a) : a);
      out.push({ name, dtype: 'U32', shape: [N, (K * m.bits) / 32], data: q.packed });
      out.push({ name: `${prefix}.scales`, dtype, shape: [N, K / m.groupSize], data: asDtype(q.scales) });
      out.push({ name: `${prefix}.biases`, dtype, shape: [N, K / m.groupSize], data: asDtype(q.biases) });
      if (m.bits !== bits || m.groupSize !== groupSize) entries[prefix] = { group_size: m.groupSize, bits: m.bits };
      quantized.push(name);
    } else {
      if (dtype !== 'F32' && dtype !== 'F16' && dtype !== 'BF16' && dtype !== 'U32') throw new Error(`${name}: cannot copy dtype ${dtype}`);
      out.push({ name, dtype, shape, data: readSafetensorsBytes(t.path, t.header, name) });
      kept.push(name);
    }
  }
  out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));

  mkdirSync(outDir, { recursive: true });
  writeSafetensors(join(outDir, 'model.safetensors'), out, { format: 'mlx' });
  const index = {
    metadata: { total_size: out.reduce((s, t) => s + t.data.byteLength, 0) },
    weight_map: Object.fromEntries(out.map((t) => [t.name, 'model.safetensors'])),
  };
  writeFileSync(join(outDir, 'model.safetensors.index.json'), JSON.stringify(index, null, 4));

  const quantization = { group_size: groupSize, bits, mode: 'affine', ...entries };
  const newConfig: Record<string, unknown> = { ...config, quantization, quantization_config: quantization };
  const sorted = Object.fromEntries(Object.keys(newConfig).sort().map((k) => [k, newConfig[k]]));
  writeFileSync(join(outDir, 'config.json'), JSON.stringify(sorted, null, 4));

  for (const file of readdirSync(inDir)) {
    if (file === 'config.json' || file === 'model.safetensors.index.json') continue;
    if (!COPIED_EXTENSIONS.some((ext) => file.endsWith(ext))) continue;
    if (statSync(join(inDir, file)).isFile()) copyFileSync(join(inDir, file), join(outDir, file));
  }
  return { quantized, kept };
}
