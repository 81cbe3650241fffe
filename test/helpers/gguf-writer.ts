// Converts a Hugging Face checkpoint folder (a decoder family in GGUF_FAMILIES, or a BERT-style
// encoder) into a GGUF v3 file the way llama.cpp's convert_hf_to_gguf.py does (same metadata
// keys and value types, tensor names, tokenizer fields and Q/K row order), so llama.cpp can
// serve as an oracle for our engine. A decoder's tensors are those its family's builder asks
// for (family-tensors.ts), named for llama.cpp by the family's GGUF_FAMILIES entry; a
// multimodal checkpoint's vision tensors are left out, as the converter leaves them to mmproj.
// Tensors are written as f32, or with `outType: 'F16'` as f16 for 2-D weights (1-D stay f32,
// like the converter's default). Descriptive keys the converter also adds (general.type,
// size_label, quantization_version, ...) are left out: llama.cpp does not need them for float
// models, and without them stories260K converts byte-identical to the reference GGUF.
// The model's sizes and RoPE come from config.ts's normaliser; config.json is read here only
// for what that leaves out (head_dim's presence, the families' own fields, special token ids).
// A small reader is included for the tests.
//
// Layout: magic "GGUF", u32 version, u64 tensor count, u64 kv count, the KVs, the tensor
// infos (name, n_dims, dims in ggml order = fastest first, ggml type, offset), padding to the
// alignment, then the tensor data, each tensor starting on an alignment boundary.
import { closeSync, openSync, readFileSync, readSync, writeSync } from 'node:fs';
import { basename, join } from 'node:path';
import { normalizeRope, type ModelConfig } from '../../src/models/config.js';
import { f32ToF16 } from '../../src/models/half.js';
import { ropeFreqDivisors } from '../../src/models/rope.js';
import { checkpointNames, type CheckpointNames } from '../../src/models/model.js';
import { familyConfig } from '../../src/models/registry.js';
import { listCheckpointTensors, readSafetensorsBytes, readTensorF32, type CheckpointTensor } from '../../src/models/safetensors.js';
import { MXFP4_BLOCK } from '../../src/runtime/tensors.js';
import { familyTensors, type FamilyTensor } from './family-tensors.js';
import { decodeMxfp4, ggmlMxfp4, type Mxfp4 } from './mxfp4.js';

const ALIGNMENT = 32;

enum ValueType { UINT8 = 0, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 }
const GGML_F32 = 0;
const GGML_F16 = 1;
const GGML_MXFP4 = 39;

// llama.cpp token types.
const TOKEN_NORMAL = 1;
const TOKEN_UNKNOWN = 2;
const TOKEN_CONTROL = 3;
const TOKEN_USER_DEFINED = 4;
const TOKEN_UNUSED = 5;
const TOKEN_BYTE = 6;

type Scalar = { type: ValueType.UINT32 | ValueType.INT32 | ValueType.FLOAT32 | ValueType.BOOL | ValueType.STRING; value: number | boolean | string };
type KV = Scalar | { type: ValueType.ARRAY; elemType: ValueType.STRING | ValueType.INT32 | ValueType.FLOAT32; value: Array<string | number> };

const u32 = (value: number): KV => ({ type: ValueType.UINT32, value });
const f32 = (value: number): KV => ({ type: ValueType.FLOAT32, value });
const str = (value: string): KV => ({ type: ValueType.STRING, value });
const bool = (value: boolean): KV => ({ type: ValueType.BOOL, value });

/** Appends little-endian values to one growing buffer. */
class ByteWriter {
  private buf = Buffer.alloc(1 << 20);
  length = 0;
  private reserve(n: number): number {
    const at = this.length;
    if (at + n > this.buf.length) {
      const next = Buffer.alloc(Math.max(at + n, this.buf.length * 2));
      this.buf.copy(next, 0, 0, at);
      this.buf = next;
    }
    this.length += n;
    return at;
  }
  bytes(): Buffer {
    return this.buf.subarray(0, this.length);
  }
  push(b: Uint8Array): void {
    const at = this.reserve(b.length);
    this.buf.set(b, at);
  }
  u32(v: number): void {
    const at = this.reserve(4);
    this.buf.writeUInt32LE(v >>> 0, at);
  }
  i32(v: number): void {
    const at = this.reserve(4);
    this.buf.writeInt32LE(v, at);
  }
  u64(v: number): void {
    const at = this.reserve(8);
    this.buf.writeBigUInt64LE(BigInt(v), at);
  }
  f32(v: number): void {
    const at = this.reserve(4);
    this.buf.writeFloatLE(v, at);
  }
  str(s: string): void {
    const n = Buffer.byteLength(s, 'utf8');
    this.u64(n);
    const at = this.reserve(n);
    this.buf.write(s, at, 'utf8');
  }
  value(type: ValueType, v: string | number | boolean): void {
    switch (type) {
      case ValueType.UINT32: return this.u32(v as number);
      case ValueType.INT32: return this.i32(v as number);
      case ValueType.FLOAT32: return this.f32(v as number);
      case ValueType.BOOL: return this.push(Uint8Array.of(v ? 1 : 0));
      case ValueType.STRING: return this.str(v as string);
      default: throw new Error(`unsupported GGUF value type ${type}`);
    }
  }
}

export interface GgufWriteOptions {
  /** 'F32' (default): every tensor f32. 'F16': 2-D weights f16, 1-D tensors f32. */
  outType?: 'F32' | 'F16';
  /**
   * general.name; defaults to the folder name. llama.cpp reads more than a label from it: a
   * name containing "phi3" or "phi-3" gets Phi-3's token attributes, which look up </s>,
   * <unk>, <s> and <|endoftext|> and fail to load ("_Map_base::at") without them.
   */
  name?: string;
  /** tokenizer.ggml.pre for BPE tokenizers when it cannot be recognised from the regex. */
  pre?: string;
  /** `<arch>.pooling_type`, as the converter writes it for embedding models and rerankers. */
  pooling?: 'mean' | 'cls' | 'last' | 'rank';
  /**
   * GPT-OSS's MXFP4 experts: as GGML_MXFP4 (default, as the converter writes them), or as f32
   * of the same values (llama.cpp's CPU MXFP4 dot products round their inputs to Q8_0).
   */
  experts?: 'mxfp4' | 'f32';
}

/** llama.cpp's enum llama_pooling_type. */
const POOLING_TYPE = { mean: 1, cls: 2, last: 3, rank: 4 } as const;

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const readJson = (path: string): Json => JSON.parse(readFileSync(path, 'utf8')) as Json;

export function writeGgufFromHf(hfDir: string, outPath: string, opts: GgufWriteOptions = {}): void {
  const config = readJson(join(hfDir, 'config.json'));
  if (config.model_type === 'bert' || config.model_type === 'xlm-roberta') return writeEncoderGguf(hfDir, outPath, config, opts);
  const source = listCheckpointTensors(hfDir);
  const names = checkpointNames(familyConfig(config).family, source.keys());
  const { cfg, family, tensors } = familyTensors(config, (name) => source.has(names.of(name)));
  if (cfg.quantization) throw new Error(`${hfDir}: quantized (MLX) checkpoints cannot be converted`);
  const gguf = GGUF_FAMILIES[family.name];
  if (!gguf) throw new Error(`${hfDir}: family ${family.name} has no llama.cpp names (GGUF_FAMILIES)`);
  const { arch } = gguf;
  const outType = opts.outType ?? 'F32';

  const kv = new Map<string, KV>();
  kv.set('general.architecture', str(arch));
  kv.set('general.name', str(opts.name ?? basename(hfDir)));
  // A multimodal config's decoder fields are in its text_config.
  const fields = { ...config, ...(config.text_config ?? {}) } as Json;
  addModelParams(kv, gguf, cfg, fields);
  if (opts.pooling) kv.set(`${arch}.pooling_type`, u32(POOLING_TYPE[opts.pooling]));
  kv.set('general.file_type', u32(outType === 'F16' ? 1 : 0));
  addTokenizer(kv, hfDir, cfg.vocab, fields, opts.pre);

  writeFile(outPath, kv, planTensors(hfDir, source, names, tensors, gguf, cfg, outType, fields, opts.experts ?? 'mxfp4'));
}

function addModelParams(kv: Map<string, KV>, gguf: GgufFamily, cfg: ModelConfig, c: Json): void {
  const { arch } = gguf;
  kv.set(`${arch}.context_length`, u32(cfg.maxPositions));
  kv.set(`${arch}.embedding_length`, u32(cfg.hidden));
  kv.set(`${arch}.block_count`, u32(cfg.layers));
  kv.set(`${arch}.feed_forward_length`, u32(cfg.intermediate));
  kv.set(`${arch}.attention.head_count`, u32(cfg.heads));
  kv.set(`${arch}.attention.head_count_kv`, u32(cfg.kvHeads));
  kv.set(`${arch}.rope.freq_base`, f32(cfg.ropeTheta));
  kv.set(`${arch}.attention.layer_norm_rms_epsilon`, f32(cfg.rmsEps));
  if (gguf.ropeDimensions) kv.set(`${arch}.rope.dimension_count`, u32(gguf.ropeDimensions === 'head' ? cfg.headDim : cfg.rotaryDim));
  // Key/value lengths only where config.json names head_dim, as the converter does.
  if (c.head_dim != null) {
    kv.set(`${arch}.attention.key_length`, u32(cfg.headDim));
    kv.set(`${arch}.attention.value_length`, u32(cfg.headDim));
  }
  if (gguf.vocabSize) kv.set(`${arch}.vocab_size`, u32(cfg.vocab));
  gguf.params?.((key, v) => kv.set(`${arch}.${key}`, v), cfg, c);
  const s = cfg.ropeScaling;
  if (s?.type === 'longrope') {
    kv.set(`${arch}.rope.scaling.original_context_length`, u32(s.originalMaxPositions));
    kv.set(`${arch}.rope.scaling.attn_factor`, f32(s.attentionFactor));
  }
  if (s?.type === 'linear') {
    kv.set(`${arch}.rope.scaling.type`, str('linear'));
    kv.set(`${arch}.rope.scaling.factor`, f32(s.factor));
  }
  if (s?.type === 'yarn') {
    kv.set(`${arch}.rope.scaling.type`, str('yarn'));
    kv.set(`${arch}.rope.scaling.factor`, f32(s.factor));
    kv.set(`${arch}.rope.scaling.original_context_length`, u32(s.originalMaxPositions));
  } else if (s?.type === 'llama3' && arch !== 'llama') {
    throw new Error('llama3 rope scaling is only converted for Llama (as a rope_freqs tensor)');
  }
}

/**
 * Llama 3 RoPE: llama.cpp divides each frequency by a factor from the `rope_freqs.weight`
 * tensor, the divisors rope.ts applies. `c` needs only the head size and RoPE fields.
 */
export function llama3RopeFactors(c: Json): Float32Array {
  const rope = normalizeRope(c);
  if (rope.ropeScaling?.type !== 'llama3') throw new Error('not a llama3 rope scaling config');
  return Float32Array.from(ropeFreqDivisors(rope));
}

// ---------------------------------------------------------------------------------------------
// Tokenizer

interface AddedToken { id: number; content: string; special: boolean; normalized?: boolean }

function addTokenizer(kv: Map<string, KV>, dir: string, vocabSize: number, config: Json, pre?: string): void {
  const tj = readJson(join(dir, 'tokenizer.json'));
  const tc = readJson(join(dir, 'tokenizer_config.json'));
  const model = tj.model as { type: string; vocab: Record<string, number>; merges?: Array<string | [string, string]>; byte_fallback?: boolean };
  if (model.type !== 'BPE') throw new Error(`tokenizer model ${model.type} is not supported`);
  const added = (tj.added_tokens ?? []) as AddedToken[];
  const addedById = new Map(added.map((t) => [t.id, t]));
  const byId: Array<string | undefined> = new Array(vocabSize);
  for (const [text, id] of Object.entries(model.vocab)) byId[id] = text;
  for (const t of added) byId[t.id] = t.content;

  // SentencePiece-style BPE (byte fallback, ▁ for spaces) is llama.cpp's "llama" vocab;
  // byte-level BPE (GPT-2 style) is "gpt2".
  const isSpm = model.byte_fallback === true;
  const tokens: string[] = [];
  const types: number[] = [];
  const unk = tokenContent(tc.unk_token);
  for (let id = 0; id < vocabSize; id++) {
    const text = byId[id];
    const a = addedById.get(id);
    if (text === undefined) {
      tokens.push(`[PAD${id}]`);
      types.push(TOKEN_UNUSED);
    } else if (isSpm && text === unk) {
      tokens.push(text);
      types.push(TOKEN_UNKNOWN);
    } else if (a) {
      // Added tokens: control if special (or shaped like <|...|>, as the converter guesses),
      // otherwise user-defined with SentencePiece spaces pre-normalised.
      const control = a.special || (text.startsWith('<|') && text.endsWith('|>'));
      tokens.push(control ? text : text.replaceAll('\u2581', ' '));
      types.push(control ? TOKEN_CONTROL : TOKEN_USER_DEFINED);
    } else if (isSpm && /^<0x[0-9A-F]{2}>$/.test(text)) {
      tokens.push(text);
      types.push(TOKEN_BYTE);
    } else {
      tokens.push(text);
      types.push(TOKEN_NORMAL);
    }
  }

  if (isSpm) {
    kv.set('tokenizer.ggml.model', str('llama'));
    kv.set('tokenizer.ggml.pre', str('default'));
    kv.set('tokenizer.ggml.tokens', { type: ValueType.ARRAY, elemType: ValueType.STRING, value: tokens });
    // tokenizer.json carries no SentencePiece scores, but SentencePiece BPE numbers its pieces
    // in descending score order, so the ranks recover the merge priority: normal piece number
    // k gets score -k, everything else 0 (what llama2.c's tok512.bin holds for stories260K).
    let rank = 0;
    const scores = types.map((t) => (t === TOKEN_NORMAL ? -rank++ : 0));
    kv.set('tokenizer.ggml.scores', { type: ValueType.ARRAY, elemType: ValueType.FLOAT32, value: scores });
    kv.set('tokenizer.ggml.token_type', { type: ValueType.ARRAY, elemType: ValueType.INT32, value: types });
  } else {
    kv.set('tokenizer.ggml.model', str('gpt2'));
    kv.set('tokenizer.ggml.pre', str(pre ?? bpePre(tj)));
    kv.set('tokenizer.ggml.tokens', { type: ValueType.ARRAY, elemType: ValueType.STRING, value: tokens });
    kv.set('tokenizer.ggml.token_type', { type: ValueType.ARRAY, elemType: ValueType.INT32, value: types });
    // Merges as "left right"; the newer pair form has any literal space shifted to U+0120.
    const merges = (model.merges ?? []).map((m) =>
      typeof m === 'string' ? m : m.map((part) => part.replaceAll(' ', '\u0120')).join(' '));
    kv.set('tokenizer.ggml.merges', { type: ValueType.ARRAY, elemType: ValueType.STRING, value: merges });
  }

  // Special ids: tokenizer_config.json's <x>_token looked up among the added tokens first,
  // then config.json's <x>_token_id (integers only: lists such as Llama 3.1's eos are skipped).
  const special = new Map<string, number>();
  const keys: Record<string, string> = {
    bos: 'bos_token_id', eos: 'eos_token_id', unk: 'unknown_token_id', sep: 'seperator_token_id', pad: 'padding_token_id', mask: 'mask_token_id',
  };
  for (const typ of Object.keys(keys)) {
    const content = tokenContent(tc[`${typ}_token`]);
    const t = content === undefined ? undefined : added.find((a) => a.content === content);
    if (t) special.set(typ, t.id);
  }
  for (const typ of Object.keys(keys)) {
    const id = config[`${typ}_token_id`];
    if (Number.isInteger(id) && !special.has(typ) && id < vocabSize) special.set(typ, id as number);
  }
  for (const [typ, id] of special) kv.set(`tokenizer.ggml.${keys[typ]}`, u32(id));

  // add_bos/add_eos: guessed from a TemplateProcessing post-processor, overridden by
  // tokenizer_config.json's explicit flags.
  const addFlags = new Map<string, boolean>();
  const processors = tj.post_processor ? (tj.post_processor.processors ?? [tj.post_processor]) : [];
  for (const p of processors as Json[]) {
    if (p.type !== 'TemplateProcessing') continue;
    const single = p.single as Json[];
    const first = single[0]?.SpecialToken?.id as string | undefined;
    const last = single.length > 1 ? (single[single.length - 1]?.SpecialToken?.id as string | undefined) : undefined;
    if (single.length > 1 && first) addFlags.set('bos', first === tokenContent(tc.bos_token));
    if (last) addFlags.set('eos', last === tokenContent(tc.eos_token));
  }
  for (const typ of ['bos', 'eos']) if (typeof tc[`add_${typ}_token`] === 'boolean') addFlags.set(typ, tc[`add_${typ}_token`]);
  for (const [typ, v] of addFlags) kv.set(`tokenizer.ggml.add_${typ}_token`, bool(v));

  if (typeof tc.chat_template === 'string') kv.set('tokenizer.chat_template', str(tc.chat_template));
}

function tokenContent(t: unknown): string | undefined {
  if (typeof t === 'string') return t;
  if (t && typeof t === 'object' && typeof (t as Json).content === 'string') return (t as Json).content as string;
  return undefined;
}

const QWEN2_REGEX = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;

/**
 * The converter identifies the pre-tokenizer by hashing the ids of a probe string; we
 * recognise the two split regexes we use instead: Llama 3 splits digits in runs of up to
 * three, Qwen2/Qwen3 one digit at a time.
 */
function bpePre(tj: Json): string {
  const regexes: string[] = [];
  const walk = (p: Json | undefined) => {
    if (!p) return;
    if (typeof p.pattern?.Regex === 'string') regexes.push(p.pattern.Regex as string);
    for (const q of (p.pretokenizers ?? []) as Json[]) walk(q);
  };
  walk(tj.pre_tokenizer as Json | undefined);
  // o200k (GPT-OSS) also splits digits in threes; its letter classes tell it apart.
  if (regexes.some((r) => r.includes(String.raw`[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]`))) return 'gpt-4o';
  if (regexes.some((r) => r.includes(String.raw`\p{N}{1,3}`))) return 'llama-bpe';
  if (regexes.includes(QWEN2_REGEX)) return 'qwen2';
  throw new Error('unrecognised BPE pre-tokenizer: pass options.pre');
}

// ---------------------------------------------------------------------------------------------
// Tensors

interface PlannedTensor {
  name: string;
  /** ggml order: fastest-varying first. */
  dims: number[];
  type: number;
  nbytes: number;
  /** f32 values (written as `type`), or MXFP4's bytes as they are. */
  data: () => Float32Array | Uint8Array;
}

/**
 * Undoes transformers' Meta->HF Q/K row permutation for one head group, as the converter's
 * LlamaModel.permute does: HF row (h, j, i) = h*hd + j*hd/2 + i goes to row h*hd + 2i + j, so
 * each head's rotate_half pairs (i, i + hd/2) become llama.cpp's adjacent pairs (2i, 2i+1).
 */
export function unpermuteHfQk(w: Float32Array, nHead: number, rowLen: number): Float32Array {
  const rows = w.length / rowLen;
  const hd = rows / nHead;
  const out = new Float32Array(w.length);
  for (let h = 0; h < nHead; h++) {
    for (let j = 0; j < 2; j++) {
      for (let i = 0; i < hd / 2; i++) {
        const src = (h * hd + j * (hd / 2) + i) * rowLen;
        const dst = (h * hd + 2 * i + j) * rowLen;
        out.set(w.subarray(src, src + rowLen), dst);
      }
    }
  }
  return out;
}

/**
 * A family's llama.cpp architecture: its tensors' names (the converter's tensor map), the
 * metadata it reads beyond the shared keys, and how its q/k rows are laid out.
 */
interface GgufFamily {
  arch: string;
  /** Each layer tensor's name (blk.N.<name>) by its role in the layer (model.layers.N.<role>), less .weight / .bias. */
  layer: Record<string, string>;
  /** llama.cpp runs the arch with adjacent-pair RoPE: q/k rows are un-permuted (the converter's LlamaModel.permute); else NEOX RoPE. */
  permuteQk?: boolean;
  /** rope.dimension_count: the head size, or its rotary part; absent, llama.cpp takes the head size. */
  ropeDimensions?: 'head' | 'rotary';
  /** Writes vocab_size (the converter does for Llama). */
  vocabSize?: boolean;
  /**
   * A mixture of experts' per-expert projections (model.layers.N.<block>.experts.E.<name>) by
   * name, and the stacked tensor llama.cpp keeps each in ([experts, rows, cols]).
   */
  experts?: Record<string, string>;
  /** `set(key, value)` for `<arch>.<key>`; `c`: config.json's decoder fields. */
  params?: (set: (key: string, value: KV) => void, cfg: ModelConfig, c: Json) => void;
  /** The decoder's tensors outside its layers where not MODEL_TENSORS' names. */
  globals?: Record<string, string>;
  /**
   * Layer tensors the converter renames whole or reshapes (model.layers.N.<role>, suffix
   * included): their GGUF name under blk.N., their shape and a change of their values.
   */
  special?: (c: Json) => Record<string, { name: string; shape: (shape: number[]) => number[]; values?: (v: Float32Array) => Float32Array }>;
  /**
   * Fused layer matrices the converter splits by the rows the builder takes of them
   * (FamilyTensor.segments): their GGUF names; segment j goes to name j % names, and a name
   * given several segments stacks them with a leading dimension (experts).
   */
  split?: (c: Json) => Record<string, string[]>;
  /**
   * GPT-OSS's MXFP4 experts (`mlp.experts.gate_up_proj` with alternating gate and up rows,
   * `mlp.experts.down_proj`, their `_bias`es) as the converter's GptOssModel writes them:
   * ffn_gate_exps / ffn_up_exps / ffn_down_exps in llama.cpp's MXFP4 blocks, biases split alike.
   */
  mxfp4Experts?: boolean;
}

const i32s = (value: number[]): KV => ({ type: ValueType.ARRAY, elemType: ValueType.INT32, value });

/** A conv weight [channels, 1, kernel] as the converter squeezes it: [channels, kernel]. */
const squeezeConv = (shape: number[]) => [shape[0]!, shape[shape.length - 1]!];

/** Mamba-2's tensors as convert_hf_to_gguf.py's Mamba2Model writes them: A as -exp(A_log), A and D as [heads, 1], the norm per group. */
function mamba2Special(block: string, groups: number): ReturnType<NonNullable<GgufFamily['special']>> {
  return {
    [`${block}.A_log`]: { name: 'ssm_a', shape: (s) => [s[0]!, 1], values: (v) => v.map((a) => -Math.exp(a)) },
    [`${block}.D`]: { name: 'ssm_d', shape: (s) => [s[0]!, 1] },
    [`${block}.dt_bias`]: { name: 'ssm_dt.bias', shape: (s) => s },
    [`${block}.conv1d.weight`]: { name: 'ssm_conv1d.weight', shape: squeezeConv },
    [`${block}.norm.weight`]: { name: 'ssm_norm.weight', shape: ([n]) => [groups, n! / groups] },
  };
}

/** The decoder's tensors outside its layers. */
const MODEL_TENSORS: Record<string, string> = {
  'model.embed_tokens.weight': 'token_embd.weight',
  'model.norm.weight': 'output_norm.weight',
  'lm_head.weight': 'output.weight',
};

const LLAMA_LAYER: Record<string, string> = {
  input_layernorm: 'attn_norm',
  'self_attn.q_proj': 'attn_q',
  'self_attn.k_proj': 'attn_k',
  'self_attn.v_proj': 'attn_v',
  'self_attn.o_proj': 'attn_output',
  post_attention_layernorm: 'ffn_norm',
  'mlp.gate_proj': 'ffn_gate',
  'mlp.up_proj': 'ffn_up',
  'mlp.down_proj': 'ffn_down',
};
const QK_NORM: Record<string, string> = { 'self_attn.q_norm': 'attn_q_norm', 'self_attn.k_norm': 'attn_k_norm' };
/** Norms on each block's output before the residual add (Gemma, OLMo 2). */
const POST_NORMS: Record<string, string> = { post_attention_layernorm: 'post_attention_norm', post_feedforward_layernorm: 'post_ffw_norm' };
const GEMMA_LAYER = { ...LLAMA_LAYER, ...QK_NORM, ...POST_NORMS, pre_feedforward_layernorm: 'ffn_norm' };

function gemmaParams(set: (key: string, value: KV) => void, cfg: ModelConfig, c: Json): void {
  set('attention.key_length', u32(cfg.headDim));
  set('attention.value_length', u32(cfg.headDim));
  set('attention.sliding_window', u32(c.sliding_window as number));
}

/** By family (src/models/registry.ts). */
const GGUF_FAMILIES: Record<string, GgufFamily> = {
  llama: { arch: 'llama', layer: LLAMA_LAYER, permuteQk: true, ropeDimensions: 'head', vocabSize: true },
  qwen2: { arch: 'qwen2', layer: LLAMA_LAYER },
  qwen3: { arch: 'qwen3', layer: { ...LLAMA_LAYER, ...QK_NORM } },
  gemma2: {
    arch: 'gemma2', layer: GEMMA_LAYER,
    params: (set, cfg, c) => {
      gemmaParams(set, cfg, c);
      if (c.attn_logit_softcapping != null) set('attn_logit_softcapping', f32(c.attn_logit_softcapping as number));
      if (c.final_logit_softcapping != null) set('final_logit_softcapping', f32(c.final_logit_softcapping as number));
    },
  },
  gemma3: { arch: 'gemma3', layer: GEMMA_LAYER, params: gemmaParams },
  phi3: {
    arch: 'phi3', layer: { ...LLAMA_LAYER, 'self_attn.qkv_proj': 'attn_qkv', 'mlp.gate_up_proj': 'ffn_up' }, ropeDimensions: 'rotary',
    params: (set, _cfg, c) => {
      if (c.sliding_window != null) set('attention.sliding_window', u32(c.sliding_window as number));
    },
  },
  smollm3: { arch: 'smollm3', layer: LLAMA_LAYER, permuteQk: true },
  granite: {
    arch: 'granite', layer: LLAMA_LAYER, permuteQk: true,
    params: (set, _cfg, c) => {
      set('embedding_scale', f32(c.embedding_multiplier as number));
      set('attention.scale', f32(c.attention_multiplier as number));
      set('residual_scale', f32(c.residual_multiplier as number));
      set('logit_scale', f32(c.logits_scaling as number));
    },
  },
  olmo2: { arch: 'olmo2', layer: { ...LLAMA_LAYER, ...QK_NORM, ...POST_NORMS } },
  gpt_oss: {
    arch: 'gpt-oss',
    layer: {
      ...LLAMA_LAYER, post_attention_layernorm: 'post_attention_norm', 'self_attn.sinks': 'attn_sinks', 'mlp.router': 'ffn_gate_inp',
    },
    mxfp4Experts: true,
    params: (set, cfg, c) => {
      set('expert_count', u32(c.num_local_experts as number));
      set('expert_used_count', u32(c.num_experts_per_tok as number));
      set('expert_feed_forward_length', u32(cfg.intermediate));
      set('attention.sliding_window', u32(c.sliding_window as number));
    },
  },
  // llama.cpp's qwen3moe has every layer sparse and always renormalises the top-k weights.
  qwen3_moe: {
    arch: 'qwen3moe', layer: { ...LLAMA_LAYER, ...QK_NORM, 'mlp.gate': 'ffn_gate_inp' },
    experts: { gate_proj: 'ffn_gate_exps', up_proj: 'ffn_up_exps', down_proj: 'ffn_down_exps' },
    params: (set, _cfg, c) => {
      if ((c.mlp_only_layers as number[]).length > 0 || c.decoder_sparse_step !== 1 || c.norm_topk_prob !== true) {
        throw new Error('llama.cpp runs qwen3moe with every layer sparse and norm_topk_prob');
      }
      set('expert_count', u32(c.num_experts as number));
      set('expert_used_count', u32(c.num_experts_per_tok as number));
      set('expert_feed_forward_length', u32(c.moe_intermediate_size as number));
    },
  },
  // Per layer, head_count_kv is 0 but on attention layers and feed_forward_length 0 but on
  // MLP layers: llama.cpp tells the Mamba-2, attention and MLP layers apart by them.
  nemotron_h: {
    arch: 'nemotron_h',
    layer: {
      norm: 'attn_norm', 'mixer.in_proj': 'ssm_in', 'mixer.conv1d': 'ssm_conv1d', 'mixer.out_proj': 'ssm_out',
      'self_attn.q_proj': 'attn_q', 'self_attn.k_proj': 'attn_k', 'self_attn.v_proj': 'attn_v', 'self_attn.o_proj': 'attn_output',
      'mixer.up_proj': 'ffn_up', 'mixer.down_proj': 'ffn_down',
    },
    special: (c) => mamba2Special('mixer', c.n_groups as number),
    params: (set, cfg, c) => {
      const pattern = [...(c.hybrid_override_pattern as string)];
      const groups = c.n_groups as number;
      set('attention.head_count_kv', i32s(pattern.map((ch) => (ch === '*' ? cfg.kvHeads : 0))));
      set('feed_forward_length', i32s(pattern.map((ch) => (ch === '-' ? cfg.intermediate : 0))));
      set('attention.key_length', u32(cfg.headDim));
      set('attention.value_length', u32(cfg.headDim));
      set('ssm.conv_kernel', u32(c.conv_kernel as number));
      set('ssm.inner_size', u32((c.mamba_num_heads as number) * (c.mamba_head_dim as number)));
      set('ssm.state_size', u32(c.ssm_state_size as number));
      set('ssm.time_step_rank', u32(c.mamba_num_heads as number));
      set('ssm.group_count', u32(groups));
      // The converter's NemotronHModel also writes the epsilon under this key, which llama.cpp reads.
      set('attention.layer_norm_epsilon', f32(cfg.rmsEps));
    },
  },
  // Without experts the shared MLP is llama.cpp's plain FFN, with them its shared expert.
  granitemoehybrid: {
    arch: 'granitehybrid', permuteQk: true,
    layer: {
      input_layernorm: 'attn_norm', post_attention_layernorm: 'ffn_norm', 'mamba.in_proj': 'ssm_in', 'mamba.conv1d': 'ssm_conv1d', 'mamba.out_proj': 'ssm_out',
      'self_attn.q_proj': 'attn_q', 'self_attn.k_proj': 'attn_k', 'self_attn.v_proj': 'attn_v', 'self_attn.o_proj': 'attn_output', 'block_sparse_moe.router.layer': 'ffn_gate_inp',
    },
    special: (c) => {
      const experts = (c.num_local_experts as number) ?? 0;
      return {
        ...mamba2Special('mamba', c.mamba_n_groups as number),
        'shared_mlp.output_linear.weight': { name: experts > 0 ? 'ffn_down_shexp.weight' : 'ffn_down.weight', shape: (shape) => shape },
        'block_sparse_moe.output_linear.weight': { name: 'ffn_down_exps.weight', shape: ([rows, cols]) => [experts, rows! / experts, cols!] },
      };
    },
    split: (c) => ({
      'shared_mlp.input_linear.weight': (c.num_local_experts as number) > 0 ? ['ffn_gate_shexp.weight', 'ffn_up_shexp.weight'] : ['ffn_gate.weight', 'ffn_up.weight'],
      'block_sparse_moe.input_linear.weight': ['ffn_gate_exps.weight', 'ffn_up_exps.weight'],
    }),
    params: (set, cfg, c) => {
      const experts = (c.num_local_experts as number) ?? 0;
      if (experts > 0) {
        set('expert_count', u32(experts));
        set('expert_used_count', u32(c.num_experts_per_tok as number));
        // The converter's GraniteMoeModel: feed_forward_length is the experts' width.
        set('feed_forward_length', u32(c.intermediate_size as number));
        set('expert_shared_feed_forward_length', u32(c.shared_intermediate_size as number));
      }
      const types = c.layer_types as string[];
      set('attention.head_count_kv', i32s(types.map((t) => (t === 'attention' ? cfg.kvHeads : 0))));
      set('embedding_scale', f32(c.embedding_multiplier as number));
      set('attention.scale', f32(c.attention_multiplier as number));
      set('residual_scale', f32(c.residual_multiplier as number));
      set('logit_scale', f32(c.logits_scaling as number));
      set('rope.scaling.finetuned', bool(c.position_embedding_type === 'rope'));
      set('ssm.conv_kernel', u32(c.mamba_d_conv as number));
      set('ssm.inner_size', u32((c.mamba_n_heads as number) * (c.mamba_d_head as number)));
      set('ssm.state_size', u32(c.mamba_d_state as number));
      set('ssm.time_step_rank', u32(c.mamba_n_heads as number));
      set('ssm.group_count', u32(c.mamba_n_groups as number));
    },
  },
  lfm2: {
    arch: 'lfm2',
    layer: {
      operator_norm: 'attn_norm', ffn_norm: 'ffn_norm', 'self_attn.q_proj': 'attn_q', 'self_attn.k_proj': 'attn_k', 'self_attn.v_proj': 'attn_v',
      'self_attn.out_proj': 'attn_output', 'self_attn.q_layernorm': 'attn_q_norm', 'self_attn.k_layernorm': 'attn_k_norm',
      'feed_forward.w1': 'ffn_gate', 'feed_forward.w3': 'ffn_up', 'feed_forward.w2': 'ffn_down', 'conv.in_proj': 'shortconv.in_proj', 'conv.out_proj': 'shortconv.out_proj',
    },
    globals: { 'model.embedding_norm.weight': 'token_embd_norm.weight' },
    special: () => ({ 'conv.conv.weight': { name: 'shortconv.conv.weight', shape: squeezeConv } }),
    vocabSize: true,
    params: (set, cfg, c) => {
      set('attention.head_count_kv', i32s((c.layer_types as string[]).map((t) => (t === 'full_attention' ? cfg.kvHeads : 0))));
      set('shortconv.l_cache', u32(c.conv_L_cache as number));
    },
  },
  // The converter writes Mixtral as llama with experts.
  mixtral: {
    arch: 'llama', layer: { ...LLAMA_LAYER, 'block_sparse_moe.gate': 'ffn_gate_inp' }, permuteQk: true, ropeDimensions: 'head', vocabSize: true,
    experts: { w1: 'ffn_gate_exps', w3: 'ffn_up_exps', w2: 'ffn_down_exps' },
    params: (set, _cfg, c) => {
      if (c.sliding_window != null) throw new Error('llama.cpp runs Mixtral without a sliding window');
      set('expert_count', u32(c.num_local_experts as number));
      set('expert_used_count', u32(c.num_experts_per_tok as number));
    },
  },
};

/** GGUF name of the family's tensor `name` (one without .weight / .bias, GPT-OSS's sinks, gets .weight, as the converter gives it). */
function ggufName(name: string, gguf: GgufFamily): string {
  const global = gguf.globals?.[name] ?? MODEL_TENSORS[name];
  if (global) return global;
  const m = /^model\.layers\.(\d+)\.(.+?)(?:\.(weight|bias))?$/.exec(name);
  const mapped = m && gguf.layer[m[2]!];
  if (!mapped) throw new Error(`${name}: no llama.cpp name for ${gguf.arch}`);
  return `blk.${m[1]}.${mapped}.${m[3] ?? 'weight'}`;
}

/**
 * GPT-OSS's expert tensor `t` (mxfp4Experts) as llama.cpp's: the gate/up matrix [experts *
 * 2I, H] split by alternating rows into ffn_gate_exps and ffn_up_exps [experts, I, H], the down
 * matrix as ffn_down_exps, from `<prefix>_blocks` and `_scales` as GGML_MXFP4 (or `as` f32);
 * their `_bias` [experts, rows] split the same way. Returns whether `t` is one (marking what it read).
 */
function planMxfp4Expert(
  t: FamilyTensor, source: Map<string, CheckpointTensor>, names: CheckpointNames, used: Set<string>,
  add: (name: string, shape: number[], data: () => Float32Array | Uint8Array, type?: number) => void, as: 'mxfp4' | 'f32',
): boolean {
  const m = /^model\.layers\.(\d+)\.mlp\.experts\.(gate_up|down)_proj(\.weight|_bias)$/.exec(t.name);
  if (!m) return false;
  const [, layer, which, kind] = m as unknown as [string, string, string, string];
  const prefix = names.of(t.name.replace(/(\.weight|_bias)$/, ''));
  const entry = (name: string) => {
    const e = source.get(name);
    if (!e) throw new Error(`no ${name}`);
    used.add(name);
    return e;
  };
  // Each output: its GGUF name and, for gate_up, which of the alternating rows it takes.
  const outputs = which === 'down' ? [{ name: 'ffn_down_exps', parity: -1 }] : [{ name: 'ffn_gate_exps', parity: 0 }, { name: 'ffn_up_exps', parity: 1 }];
  const rowsOf = (all: number) => (which === 'down' ? all : all / 2);
  // Source row of output row r: itself, or the gate (parity 0) or up (1) row of pair r.
  const pick = (parity: number) => (r: number) => (parity < 0 ? r : 2 * r + parity);
  if (kind === '_bias') {
    const bias = entry(`${prefix}_bias`);
    const [experts, all] = bias.info.shape as [number, number];
    for (const o of outputs) {
      const rows = rowsOf(all);
      const row = pick(o.parity);
      add(`blk.${layer}.${o.name}.bias`, [experts, rows], () => {
        const v = readTensorF32(bias);
        return Float32Array.from({ length: experts * rows }, (_, i) => v[Math.floor(i / rows) * all + row(i % rows)]!);
      });
    }
    return true;
  }
  const blocks = entry(`${prefix}_blocks`);
  const scales = entry(`${prefix}_scales`);
  const [experts, all, perRow] = blocks.info.shape as [number, number, number];
  for (const o of outputs) {
    const rows = rowsOf(all);
    const row = pick(o.parity);
    add(`blk.${layer}.${o.name}.weight`, [experts, rows, perRow * MXFP4_BLOCK], () => {
      const [b, s] = [readSafetensorsBytes(blocks.path, blocks.header, blocks.name), readSafetensorsBytes(scales.path, scales.header, scales.name)];
      const out: Mxfp4 = { blocks: new Uint8Array(experts * rows * perRow * 16), scales: new Uint8Array(experts * rows * perRow) };
      for (let e = 0; e < experts; e++) {
        for (let r = 0; r < rows; r++) {
          const from = e * all + row(r);
          const to = e * rows + r;
          out.blocks.set(b.subarray(from * perRow * 16, (from + 1) * perRow * 16), to * perRow * 16);
          out.scales.set(s.subarray(from * perRow, (from + 1) * perRow), to * perRow);
        }
      }
      return as === 'mxfp4' ? ggmlMxfp4(out) : Float32Array.from(decodeMxfp4(out));
    }, as === 'mxfp4' ? GGML_MXFP4 : GGML_F32);
  }
  return true;
}

/**
 * The GGUF tensors for the family's `tensors` read from checkpoint `source` (`names` maps a
 * family name to the checkpoint's), with llama.cpp's extra RoPE tensors: vectors get their
 * load shift (the converter's Gemma norm_shift), q/k rows are un-permuted where the arch wants.
 * Tensors that are not the family's (a multimodal checkpoint's vision tower and projector,
 * llama.cpp's mmproj) are left out.
 */
function planTensors(
  dir: string, source: Map<string, CheckpointTensor>, names: CheckpointNames, tensors: FamilyTensor[], gguf: GgufFamily, cfg: ModelConfig, outType: 'F32' | 'F16', config: Json,
  experts: 'mxfp4' | 'f32',
): PlannedTensor[] {
  const specials = gguf.special?.(config);
  const splits = gguf.split?.(config);
  const used = new Set<string>();
  const planned: PlannedTensor[] = [];
  const add = (name: string, shape: number[], data: () => Float32Array | Uint8Array, mxfp4?: number) => {
    const type = mxfp4 ?? (outType === 'F16' && shape.length >= 2 ? GGML_F16 : GGML_F32);
    const count = shape.reduce((a, b) => a * b, 1);
    const nbytes = type === GGML_MXFP4 ? (count / MXFP4_BLOCK) * 17 : count * (type === GGML_F16 ? 2 : 4);
    planned.push({ name, dims: [...shape].reverse(), type, nbytes, data });
  };
  if (gguf.arch === 'llama' && cfg.ropeScaling?.type === 'llama3') {
    const factors = Float32Array.from(ropeFreqDivisors(cfg));
    add('rope_freqs.weight', [factors.length], () => factors);
  }
  const s = cfg.ropeScaling;
  if (s?.type === 'longrope') {
    add('rope_factors_long.weight', [s.longFactor.length], () => Float32Array.from(s.longFactor));
    add('rope_factors_short.weight', [s.shortFactor.length], () => Float32Array.from(s.shortFactor));
  }
  // Per-expert projections go into one stacked tensor per layer and projection, written
  // where expert 0's is met.
  const stacks = new Map<string, FamilyTensor[]>();
  const expertOf = (t: FamilyTensor) => /^model\.layers\.(\d+)\..+\.experts\.(\d+)\.(\w+)\.weight$/.exec(t.name);
  for (const t of tensors) {
    const m = expertOf(t);
    const stacked = m && gguf.experts?.[m[3]!];
    if (!m) continue;
    if (!stacked) throw new Error(`${t.name}: no llama.cpp name for ${gguf.arch}`);
    const key = `blk.${m[1]}.${stacked}.weight`;
    stacks.set(key, [...(stacks.get(key) ?? []), t]);
  }
  for (const t of tensors) {
    if (gguf.mxfp4Experts && planMxfp4Expert(t, source, names, used, add, experts)) continue;
    const name = names.of(t.name);
    const entry = source.get(name);
    if (!entry) throw new Error(`${dir}: no ${name}`);
    used.add(name);
    const expert = expertOf(t);
    if (expert) {
      if (expert[2] !== '0') continue;
      const key = `blk.${expert[1]}.${gguf.experts![expert[3]!]}.weight`;
      const members = stacks.get(key)!;
      add(key, [members.length, ...entry.info.shape], () => {
        const parts = members.map((m) => readTensorF32(source.get(names.of(m.name))!));
        const out = new Float32Array(parts.reduce((n, p) => n + p.length, 0));
        let at = 0;
        for (const p of parts) { out.set(p, at); at += p.length; }
        return out;
      });
      continue;
    }
    const layerRole = /^model\.layers\.(\d+)\.(.+)$/.exec(t.name);
    const special = layerRole && specials?.[layerRole[2]!];
    if (special) {
      add(`blk.${layerRole![1]}.${special.name}`, special.shape(entry.info.shape), () => (special.values ?? ((v) => v))(readTensorF32(entry)));
      continue;
    }
    const split = layerRole && splits?.[layerRole[2]!];
    if (split) {
      const cols = entry.info.shape[entry.info.shape.length - 1]!;
      const segments = t.segments ?? [];
      const starts = segments.map((_, j) => segments.slice(0, j).reduce((a, b) => a + b, 0));
      for (const [k, name] of split.entries()) {
        const mine = segments.map((rows, j) => ({ rows, first: starts[j]! })).filter((_, j) => j % split.length === k);
        const shape = mine.length === 1 ? [mine[0]!.rows, cols] : [mine.length, mine[0]!.rows, cols];
        add(`blk.${layerRole![1]}.${name}`, shape, () => {
          const w = readTensorF32(entry);
          return Float32Array.from(mine.flatMap(({ first, rows }) => [...w.subarray(first * cols, (first + rows) * cols)]));
        });
      }
      continue;
    }
    const heads = /\.self_attn\.q_proj\./.test(t.name) ? cfg.heads : /\.self_attn\.k_proj\./.test(t.name) ? cfg.kvHeads : 0;
    const rowLen = entry.info.shape.length === 2 ? entry.info.shape[1]! : 1;
    add(ggufName(t.name, gguf), entry.info.shape, () => {
      const w = readTensorF32(entry);
      if (t.shift !== 0) for (let i = 0; i < w.length; i++) w[i]! += t.shift;
      return gguf.permuteQk && heads ? unpermuteHfQk(w, heads, rowLen) : w;
    });
  }
  if (cfg.tieEmbeddings) used.add(names.of('lm_head.weight'));
  const left = [...source.keys()].filter((n) => names.isFamily(n) && !used.has(n) && !n.includes('rotary_emb.inv_freq'));
  if (left.length) throw new Error(`${dir}: tensors not converted: ${left.join(', ')}`);
  return planned;
}

// ---------------------------------------------------------------------------------------------
// Encoders (BERT, XLM-R, and XLM-R sequence classifiers) as the converter's BertModel and
// XLMRobertaModel write them: arch "bert", a WordPiece ("bert") vocabulary with "##"
// stripped from continuations and "\u2581" before word starts, XLM-R's position rows from
// pad_token_id + 1 on, the classifier head as cls / cls.output. The encoder's tensors are
// found bare or under bert. / roberta. as the bert family's layouts say.

const ENCODER_LAYER_TENSORS: Array<[string, string]> = [
  ['attention.self.query', 'attn_q'],
  ['attention.self.key', 'attn_k'],
  ['attention.self.value', 'attn_v'],
  ['attention.output.dense', 'attn_output'],
  ['attention.output.LayerNorm', 'attn_output_norm'],
  ['intermediate.dense', 'ffn_up'],
  ['output.dense', 'ffn_down'],
  ['output.LayerNorm', 'layer_output_norm'],
];

function writeEncoderGguf(dir: string, outPath: string, config: Json, opts: GgufWriteOptions): void {
  const arch = 'bert';
  const xlmr = config.model_type === 'xlm-roberta';
  const offset = xlmr ? (config.pad_token_id as number) + 1 : 0;
  const source = listCheckpointTensors(dir);
  const names = checkpointNames(familyConfig(config).family, source.keys());
  const H = config.hidden_size as number;
  const kv = new Map<string, KV>();
  kv.set('general.architecture', str(arch));
  kv.set('general.name', str(opts.name ?? basename(dir)));
  kv.set(`${arch}.context_length`, u32((config.max_position_embeddings as number) - offset));
  kv.set(`${arch}.embedding_length`, u32(H));
  kv.set(`${arch}.block_count`, u32(config.num_hidden_layers as number));
  kv.set(`${arch}.feed_forward_length`, u32(config.intermediate_size as number));
  kv.set(`${arch}.attention.head_count`, u32(config.num_attention_heads as number));
  kv.set(`${arch}.attention.layer_norm_epsilon`, f32(config.layer_norm_eps as number));
  kv.set(`${arch}.attention.causal`, bool(false));
  if (opts.pooling) kv.set(`${arch}.pooling_type`, u32(POOLING_TYPE[opts.pooling]));
  kv.set('general.file_type', u32(0));
  const tj = readJson(join(dir, 'tokenizer.json'));
  const vocab = tj.model.vocab as Record<string, number>;
  const tokens: string[] = new Array(config.vocab_size as number);
  const types: number[] = new Array(tokens.length).fill(TOKEN_NORMAL);
  for (const [text, id] of Object.entries(vocab)) tokens[id] = text.startsWith('##') ? text.slice(2) : `\u2581${text}`;
  for (const t of (tj.added_tokens ?? []) as AddedToken[]) {
    tokens[t.id] = t.content;
    types[t.id] = TOKEN_CONTROL;
  }
  kv.set('tokenizer.ggml.model', str('bert'));
  kv.set('tokenizer.ggml.tokens', { type: ValueType.ARRAY, elemType: ValueType.STRING, value: tokens });
  kv.set('tokenizer.ggml.token_type', { type: ValueType.ARRAY, elemType: ValueType.INT32, value: types });
  kv.set('tokenizer.ggml.token_type_count', u32(config.type_vocab_size as number));
  const id = (t: string) => vocab[t] ?? ((tj.added_tokens ?? []) as AddedToken[]).find((a) => a.content === t)!.id;
  kv.set('tokenizer.ggml.bos_token_id', u32(id('[CLS]')));
  kv.set('tokenizer.ggml.cls_token_id', u32(id('[CLS]')));
  kv.set('tokenizer.ggml.seperator_token_id', u32(id('[SEP]')));
  // XLM-R's </s> is both its separator and its end of sequence (a pair is <s> A </s></s> B </s>).
  if (xlmr) kv.set('tokenizer.ggml.eos_token_id', u32(id('[SEP]')));
  kv.set('tokenizer.ggml.unknown_token_id', u32(id('[UNK]')));
  kv.set('tokenizer.ggml.padding_token_id', u32(id('[PAD]')));
  kv.set('tokenizer.ggml.mask_token_id', u32(id('[MASK]')));

  const planned: PlannedTensor[] = [];
  const used = new Set<string>();
  const from = (name: string, gguf: string, transform?: (w: Float32Array, shape: number[]) => { data: Float32Array; shape: number[] }) => {
    const hf = names.of(name);
    const t = source.get(hf);
    if (!t) throw new Error(`${dir}: no ${hf}`);
    used.add(hf);
    const shape = transform ? transform(new Float32Array(0), t.info.shape).shape : t.info.shape;
    const count = shape.reduce((a, b) => a * b, 1);
    planned.push({ name: gguf, dims: [...shape].reverse(), type: GGML_F32, nbytes: count * 4, data: () => (transform ? transform(readTensorF32(t), t.info.shape).data : readTensorF32(t)) });
  };
  const both = (hf: string, gguf: string) => {
    from(`${hf}.weight`, `${gguf}.weight`);
    from(`${hf}.bias`, `${gguf}.bias`);
  };
  from('embeddings.word_embeddings.weight', 'token_embd.weight');
  from('embeddings.token_type_embeddings.weight', 'token_types.weight');
  from('embeddings.position_embeddings.weight', 'position_embd.weight', (w, shape) => ({ data: w.subarray(offset * H), shape: [shape[0]! - offset, shape[1]!] }));
  both('embeddings.LayerNorm', 'token_embd_norm');
  for (let l = 0; l < (config.num_hidden_layers as number); l++) {
    for (const [hf, gguf] of ENCODER_LAYER_TENSORS) both(`encoder.layer.${l}.${hf}`, `blk.${l}.${gguf}`);
  }
  if (source.has('classifier.dense.weight')) {
    both('classifier.dense', 'cls');
    both('classifier.out_proj', 'cls.output');
  }
  const left = [...source.keys()].filter((n) => !used.has(n) && !n.endsWith('position_ids'));
  if (left.length) throw new Error(`${dir}: tensors not converted: ${left.join(', ')}`);
  writeFile(outPath, kv, planned);
}

// ---------------------------------------------------------------------------------------------
// File

const pad = (n: number) => (ALIGNMENT - (n % ALIGNMENT)) % ALIGNMENT;

function writeFile(path: string, kv: Map<string, KV>, tensors: PlannedTensor[]): void {
  const w = new ByteWriter();
  w.push(Buffer.from('GGUF', 'latin1'));
  w.u32(3);
  w.u64(tensors.length);
  w.u64(kv.size);
  for (const [key, v] of kv) {
    w.str(key);
    w.u32(v.type);
    if (v.type === ValueType.ARRAY) {
      w.u32(v.elemType);
      w.u64(v.value.length);
      for (const x of v.value) w.value(v.elemType, x);
    } else {
      w.value(v.type, v.value);
    }
  }
  let offset = 0;
  for (const t of tensors) {
    w.str(t.name);
    w.u32(t.dims.length);
    for (const d of t.dims) w.u64(d);
    w.u32(t.type);
    w.u64(offset);
    offset += t.nbytes + pad(t.nbytes);
  }
  w.push(new Uint8Array(pad(w.length)));

  const fd = openSync(path, 'w');
  try {
    writeAll(fd, w.bytes());
    for (const t of tensors) {
      const data = t.data();
      const bytes = t.type === GGML_F16 ? f32ToF16(data as Float32Array) : data;
      if (bytes.byteLength !== t.nbytes) throw new Error(`${t.name}: ${bytes.byteLength} bytes, expected ${t.nbytes}`);
      writeAll(fd, new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength));
      writeAll(fd, new Uint8Array(pad(t.nbytes)));
    }
  } finally {
    closeSync(fd);
  }
}

function writeAll(fd: number, bytes: Uint8Array): void {
  let done = 0;
  while (done < bytes.length) done += writeSync(fd, bytes, done, bytes.length - done);
}

// ---------------------------------------------------------------------------------------------
// Reader (tests): metadata and tensor infos, no tensor data.

export interface GgufInfo {
  version: number;
  metadata: Map<string, unknown>;
  tensors: Array<{ name: string; dims: number[]; type: number; offset: number }>;
  /** File offset of the data section; tensor offsets are relative to it. */
  dataStart: number;
}

export function readGguf(path: string): GgufInfo {
  const fd = openSync(path, 'r');
  // Metadata of a 150k-token vocabulary is a few MB; read generously and grow if needed.
  let buf = Buffer.alloc(0);
  const ensure = (end: number) => {
    if (end <= buf.length) return;
    const next = Buffer.alloc(Math.max(end, buf.length * 2, 1 << 20));
    const n = readSync(fd, next, 0, next.length, 0);
    buf = next.subarray(0, n);
    if (end > buf.length) throw new Error(`${path}: truncated GGUF`);
  };
  let pos = 0;
  // Returns the current buffer and the offset to read n bytes at (ensure() may swap `buf`,
  // so callers must not capture it before calling this).
  const take = (n: number): [Buffer, number] => {
    ensure(pos + n);
    pos += n;
    return [buf, pos - n];
  };
  const u32 = () => { const [b, at] = take(4); return b.readUInt32LE(at); };
  const u64 = () => { const [b, at] = take(8); return Number(b.readBigUInt64LE(at)); };
  const s = () => {
    const n = u64();
    const [b, at] = take(n);
    return b.toString('utf8', at, at + n);
  };
  const value = (type: number): unknown => {
    const fixed = (n: number, read: (b: Buffer, at: number) => number | bigint) => { const [b, at] = take(n); return read(b, at); };
    switch (type) {
      case ValueType.UINT8: return fixed(1, (b, at) => b.readUInt8(at));
      case ValueType.INT8: return fixed(1, (b, at) => b.readInt8(at));
      case ValueType.UINT16: return fixed(2, (b, at) => b.readUInt16LE(at));
      case ValueType.INT16: return fixed(2, (b, at) => b.readInt16LE(at));
      case ValueType.UINT32: return u32();
      case ValueType.INT32: return fixed(4, (b, at) => b.readInt32LE(at));
      case ValueType.FLOAT32: return fixed(4, (b, at) => b.readFloatLE(at));
      case ValueType.BOOL: return fixed(1, (b, at) => b.readUInt8(at)) !== 0;
      case ValueType.STRING: return s();
      case ValueType.UINT64: return u64();
      case ValueType.INT64: return Number(fixed(8, (b, at) => b.readBigInt64LE(at)));
      case ValueType.FLOAT64: return fixed(8, (b, at) => b.readDoubleLE(at));
      case ValueType.ARRAY: {
        const elemType = u32();
        const n = u64();
        const out: unknown[] = [];
        for (let i = 0; i < n; i++) out.push(value(elemType));
        return out;
      }
      default: throw new Error(`${path}: unknown GGUF value type ${type}`);
    }
  };
  try {
    ensure(24);
    if (buf.toString('latin1', 0, 4) !== 'GGUF') throw new Error(`${path}: not a GGUF file`);
    take(4);
    const version = u32();
    const nTensors = u64();
    const nKv = u64();
    const metadata = new Map<string, unknown>();
    for (let i = 0; i < nKv; i++) {
      const key = s();
      metadata.set(key, value(u32()));
    }
    const tensors: GgufInfo['tensors'] = [];
    for (let i = 0; i < nTensors; i++) {
      const name = s();
      const nDims = u32();
      const dims: number[] = [];
      for (let d = 0; d < nDims; d++) dims.push(u64());
      tensors.push({ name, dims, type: u32(), offset: u64() });
    }
    const alignment = (metadata.get('general.alignment') as number | undefined) ?? ALIGNMENT;
    return { version, metadata, tensors, dataStart: Math.ceil(pos / alignment) * alignment };
  } finally {
    closeSync(fd);
  }
}
