// Kokoro (hexgrad/Kokoro-82M; config.json with an `istftnet` block): StyleTTS2's inference
// path from phoneme ids and a voice's style vector to 24 kHz audio. Phonemes, with a 0 pad
// on each side, go through PL-BERT (ALBERT: factorized embeddings, one layer's weights
// shared by every layer, post-norm) and a linear map to the prosody predictor's width.
// The predictor's duration encoder alternates bidirectional LSTMs and AdaLayerNorms over
// the phonemes with the style concatenated to every LSTM input; another BiLSTM and a
// linear layer give each phoneme's duration logits, whose sigmoids summed and divided by
// `speed` round to its frame count (at least 1). Each frame takes its phoneme's features
// (the alignment expansion); a shared BiLSTM feeds the F0 and energy (N) branches of
// AdaIN residual blocks (one upsampling 2x). The text encoder (embedding, convolutions
// with LayerNorm and leaky ReLU, a BiLSTM) gives the decoder's content features,
// expanded the same way. The iSTFTNet decoder concatenates them with the downsampled F0
// and N, runs AdaIN residual blocks, and its generator upsamples by transposed
// convolutions, adding a harmonic-plus-noise source (sines of F0's harmonics and noise,
// through an STFT and strided convolutions) at each scale, with Snake-activated AdaIN
// residual stacks; a last convolution gives log-magnitudes and phases that an inverse
// STFT turns into samples.
// Widths and counts come from config.json and the tensors' shapes (the decoder's hidden
// widths from its convolutions); weight norm (weight_g, weight_v) is folded at load.
// Weights come from hexgrad's kokoro-v1_0.pth (torch.save's zip, ./torch-zip.ts) or a
// safetensors conversion (mlx-community/Kokoro-82M-bf16); voices from voices/*.pt or
// voices/*.safetensors. Tensor names are the PyTorch state dict's (bert., bert_encoder.,
// predictor., text_encoder., decoder.; an optional `module.` after the first part);
// convolution weights are read as PyTorch's [out, in, taps] or MLX's [out, taps, in],
// LSTMs by PyTorch's or MLX's names. Activations are time-major rows; every per-call shape lives in the
// dispatches' params (runtime/ops/audio.ts), and the linear layers, attention and
// embeddings (which read the step's row count) run in passes of their own row count.
// The LSTMs run as one GPU dispatch per layer, a workgroup per direction looping over the
// frames (lstm.wgsl): on llvmpipe that measured about even with the same recurrence as
// an f32 loop on the CPU (Kokoro-82M's hidden 256 over 62 to 300 frames: 0.8x to 1.3x as
// the machine's load varied, bench/RESULTS.md), and it keeps every activation on the
// device, where a CPU LSTM would read back and upload between passes; the style-dependent parts of every layer (AdaIN and AdaLayerNorm
// affines, the style's share of the LSTMs' input projections) are one linear layer per
// style half, run once per call.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { mapRead, workDone, type Gpu } from '../runtime/gpu.js';
import { Ops } from '../runtime/ops.js';
import { rows, LSTM_MAX_HIDDEN, type Conv1dSpec, type ConvTranspose1dSpec, type HarmonicSource, type NormActivation, type View } from '../runtime/ops/audio.js';
import { Program, type Dispatch } from '../runtime/program.js';
import { filledBuffer, kvCacheTexture, storageBuffer, type GpuWeight } from '../runtime/tensors.js';
import { configFields, type Json } from './config.js';
import { readSafetensorsHeader, readTensorF32 } from './safetensors.js';
import { readTorchZip } from './torch-zip.js';

/** The sample rate iSTFTNet's source module is built for (its SineGen's). */
const SAMPLE_RATE = 24000;
/** SourceModuleHnNSF's constants as Kokoro builds it: 8 overtones, voiced above 10 Hz. */
const SOURCE = { harmonics: 9, sineAmp: 0.1, noiseStd: 0.003, voicedThreshold: 10 };
/** The weights file: hexgrad's release in safetensors (mlx-community's conversion) or as released, model.safetensors; else a directory's only .safetensors or .pth file. */
const WEIGHT_FILES = ['kokoro-v1_0.safetensors', 'kokoro-v1_0.pth', 'model.safetensors'];
const KV_BLOCK = 16;
const LEAKY = 0.2;

/** Whether `dir` holds a Kokoro checkpoint: config.json with an istftnet block, or kokoro-v1_0.safetensors (or .pth). */
export function isKokoroCheckpoint(dir: string): boolean {
  if (WEIGHT_FILES.slice(0, 2).some((f) => existsSync(join(dir, f)))) return true;
  const file = join(dir, 'config.json');
  if (!existsSync(file)) return false;
  const json = JSON.parse(readFileSync(file, 'utf8')) as Json;
  return json.istftnet != null && typeof json.istftnet === 'object';
}

export interface KokoroConfig {
  vocab: ReadonlyMap<string, number>;
  tokens: number;
  /** hidden_dim: the predictor's and text encoder's width. */
  hidden: number;
  /** style_dim: each half of a voice's style vector. */
  style: number;
  layers: number;
  maxDuration: number;
  textKernel: number;
  bert: { hidden: number; embedding: number; heads: number; intermediate: number; layers: number; positions: number; eps: number };
  istft: { upsampleRates: number[]; upsampleKernels: number[]; initialChannel: number; resblockKernels: number[]; resblockDilations: number[][]; nFft: number; hop: number };
}

const ISTFT_FIELDS = ['upsample_rates', 'upsample_kernel_sizes', 'upsample_initial_channel', 'resblock_kernel_sizes', 'resblock_dilation_sizes', 'gen_istft_n_fft', 'gen_istft_hop_size'];
/** PL-BERT's AlbertConfig fields the model reads, and those it accepts at their AlbertConfig default only. */
const ALBERT_FIELDS = ['hidden_size', 'num_attention_heads', 'intermediate_size', 'max_position_embeddings', 'num_hidden_layers', 'embedding_size', 'layer_norm_eps', 'dropout', 'hidden_dropout_prob', 'attention_probs_dropout_prob', 'vocab_size', 'type_vocab_size', 'initializer_range', 'classifier_dropout_prob'];
const ALBERT_FIXED: Record<string, unknown> = { hidden_act: 'gelu_new', num_hidden_groups: 1, inner_group_num: 1, position_embedding_type: 'absolute' };
/** Top-level fields: those read, and StyleTTS2's training-time ones that inference does not use. */
const TOP_FIELDS = ['istftnet', 'plbert', 'vocab', 'n_token', 'hidden_dim', 'style_dim', 'n_layer', 'max_dur', 'text_encoder_kernel_size', 'dim_in', 'dropout', 'max_conv_dim', 'multispeaker', 'n_mels', 'sample_rate', 'model_type'];

/** config.json of a Kokoro checkpoint, checked against what the model implements. */
export function kokoroConfig(json: Json, file = 'config.json'): KokoroConfig {
  const c = configFields(json, file);
  for (const key of Object.keys(json)) if (!TOP_FIELDS.includes(key)) c.fail(key, 'is not supported');
  if (c.count('sample_rate', SAMPLE_RATE) !== SAMPLE_RATE) c.fail('sample_rate', `must be ${SAMPLE_RATE}`);
  const object = (key: string): Json => {
    const v = json[key];
    if (v == null || typeof v !== 'object' || Array.isArray(v)) return c.fail(key, 'must be an object');
    return v as Json;
  };
  const vocab = new Map<string, number>();
  for (const [symbol, id] of Object.entries(object('vocab'))) {
    if (typeof id !== 'number' || !Number.isInteger(id) || id < 0) c.fail('vocab', `maps ${JSON.stringify(symbol)} to ${JSON.stringify(id)}, not a token id`);
    vocab.set(symbol, id as number);
  }
  const tokens = c.count('n_token');
  for (const [symbol, id] of vocab) if (id >= tokens) c.fail('vocab', `maps ${JSON.stringify(symbol)} to ${id}, past n_token ${tokens}`);
  const plbert = object('plbert');
  const b = configFields(plbert, file, 'plbert.');
  for (const key of Object.keys(plbert)) {
    if (key in ALBERT_FIXED) b.oneOf(key, [ALBERT_FIXED[key]], ALBERT_FIXED[key]);
    else if (!ALBERT_FIELDS.includes(key)) b.fail(key, 'is not supported');
  }
  if (b.count('vocab_size', tokens) !== tokens) b.fail('vocab_size', `must be n_token (${tokens})`);
  const istftnet = object('istftnet');
  const s = configFields(istftnet, file, 'istftnet.');
  for (const key of Object.keys(istftnet)) if (!ISTFT_FIELDS.includes(key)) s.fail(key, 'is not supported');
  const counts = (key: string): number[] => {
    const v = istftnet[key];
    if (!Array.isArray(v) || v.length === 0 || !v.every((n) => Number.isInteger(n) && (n as number) > 0)) return s.fail(key, 'must be a list of positive integers');
    return v as number[];
  };
  const dilations = istftnet.resblock_dilation_sizes;
  if (!Array.isArray(dilations) || !dilations.every((d) => Array.isArray(d) && d.length > 0 && d.every((n) => Number.isInteger(n) && n > 0))) s.fail('resblock_dilation_sizes', 'must be a list of lists of positive integers');
  const cfg: KokoroConfig = {
    vocab, tokens,
    hidden: c.count('hidden_dim'),
    style: c.count('style_dim'),
    layers: c.count('n_layer'),
    maxDuration: c.count('max_dur'),
    textKernel: c.count('text_encoder_kernel_size'),
    bert: {
      hidden: b.count('hidden_size'), embedding: b.count('embedding_size', 128), heads: b.count('num_attention_heads'), intermediate: b.count('intermediate_size'),
      layers: b.count('num_hidden_layers'), positions: b.count('max_position_embeddings'), eps: b.positive('layer_norm_eps', 1e-12),
    },
    istft: {
      upsampleRates: counts('upsample_rates'), upsampleKernels: counts('upsample_kernel_sizes'), initialChannel: s.count('upsample_initial_channel'),
      resblockKernels: counts('resblock_kernel_sizes'), resblockDilations: dilations as number[][], nFft: s.count('gen_istft_n_fft'), hop: s.count('gen_istft_hop_size'),
    },
  };
  const { istft, bert } = cfg;
  if (istft.upsampleKernels.length !== istft.upsampleRates.length) s.fail('upsample_kernel_sizes', `must have one entry per upsample rate (${istft.upsampleRates.length})`);
  if (istft.resblockDilations.length !== istft.resblockKernels.length) s.fail('resblock_dilation_sizes', `must have one entry per resblock kernel size (${istft.resblockKernels.length})`);
  if (istft.nFft % 2 !== 0) s.fail('gen_istft_n_fft', `must be even, got ${istft.nFft}`);
  if (cfg.textKernel % 2 !== 1) c.fail('text_encoder_kernel_size', `must be odd, got ${cfg.textKernel}`);
  for (const [key, v] of [['hidden_dim', cfg.hidden], ['style_dim', cfg.style]] as const) if (v % 8 !== 0) c.fail(key, `must be a multiple of 8, got ${v}`);
  if (cfg.hidden / 2 > LSTM_MAX_HIDDEN) c.fail('hidden_dim', `must be at most ${2 * LSTM_MAX_HIDDEN}, got ${cfg.hidden}`);
  for (const [key, v] of [['hidden_size', bert.hidden], ['embedding_size', bert.embedding], ['intermediate_size', bert.intermediate]] as const) if (v % 4 !== 0) b.fail(key, `must be a multiple of 4, got ${v}`);
  const headDim = bert.hidden / bert.heads;
  if (!Number.isInteger(headDim) || headDim % 8 !== 0 || headDim > 256) b.fail('num_attention_heads', `gives head_dim ${headDim}: hidden_size / heads must be a multiple of 8, at most 256`);
  if (bert.positions < 3) b.fail('max_position_embeddings', `must be at least 3, got ${bert.positions}`);
  return cfg;
}

export interface KokoroModel {
  readonly sampleRate: number;
  /** Phoneme symbol -> token id (config.json "vocab"). */
  readonly vocab: ReadonlyMap<string, number>;
  /** The longest phoneme sequence (without the two pads): max_position_embeddings - 2. */
  readonly maxPhonemes: number;
  /** The voice packs under voices/ (.safetensors or .pt), by file name without extension. */
  readonly voiceNames: readonly string[];
  /** Audio samples per duration frame (600 for Kokoro-82M: 25 ms). */
  readonly samplesPerFrame: number;
  /** The most frames (durations summed) one call synthesises on this device; a longer call is refused naming its seconds. */
  readonly maxFrames: number;
  /** A voice pack: [maxPhonemes rows x 2 * style_dim], row i the style for i + 1 phonemes. */
  voicePack(name: string): Promise<Float32Array>;
  /**
   * Audio for phoneme ids (without the 0 pads) in a voice's style ([2 * style_dim]: the
   * decoder's half, then the predictor's), `speed` times as fast; `seed` keys the source's
   * noise. durations: frames per token, the two pads included (one frame is
   * hop * product(upsample_rates) samples).
   */
  synthesize(ids: readonly number[], style: Float32Array, speed: number, seed: number): Promise<{ audio: Float32Array; durations: Int32Array }>;
  close(): void;
}

/** What one call keeps for a check against a reference (KokoroGpu.trace). */
export interface KokoroTrace {
  /** The text encoder's output [tokens, hidden]. */
  textEncoder: Float32Array;
  /** The duration encoder's output [tokens, hidden] (without the style columns). */
  durationEncoder: Float32Array;
  /** F0 and N [2 * frames]. */
  f0: Float32Array;
  n: Float32Array;
  /** The harmonic source [2 * frames * samples per frame / 2], and its STFT [STFT frames, n_fft + 2]. */
  source: Float32Array;
  har: Float32Array;
  /** The generator's last convolution [STFT frames, n_fft + 2]. */
  spectrum: Float32Array;
}

// ---------------------------------------------------------------------------------------
// Loading.

/** A stored tensor: its shape and how to read it as f32. */
interface StoredTensor {
  shape: number[];
  read(): Float32Array;
}

/** The tensors of a safetensors file or a torch.save zip (.pth, .pt) by name. */
function readTensorFile(path: string): Map<string, StoredTensor> {
  if (!path.endsWith('.safetensors')) return readTorchZip(path);
  const header = readSafetensorsHeader(path);
  return new Map(Object.entries(header.tensors).map(([name, info]) => [name, { shape: info.shape, read: () => readTensorF32({ name, path, header, info }) }]));
}

/** A checkpoint's tensors by name (one file), read as f32. */
class Tensors {
  private readonly tensors: Map<string, StoredTensor>;

  constructor(readonly path: string) {
    this.tensors = readTensorFile(path);
  }

  /** The stored name of `name`: as given, or with `module.` after its first part (the .pth's DataParallel prefix). */
  private resolve(name: string): string | undefined {
    if (this.tensors.has(name)) return name;
    const dot = name.indexOf('.');
    const alt = `${name.slice(0, dot)}.module.${name.slice(dot + 1)}`;
    return this.tensors.has(alt) ? alt : undefined;
  }

  has(name: string): boolean {
    return this.resolve(name) !== undefined;
  }

  shape(name: string): number[] {
    return this.entry(name).shape;
  }

  read(name: string, expect?: number[]): Float32Array {
    const t = this.entry(name);
    if (expect && (t.shape.length !== expect.length || t.shape.some((d, i) => d !== expect[i]))) {
      throw new Error(`${this.path}: ${name} has shape [${t.shape.join(', ')}], expected [${expect.join(', ')}]`);
    }
    return t.read();
  }

  private entry(name: string): StoredTensor {
    const stored = this.resolve(name);
    if (!stored) throw new Error(`${this.path}: tensor ${name} not found`);
    return this.tensors.get(stored)!;
  }
}

/** MLX's names for PyTorch's LSTM tensors (mlx-audio's sanitize). */
const MLX_LSTM: Record<string, string> = {
  weight_ih_l0: 'Wx_forward', weight_hh_l0: 'Wh_forward', bias_ih_l0: 'bias_ih_forward', bias_hh_l0: 'bias_hh_forward',
  weight_ih_l0_reverse: 'Wx_backward', weight_hh_l0_reverse: 'Wh_backward', bias_ih_l0_reverse: 'bias_ih_backward', bias_hh_l0_reverse: 'bias_hh_backward',
};

/** A bidirectional LSTM as the kernels take it. */
interface Lstm {
  /** The input projection of the frame features [8H, in] (forward rows, then backward). */
  input: GpuWeight;
  /** b_ih + b_hh of both directions [8H]. */
  bias: GPUBuffer;
  /** W_hh of both directions [2, 4H, H]. */
  recurrent: GPUBuffer;
  /** Where the style's share of the input projection lands in the style table (LSTMs whose input has the style concatenated). */
  styleOffset?: number;
}

/** An AdaIN residual block's weights (StyleTTS2's AdainResBlk1d). */
interface AdainBlock {
  cin: number;
  cout: number;
  upsample: boolean;
  norm1: AdaNorm;
  norm2: AdaNorm;
  conv1: Conv1dSpec;
  conv2: Conv1dSpec;
  pool?: ConvTranspose1dSpec;
  /** The learned 1x1 shortcut where cin != cout. */
  shortcut?: Conv1dSpec;
}

/** An AdaIN's style affine (its offset in the style table) and instance-norm [weight, bias]. */
interface AdaNorm {
  offset: number;
  norm: GPUBuffer;
}

/** iSTFTNet's Snake-activated AdaIN residual stack (AdaINResBlock1). */
interface SnakeBlock {
  channels: number;
  taps: number;
  dilations: number[];
  /** Per dilation: adain1, alpha1, convs1, adain2, alpha2, convs2. */
  steps: Array<{ norm1: AdaNorm; alpha1: GPUBuffer; conv1: Conv1dSpec; norm2: AdaNorm; alpha2: GPUBuffer; conv2: Conv1dSpec }>;
}

/** Rows of a style projection being assembled: each block's weight [n, style] and bias [n]. */
class StyleTable {
  private readonly weights: Float32Array[] = [];
  private readonly biases: Float32Array[] = [];
  rows = 0;

  constructor(readonly width: number) {}

  add(weight: Float32Array, bias: Float32Array): number {
    const offset = this.rows;
    this.weights.push(weight);
    this.biases.push(bias);
    this.rows += bias.length;
    return offset;
  }

  weight(): Float32Array {
    const out = new Float32Array(this.rows * this.width);
    let at = 0;
    for (const w of this.weights) { out.set(w, at); at += w.length; }
    return out;
  }

  bias(): Float32Array {
    const out = new Float32Array(this.rows);
    let at = 0;
    for (const b of this.biases) { out.set(b, at); at += b.length; }
    return out;
  }
}

/** f32 data as a storage buffer. */
function upload(device: GPUDevice, data: Float32Array | Uint32Array, label: string): GPUBuffer {
  return filledBuffer(device, data.byteLength, label, (dst) => dst.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength)));
}

/** A [rows, cols] f32 matrix as a linear layer's weight. */
function matrixWeight(device: GPUDevice, data: Float32Array, rows: number, cols: number, label: string): GpuWeight {
  if (data.length !== rows * cols) throw new Error(`${label}: ${data.length} values, expected [${rows}, ${cols}]`);
  return { format: 'f32', rows, cols, groupSize: 0, parts: [{ rowStart: 0, rows, data: upload(device, data, label) }] };
}

/** w = g v / |v| over every dimension but the first (PyTorch's weight_norm, dim 0). */
function foldWeightNorm(g: Float32Array, v: Float32Array): Float32Array {
  const n = v.length / g.length;
  const out = new Float32Array(v.length);
  for (let o = 0; o < g.length; o++) {
    let ss = 0;
    for (let i = 0; i < n; i++) ss += v[o * n + i]! ** 2;
    const scale = g[o]! / Math.sqrt(ss);
    for (let i = 0; i < n; i++) out[o * n + i] = v[o * n + i]! * scale;
  }
  return out;
}

/** Loads a Kokoro checkpoint onto `gpu`. */
export async function loadKokoro(dir: string, gpu: Gpu): Promise<KokoroModel> {
  const files = readdirSync(dir);
  const only = (ext: string) => { const f = files.filter((n) => n.endsWith(ext)); return f.length === 1 ? f[0] : undefined; };
  const weightFile = WEIGHT_FILES.find((f) => files.includes(f)) ?? only('.safetensors') ?? only('.pth');
  if (!weightFile) throw new Error(`${dir}: no ${WEIGHT_FILES.join(' or ')} (nor a single .safetensors or .pth file)`);
  const cfg = kokoroConfig(JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Json, join(dir, 'config.json'));
  const voiceDir = join(dir, 'voices');
  const voiceFiles = existsSync(voiceDir) ? readdirSync(voiceDir).sort() : [];
  // A voice by its file's name, safetensors before PyTorch's .pt where both are there.
  const voices = new Map<string, string>();
  for (const ext of ['.pt', '.safetensors']) for (const f of voiceFiles) if (f.endsWith(ext)) voices.set(f.slice(0, -ext.length), join(voiceDir, f));
  const device = gpu.device;
  device.pushErrorScope('validation');
  const model = new KokoroGpu(cfg, new Ops(gpu), new Tensors(join(dir, weightFile)), voices);
  const error = await device.popErrorScope();
  if (error) throw new Error(`building the kokoro model: ${error.message}`);
  return model;
}

/** A call's scratch buffers, by role: reused while big enough, all destroyed after the call. */
class Scratch {
  private readonly byRole = new Map<string, GPUBuffer>();
  private readonly all: GPUBuffer[] = [];

  constructor(private readonly device: GPUDevice) {}

  get(role: string, floats: number): GPUBuffer {
    const have = this.byRole.get(role);
    if (have && have.size >= floats * 4) return have;
    const b = storageBuffer(this.device, floats * 4, role);
    this.byRole.set(role, b);
    this.all.push(b);
    return b;
  }

  /** A buffer holding `data`. */
  filled(role: string, data: Float32Array | Uint32Array): GPUBuffer {
    const b = upload(this.device, data, role);
    this.all.push(b);
    return b;
  }

  destroy(): void {
    for (const b of this.all) b.destroy();
  }
}

/** A pass's dispatches, in named stages (timed one by one when profiling). */
class Stages {
  readonly dispatches: Dispatch[] = [];
  readonly starts: Array<{ name: string; at: number }> = [];

  /** Starts stage `name`: what is pushed from here on belongs to it. */
  stage(name: string): void {
    this.starts.push({ name, at: this.dispatches.length });
  }

  push(...d: Dispatch[]): void {
    this.dispatches.push(...d);
  }
}

export class KokoroGpu implements KokoroModel {
  readonly sampleRate = SAMPLE_RATE;
  readonly vocab: ReadonlyMap<string, number>;
  readonly maxPhonemes: number;
  /** Set (to anything) before a call, holds that call's intermediate features after it (tests). */
  trace?: KokoroTrace;
  /** Milliseconds per stage, summed over the calls while set (bench/kokoro-rtf.ts): each stage then runs on its own and is waited for. */
  profile?: Map<string, number>;
  private readonly device: GPUDevice;
  private readonly w: ReturnType<KokoroGpu['load']>;
  /** The buffers and textures the weights live in (the device is the caller's). */
  private readonly owned: Array<GPUBuffer | GPUTexture> = [];
  private closed = false;
  /** Its largest activation fits one storage binding. */
  readonly maxFrames: number;
  readonly samplesPerFrame: number;
  private busy: Promise<unknown> = Promise.resolve();

  readonly voiceNames: readonly string[];

  constructor(readonly cfg: KokoroConfig, private readonly ops: Ops, t: Tensors, private readonly voices: ReadonlyMap<string, string>) {
    this.voiceNames = [...voices.keys()].sort();
    this.device = ops.gpu.device;
    this.vocab = cfg.vocab;
    this.maxPhonemes = cfg.bert.positions - 2;
    this.samplesPerFrame = 2 * cfg.istft.upsampleRates.reduce((a, b) => a * b, 1) * cfg.istft.hop;
    this.w = this.load(t);
    // Less one: the generator's last stage has one frame more than its duration frames give.
    this.maxFrames = Math.floor(ops.gpu.maxBinding / 4 / this.floatsPerFrame()) - 1;
  }

  /** f32 values per duration frame of the call's largest activation (a generator stage's, the decoder's, the STFT's, the source's, an LSTM's input projection). */
  private floatsPerFrame(): number {
    const { cfg, w } = this;
    const stftPerFrame = this.samplesPerFrame / cfg.istft.hop;
    const generator = w.decoder.stages.map((s, i) => s.channels * stftPerFrame / cfg.istft.upsampleRates.slice(i + 1).reduce((a, b) => a * b, 1));
    const decoder = Math.max(w.decoder.encode.cout + w.decoder.asrWidth + 2, ...w.decoder.decode.map((b) => (b.upsample ? 2 : 1) * Math.max(b.cin, b.cout)));
    return Math.max(...generator, decoder, stftPerFrame * (cfg.istft.nFft + 2), this.samplesPerFrame, 4 * cfg.hidden);
  }

  private load(t: Tensors) {
    // Every buffer and texture created here is the model's, destroyed by close().
    const owned = this.owned;
    const device = new Proxy(this.device, {
      get(target, prop) {
        if (prop === 'createBuffer') return (d: GPUBufferDescriptor) => { const b = target.createBuffer(d); owned.push(b); return b; };
        if (prop === 'createTexture') return (d: GPUTextureDescriptor) => { const x = target.createTexture(d); owned.push(x); return x; };
        const v = Reflect.get(target, prop) as unknown;
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    });
    const cfg = this.cfg;
    const C = cfg.hidden;
    const S = cfg.style;
    const H = C / 2;
    const vector = (name: string, length: number) => t.read(name, [length]);
    const bias = (values: Float32Array | undefined, n: number) => {
      const padded = new Float32Array(Math.ceil(n / 4) * 4);
      if (values) padded.set(values);
      return upload(device, padded, 'bias');
    };
    // A (weight-normed) convolution's weight in PyTorch's layout [a, b, taps] (a, b: out, in
    // for a convolution; in, out for a transposed one), from either stored layout.
    const convWeight = (prefix: string, a: number, b: number, taps: number): Float32Array => {
      const names = t.has(`${prefix}.weight_v`) ? [`${prefix}.weight_g`, `${prefix}.weight_v`]
        : t.has(`${prefix}.parametrizations.weight.original1`) ? [`${prefix}.parametrizations.weight.original0`, `${prefix}.parametrizations.weight.original1`]
        : undefined;
      const name = names ? names[1]! : `${prefix}.weight`;
      const shape = t.shape(name);
      const raw = t.read(name);
      let w: Float32Array;
      if (shape.length === 3 && shape[0] === a && shape[1] === b && shape[2] === taps) w = raw;
      else if (shape.length === 3 && shape[0] === a && shape[1] === taps && shape[2] === b) {
        w = new Float32Array(raw.length);
        for (let i = 0; i < a; i++) for (let k = 0; k < taps; k++) for (let j = 0; j < b; j++) w[(i * b + j) * taps + k] = raw[(i * taps + k) * b + j]!;
      } else throw new Error(`${t.path}: ${name} has shape [${shape.join(', ')}], expected [${a}, ${b}, ${taps}]`);
      return names ? foldWeightNorm(t.read(names[0]!), w) : w;
    };
    const outWidth = (prefix: string) => t.shape(t.has(`${prefix}.weight_v`) ? `${prefix}.weight_v` : t.has(`${prefix}.weight`) ? `${prefix}.weight` : `${prefix}.parametrizations.weight.original1`)[0]!;
    const conv = (prefix: string, cin: number, cout: number, taps: number, opts: { stride?: number; dilation?: number; pad?: number; bias?: boolean } = {}): Conv1dSpec => {
      const w = convWeight(prefix, cout, cin, taps);
      const cout4 = Math.ceil(cout / 4) * 4;
      const packed = new Float32Array(taps * cin * cout4);
      for (let o = 0; o < cout; o++) for (let c = 0; c < cin; c++) for (let k = 0; k < taps; k++) packed[(k * cin + c) * cout4 + o] = w[(o * cin + c) * taps + k]!;
      const dilation = opts.dilation ?? 1;
      return {
        weight: upload(device, packed, `${prefix}.weight`), bias: bias(opts.bias === false ? undefined : vector(`${prefix}.bias`, cout), cout),
        cin, cout, taps, stride: opts.stride, dilation, pad: opts.pad ?? (dilation * (taps - 1)) / 2,
      };
    };
    const convTranspose = (prefix: string, cin: number, cout: number, taps: number, stride: number, pad: number, outputPadding: number, depthwise: boolean): ConvTranspose1dSpec => {
      const w = convWeight(prefix, cin, depthwise ? 1 : cout, taps);
      const cout4 = Math.ceil(cout / 4) * 4;
      const packed = new Float32Array(taps * (depthwise ? 1 : cin) * cout4);
      if (depthwise) for (let c = 0; c < cin; c++) for (let k = 0; k < taps; k++) packed[k * cout4 + c] = w[c * taps + k]!;
      else for (let c = 0; c < cin; c++) for (let o = 0; o < cout; o++) for (let k = 0; k < taps; k++) packed[(k * cin + c) * cout4 + o] = w[(c * cout + o) * taps + k]!;
      return { weight: upload(device, packed, `${prefix}.weight`), bias: bias(vector(`${prefix}.bias`, cout), cout), cin, cout, taps, stride, pad, outputPadding, depthwise };
    };
    const linear = (prefix: string, rows: number, cols: number) => ({
      w: matrixWeight(device, t.read(`${prefix}.weight`, [rows, cols]), rows, cols, prefix),
      bias: upload(device, vector(`${prefix}.bias`, rows), `${prefix}.bias`),
    });

    const prosody = new StyleTable(S);
    const decoderStyle = new StyleTable(S);
    // An adaptive norm's style projection fc (to [1 + gamma, beta]) into `table`.
    const adaptive = (table: StyleTable, prefix: string, channels: number): number => {
      const b = vector(`${prefix}.fc.bias`, 2 * channels).slice();
      for (let i = 0; i < channels; i++) b[i]! += 1;
      return table.add(t.read(`${prefix}.fc.weight`, [2 * channels, S]), b);
    };
    const adaNorm = (table: StyleTable, prefix: string, channels: number): AdaNorm => {
      const affine = new Float32Array(2 * channels).fill(1, 0, channels);
      if (t.has(`${prefix}.norm.weight`)) {
        affine.set(vector(`${prefix}.norm.weight`, channels));
        affine.set(vector(`${prefix}.norm.bias`, channels), channels);
      }
      return { offset: adaptive(table, prefix, channels), norm: upload(device, affine, `${prefix}.norm`) };
    };
    const lstm = (prefix: string, inWidth: number, styled: boolean): Lstm => {
      const name = (n: string) => (t.has(`${prefix}.${n}`) ? `${prefix}.${n}` : `${prefix}.${MLX_LSTM[n]}`);
      const full = inWidth + (styled ? S : 0);
      const input = new Float32Array(8 * H * inWidth);
      const style = new Float32Array(8 * H * S);
      const biases = new Float32Array(8 * H);
      const recurrent = new Float32Array(8 * H * H);
      ['', '_reverse'].forEach((suffix, dir) => {
        const wi = t.read(name(`weight_ih_l0${suffix}`), [4 * H, full]);
        for (let r = 0; r < 4 * H; r++) {
          input.set(wi.subarray(r * full, r * full + inWidth), (dir * 4 * H + r) * inWidth);
          if (styled) style.set(wi.subarray(r * full + inWidth, (r + 1) * full), (dir * 4 * H + r) * S);
        }
        const bi = t.read(name(`bias_ih_l0${suffix}`), [4 * H]);
        const bh = t.read(name(`bias_hh_l0${suffix}`), [4 * H]);
        for (let r = 0; r < 4 * H; r++) biases[dir * 4 * H + r] = bi[r]! + bh[r]!;
        recurrent.set(t.read(name(`weight_hh_l0${suffix}`), [4 * H, H]), dir * 4 * H * H);
      });
      return {
        input: matrixWeight(device, input, 8 * H, inWidth, `${prefix}.input`), bias: upload(device, biases, `${prefix}.bias`),
        recurrent: upload(device, recurrent, `${prefix}.recurrent`), styleOffset: styled ? prosody.add(style, new Float32Array(8 * H)) : undefined,
      };
    };
    const adainBlock = (table: StyleTable, prefix: string, upsample: boolean): AdainBlock => {
      const cout = outWidth(`${prefix}.conv1`);
      const cin = t.shape(`${prefix}.norm1.fc.weight`)[0]! / 2;
      return {
        cin, cout, upsample,
        norm1: adaNorm(table, `${prefix}.norm1`, cin), norm2: adaNorm(table, `${prefix}.norm2`, cout),
        conv1: conv(`${prefix}.conv1`, cin, cout, 3), conv2: conv(`${prefix}.conv2`, cout, cout, 3),
        pool: upsample ? convTranspose(`${prefix}.pool`, cin, cin, 3, 2, 1, 1, true) : undefined,
        shortcut: cin !== cout ? conv(`${prefix}.conv1x1`, cin, cout, 1, { bias: false }) : undefined,
      };
    };
    // A Snake parameter: [1, channels, 1] (PyTorch) or any shape of `channels` values.
    const alpha = (name: string, channels: number) => {
      const v = t.read(name);
      if (v.length !== channels) throw new Error(`${t.path}: ${name} holds ${v.length} values, expected ${channels}`);
      return upload(device, v, name);
    };
    const snakeBlock = (table: StyleTable, prefix: string, channels: number, taps: number, dilations: number[]): SnakeBlock => ({
      channels, taps, dilations,
      steps: dilations.map((d, i) => ({
        norm1: adaNorm(table, `${prefix}.adain1.${i}`, channels), alpha1: alpha(`${prefix}.alpha1.${i}`, channels),
        conv1: conv(`${prefix}.convs1.${i}`, channels, channels, taps, { dilation: d }),
        norm2: adaNorm(table, `${prefix}.adain2.${i}`, channels), alpha2: alpha(`${prefix}.alpha2.${i}`, channels),
        conv2: conv(`${prefix}.convs2.${i}`, channels, channels, taps),
      })),
    });

    // PL-BERT.
    const { bert } = cfg;
    const E = bert.embedding;
    const B = bert.hidden;
    const l = 'bert.encoder.albert_layer_groups.0.albert_layers.0';
    const layerNorm = (prefix: string, width: number) => ({ weight: upload(device, vector(`${prefix}.weight`, width), prefix), bias: upload(device, vector(`${prefix}.bias`, width), prefix) });
    const qkv = ['query', 'key', 'value'].map((n) => `${l}.attention.${n}`);
    const albert = {
      words: matrixWeight(device, t.read('bert.embeddings.word_embeddings.weight', [cfg.tokens, E]), cfg.tokens, E, 'word_embeddings'),
      positions: matrixWeight(device, t.read('bert.embeddings.position_embeddings.weight', [bert.positions, E]), bert.positions, E, 'position_embeddings'),
      // Every token has type 0: the table's first row.
      type: matrixWeight(device, t.read('bert.embeddings.token_type_embeddings.weight').subarray(0, E), 1, E, 'token_type_embeddings'),
      embeddingNorm: layerNorm('bert.embeddings.LayerNorm', E),
      mapIn: linear('bert.encoder.embedding_hidden_mapping_in', B, E),
      qkv: {
        w: { ...matrixWeight(device, Float32Array.from(qkv.flatMap((n) => [...t.read(`${n}.weight`, [B, B])])), 3 * B, B, 'qkv'), segments: [B, B, B] },
        bias: upload(device, Float32Array.from(qkv.flatMap((n) => [...vector(`${n}.bias`, B)])), 'qkv.bias'),
      },
      dense: linear(`${l}.attention.dense`, B, B),
      attentionNorm: layerNorm(`${l}.attention.LayerNorm`, B),
      ffn: linear(`${l}.ffn`, bert.intermediate, B),
      ffnOut: linear(`${l}.ffn_output`, B, bert.intermediate),
      outputNorm: layerNorm(`${l}.full_layer_layer_norm`, B),
    };
    const bertEncoder = linear('bert_encoder', C, B);

    // The prosody predictor.
    const durationEncoder = Array.from({ length: cfg.layers }, (_, i) => ({
      lstm: lstm(`predictor.text_encoder.lstms.${2 * i}`, C, true),
      norm: adaptive(prosody, `predictor.text_encoder.lstms.${2 * i + 1}`, C),
    }));
    const predictorLstm = lstm('predictor.lstm', C, true);
    const durationProj = linear('predictor.duration_proj.linear_layer', cfg.maxDuration, C);
    const shared = lstm('predictor.shared', C, true);
    const branch = (name: string) => ({
      blocks: [0, 1, 2].map((i) => adainBlock(prosody, `predictor.${name}.${i}`, i === 1)),
      proj: conv(`predictor.${name}_proj`, H, 1, 1),
    });
    const f0 = branch('F0');
    const n = branch('N');

    // The text encoder.
    const textEncoder = {
      embedding: matrixWeight(device, t.read('text_encoder.embedding.weight', [cfg.tokens, C]), cfg.tokens, C, 'text_encoder.embedding'),
      cnn: Array.from({ length: cfg.layers }, (_, i) => {
        const p = `text_encoder.cnn.${i}`;
        const norm = t.has(`${p}.1.gamma`) ? [`${p}.1.gamma`, `${p}.1.beta`] : [`${p}.1.weight`, `${p}.1.bias`];
        return { conv: conv(`${p}.0`, C, C, cfg.textKernel), norm: upload(device, Float32Array.from([...vector(norm[0]!, C), ...vector(norm[1]!, C)]), `${p}.1`) };
      }),
      lstm: lstm('text_encoder.lstm', C, false),
    };

    // The decoder.
    const encode = adainBlock(decoderStyle, 'decoder.encode', false);
    if (encode.cin !== C + 2) throw new Error(`${t.path}: decoder.encode takes ${encode.cin} channels, expected hidden_dim + 2 (${C + 2})`);
    const asrWidth = outWidth('decoder.asr_res.0');
    const decode: AdainBlock[] = [];
    for (let i = 0; t.has(`decoder.decode.${i}.norm1.fc.weight`); i++) decode.push(adainBlock(decoderStyle, `decoder.decode.${i}`, t.has(`decoder.decode.${i}.pool.weight_v`) || t.has(`decoder.decode.${i}.pool.weight`) || t.has(`decoder.decode.${i}.pool.parametrizations.weight.original1`)));
    if (decode.length === 0) throw new Error(`${t.path}: no decoder.decode blocks`);
    const { istft } = cfg;
    const g = 'decoder.generator';
    const harmonicMerge = Float32Array.from([...t.read(`${g}.m_source.l_linear.weight`, [1, SOURCE.harmonics]), ...vector(`${g}.m_source.l_linear.bias`, 1)]);
    const stages = istft.upsampleRates.map((rate, i) => {
      const cin = istft.initialChannel >> i;
      const ch = istft.initialChannel >> (i + 1);
      const last = i + 1 === istft.upsampleRates.length;
      const strideF0 = istft.upsampleRates.slice(i + 1).reduce((a, b) => a * b, 1);
      const k = istft.upsampleKernels[i]!;
      return {
        up: convTranspose(`${g}.ups.${i}`, cin, ch, k, rate, (k - rate) / 2, 0, false),
        noiseConv: last ? conv(`${g}.noise_convs.${i}`, istft.nFft + 2, ch, 1) : conv(`${g}.noise_convs.${i}`, istft.nFft + 2, ch, 2 * strideF0, { stride: strideF0, pad: Math.floor((strideF0 + 1) / 2) }),
        noiseRes: snakeBlock(decoderStyle, `${g}.noise_res.${i}`, ch, last ? 11 : 7, [1, 3, 5]),
        resblocks: istft.resblockKernels.map((taps, j) => snakeBlock(decoderStyle, `${g}.resblocks.${i * istft.resblockKernels.length + j}`, ch, taps, istft.resblockDilations[j]!)),
        channels: ch,
      };
    });
    if (stages.some((s) => (s.up.pad !== Math.floor(s.up.pad)))) throw new Error('istftnet: upsample_kernel_sizes - upsample_rates must be even');
    const finalChannels = stages[stages.length - 1]!.channels;
    const decoder = {
      f0Conv: conv('decoder.F0_conv', 1, 1, 3, { stride: 2, pad: 1 }),
      nConv: conv('decoder.N_conv', 1, 1, 3, { stride: 2, pad: 1 }),
      asrRes: conv('decoder.asr_res.0', C, asrWidth, 1),
      encode, decode, asrWidth, stages,
      source: { ...SOURCE, upsample: this.samplesPerFrame / 2, sampleRate: SAMPLE_RATE, merge: upload(device, harmonicMerge, 'm_source') } satisfies HarmonicSource,
      post: conv(`${g}.conv_post`, finalChannels, istft.nFft + 2, 7, { pad: 3 }),
    };
    for (const [i, b] of decode.entries()) {
      const expected = (i === 0 ? encode.cout : decode[i - 1]!.cout) + (decode.slice(0, i).some((p) => p.upsample) ? 0 : asrWidth + 2);
      if (b.cin !== expected) throw new Error(`${t.path}: decoder.decode.${i} takes ${b.cin} channels, expected ${expected}`);
    }
    const lastDecode = decode[decode.length - 1]!;
    if (lastDecode.cout !== istft.initialChannel) throw new Error(`${t.path}: the decoder gives ${lastDecode.cout} channels, istftnet.upsample_initial_channel is ${istft.initialChannel}`);

    // The style projections, and the ALBERT attention's caches and position metadata.
    const table = (s: StyleTable, label: string) => ({ w: matrixWeight(device, s.weight(), s.rows, S, label), bias: upload(device, s.bias(), `${label}.bias`), rows: s.rows });
    const P = bert.positions;
    const blocks = Math.ceil(P / KV_BLOCK);
    const kvTexels = (blocks * KV_BLOCK * B) / 4;
    const attention = {
      cache: { k: kvCacheTexture(device, kvTexels, 'f32', 'bert.k_cache'), v: kvCacheTexture(device, kvTexels, 'f32', 'bert.v_cache') },
      tokenPos: upload(device, Uint32Array.from({ length: P }, (_, i) => i), 'bert.positions'),
      tokenTable: upload(device, new Uint32Array(P), 'bert.token_table'),
      blockTable: upload(device, Uint32Array.from({ length: blocks }, (_, i) => i), 'bert.block_table'),
      keyEnd: storageBuffer(device, P * 4, 'bert.key_end'),
      zeros: upload(device, new Uint32Array(P), 'bert.token_types'),
    };
    return {
      albert, bertEncoder, durationEncoder, predictorLstm, durationProj, shared, f0, n, textEncoder, decoder, attention,
      prosody: table(prosody, 'prosody_style'), decoderStyle: table(decoderStyle, 'decoder_style'),
    };
  }

  async voicePack(name: string): Promise<Float32Array> {
    const path = this.voices.get(name);
    if (!path) throw new Error(`no voice ${name} (voices: ${this.voiceNames.join(', ')})`);
    const tensors = readTensorFile(path);
    const [tensorName, tensor] = tensors.has('voice') ? ['voice', tensors.get('voice')!] : [...tensors][0] ?? [];
    if (!tensor) throw new Error(`${path}: no tensor`);
    const width = 2 * this.cfg.style;
    const count = tensor.shape.reduce((a, b) => a * b, 1);
    if (tensor.shape[tensor.shape.length - 1] !== width || count !== this.maxPhonemes * width) {
      throw new Error(`${path}: ${tensorName || 'the tensor'} has shape [${tensor.shape.join(', ')}], expected [${this.maxPhonemes}, 1, ${width}]`);
    }
    return tensor.read();
  }

  async synthesize(ids: readonly number[], style: Float32Array, speed: number, seed: number): Promise<{ audio: Float32Array; durations: Int32Array }> {
    if (ids.length < 1 || ids.length > this.maxPhonemes) throw new Error(`${ids.length} phonemes: 1 to ${this.maxPhonemes} are synthesised at a time`);
    for (const id of ids) if (!Number.isInteger(id) || id < 0 || id >= this.cfg.tokens) throw new Error(`phoneme id ${id} outside 0 .. ${this.cfg.tokens - 1}`);
    if (style.length !== 2 * this.cfg.style) throw new Error(`a style vector holds ${2 * this.cfg.style} values, got ${style.length}`);
    if (!(speed > 0) || !Number.isFinite(speed)) throw new Error(`speed must be a positive number, got ${speed}`);
    if (this.closed) throw new Error('the model is closed');
    // One call at a time: the ALBERT caches and the step uniform are the model's.
    const run = this.busy.then(() => this.run([0, ...ids, 0], style, speed, seed));
    this.busy = run.catch(() => undefined);
    return run;
  }

  /** Releases the weights once the call in progress is done; the device stays its owner's. */
  close(): void {
    this.closed = true;
    void this.busy.then(() => { for (const o of this.owned) o.destroy(); });
  }

  private async run(tokens: number[], style: Float32Array, speed: number, seed: number): Promise<{ audio: Float32Array; durations: Int32Array }> {
    const scratch = new Scratch(this.device);
    try {
      return await this.pass(scratch, tokens, style, speed, seed);
    } finally {
      scratch.destroy();
    }
  }

  /** Replays `pass` with the step's row count `rows`; `read` buffers come back as f32. */
  private async submit(pass: Stages, rows: number, read: Array<{ buffer: GPUBuffer; floats: number }> = []): Promise<Float32Array[]> {
    const shape = { tokens: rows, seqs: 1, bias: 0 };
    this.ops.writeStep(shape);
    const program = (from: number, to: number) => {
      const p = new Program();
      p.add(...pass.dispatches.slice(from, to));
      return p;
    };
    if (this.profile) {
      for (const [i, { name, at }] of pass.starts.entries()) {
        const start = performance.now();
        await program(at, pass.starts[i + 1]?.at ?? pass.dispatches.length).submit(this.ops.gpu, shape);
        await workDone(this.device.queue);
        this.profile.set(name, (this.profile.get(name) ?? 0) + performance.now() - start);
      }
    }
    const staging = read.map((r) => this.device.createBuffer({ label: 'kokoro_readback', size: Math.max(16, r.floats * 4), usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST }));
    const all = this.profile ? program(0, 0) : program(0, pass.dispatches.length);
    await all.submit(this.ops.gpu, shape, { finish: (encoder) => read.forEach((r, i) => encoder.copyBufferToBuffer(r.buffer, 0, staging[i]!, 0, r.floats * 4)) });
    const out = await Promise.all(staging.map(async (s, i) => new Float32Array(await mapRead(s), 0, read[i]!.floats)));
    for (const s of staging) s.destroy();
    return out;
  }

  private async pass(scratch: Scratch, tokens: number[], style: Float32Array, speed: number, seed: number): Promise<{ audio: Float32Array; durations: Int32Array }> {
    const { ops, cfg, w } = this;
    const T = tokens.length;
    const C = cfg.hidden;
    const S = cfg.style;
    const H = C / 2;
    const f32 = (role: string, n: number) => scratch.get(role, n);

    // The style projections: the decoder's from the style's first half, the predictor's from its second.
    const prosody = f32('prosody_affine', w.prosody.rows);
    const decoderAffine = f32('decoder_affine', w.decoderStyle.rows);
    const styleDecoder = scratch.filled('style_decoder', style.slice(0, S));
    const styleProsody = scratch.filled('style_prosody', style.slice(S));
    const styles = new Stages();
    styles.stage('style projections');
    styles.push(
      ...ops.linear('prosody_style', w.prosody.w, styleProsody, prosody, { bias: w.prosody.bias }),
      ...ops.linear('decoder_style', w.decoderStyle.w, styleDecoder, decoderAffine, { bias: w.decoderStyle.bias }),
    );
    await this.submit(styles, 1);

    // Phoneme-rate work: PL-BERT, the duration encoder and predictor, the text encoder.
    const ids = scratch.filled('tokens', Uint32Array.from(tokens));
    const { albert: a, attention: at } = w;
    const { bert } = cfg;
    const B = bert.hidden;
    this.device.queue.writeBuffer(at.keyEnd, 0, new Uint32Array(T).fill(T - 1));
    const emb = f32('bert.embeddings', T * bert.embedding);
    const bh = f32('bert.h', T * B);
    const [q, k, v, attn, tmp] = ['q', 'k', 'v', 'attn', 'tmp'].map((n) => f32(`bert.${n}`, T * B)) as [GPUBuffer, GPUBuffer, GPUBuffer, GPUBuffer, GPUBuffer];
    const ffn = f32('bert.ffn', T * bert.intermediate);
    const headDim = B / bert.heads;
    const phonemes = new Stages();
    phonemes.stage('PL-BERT');
    phonemes.push(
      ...ops.embedding(a.words, ids, emb),
      ...ops.embedding(a.positions, at.tokenPos, emb, 1, true),
      ...ops.embedding(a.type, at.zeros, emb, 1, true),
      ops.layernorm('bert.embeddings.LayerNorm', emb, a.embeddingNorm.weight, a.embeddingNorm.bias, { width: bert.embedding, eps: bert.eps }),
      ...ops.linear('bert.embedding_hidden_mapping_in', a.mapIn.w, emb, bh, { bias: a.mapIn.bias }),
    );
    for (let i = 0; i < bert.layers; i++) {
      phonemes.push(
        ...ops.linear('bert.qkv', a.qkv.w, bh, [q, k, v], { bias: a.qkv.bias }),
        ...ops.attention('bert.attention', { q, k, v, heads: bert.heads, kvHeads: bert.heads, cache: at.cache, blockSize: KV_BLOCK }, attn, { headDim, rotaryDim: 0, scale: headDim ** -0.5 }, at),
        ...ops.linear('bert.dense', a.dense.w, attn, tmp, { bias: a.dense.bias }),
        ops.layernorm('bert.attention.LayerNorm', bh, a.attentionNorm.weight, a.attentionNorm.bias, { width: B, eps: bert.eps, res: tmp }),
        ...ops.linear('bert.ffn', a.ffn.w, bh, ffn, { bias: a.ffn.bias }),
        ops.glu(ffn, undefined, bert.intermediate, 'gelu_tanh'),
        ...ops.linear('bert.ffn_output', a.ffnOut.w, ffn, tmp, { bias: a.ffnOut.bias }),
        ops.layernorm('bert.full_layer_layer_norm', bh, a.outputNorm.weight, a.outputNorm.bias, { width: B, eps: bert.eps, res: tmp }),
      );
    }
    const dBuffers = [f32('d_a', T * C), f32('d_b', T * C)] as const;
    let d: GPUBuffer = dBuffers[0];
    const pre = f32('lstm_pre', T * 8 * H);
    const lstmOut = f32('lstm_out', T * C);
    phonemes.push(...ops.linear('bert_encoder', w.bertEncoder.w, bh, d, { bias: w.bertEncoder.bias }));
    phonemes.stage('duration encoder and predictor (LSTMs)');
    const bilstm = (label: string, l: Lstm, x: GPUBuffer, out: View, frames: number, preBuffer: GPUBuffer) => [
      ...ops.linear(`${label}.input`, l.input, x, preBuffer, { bias: l.bias }),
      ops.lstm(label, preBuffer, l.recurrent, H, frames, out, l.styleOffset === undefined ? undefined : { buffer: prosody, offset: l.styleOffset }),
    ];
    for (const [i, layer] of w.durationEncoder.entries()) {
      const out = d === dBuffers[0] ? dBuffers[1] : dBuffers[0];
      phonemes.push(
        ...bilstm(`predictor.text_encoder.lstms.${2 * i}`, layer.lstm, d, rows(lstmOut, C), T, pre),
        ops.adaLayerNorm(`predictor.text_encoder.lstms.${2 * i + 1}`, rows(lstmOut, C), rows(out, C), T, C, prosody, layer.norm, 1),
      );
      d = out;
    }
    const durationLogits = f32('duration_logits', T * cfg.maxDuration);
    phonemes.push(
      ...bilstm('predictor.lstm', w.predictorLstm, d, rows(lstmOut, C), T, pre),
      ...ops.linear('predictor.duration_proj', w.durationProj.w, lstmOut, durationLogits, { bias: w.durationProj.bias }),
    );
    const te = f32('text_a', T * C);
    const te2 = f32('text_b', T * C);
    const textOut = f32('text_encoder', T * C);
    phonemes.stage('text encoder');
    phonemes.push(...ops.embedding(w.textEncoder.embedding, ids, te));
    for (const [i, layer] of w.textEncoder.cnn.entries()) {
      phonemes.push(
        ops.conv1d(`text_encoder.cnn.${i}`, layer.conv, rows(te, C), T, rows(te2, C)).dispatch,
        ops.adaLayerNorm(`text_encoder.cnn.${i}.norm`, rows(te2, C), rows(te, C), T, C, layer.norm, 0, LEAKY),
      );
    }
    phonemes.push(...bilstm('text_encoder.lstm', w.textEncoder.lstm, te, rows(textOut, C), T, pre));
    const trace = this.trace !== undefined;
    const [logits, traceText, traceDuration] = await this.submit(phonemes, T, [
      { buffer: durationLogits, floats: T * cfg.maxDuration },
      ...(trace ? [{ buffer: textOut, floats: T * C }, { buffer: d, floats: T * C }] : []),
    ]);
    const durations = frameCounts(logits!, T, cfg.maxDuration, speed);
    const F = durations.reduce((s, n) => s + n, 0);
    if (F > this.maxFrames) {
      const seconds = (n: number) => ((n * this.samplesPerFrame) / SAMPLE_RATE).toFixed(1);
      throw new Error(`${T - 2} phonemes at speed ${speed} last ${seconds(F)} s, past the ${seconds(this.maxFrames)} s one call synthesises on this device: synthesise shorter pieces`);
    }

    // Frame-rate work: the alignment expansion, F0 and N, the decoder.
    const index = new Uint32Array(F);
    for (let i = 0, f = 0; i < T; i++) for (let j = 0; j < durations[i]!; j++) index[f++] = i;
    const frameIndex = scratch.filled('frame_index', index);
    const en = f32('en', F * C);
    const preF = f32('lstm_pre_frames', F * 8 * H);
    const sharedOut = f32('shared', F * C);
    const frames = new Stages();
    frames.stage('alignment and shared LSTM');
    frames.push(ops.gatherRows('alignment', frameIndex, rows(d, C), rows(en, C), F, C), ...bilstm('predictor.shared', w.shared, en, rows(sharedOut, C), F, preF));
    frames.stage('F0 and N');
    const curve = (name: string, b: typeof w.f0) => {
      let x: View = rows(sharedOut, C);
      let n = F;
      b.blocks.forEach((block, i) => {
        const out = f32(`${name}.${i}`, 2 * F * block.cout);
        n = this.adainBlock(scratch, frames, `predictor.${name}.${i}`, block, x, n, rows(out, block.cout), prosody);
        x = rows(out, block.cout);
      });
      const y = f32(`${name}.curve`, n);
      frames.push(ops.conv1d(`predictor.${name}_proj`, b.proj, x, n, rows(y, 1)).dispatch);
      return { y, n };
    };
    const f0 = curve('F0', w.f0);
    const nCurve = curve('N', w.n);
    const dec = w.decoder;
    const R = dec.asrWidth;
    const encIn = f32('decoder.encode.in', F * (C + 2));
    frames.stage('decoder blocks');
    frames.push(
      ops.gatherRows('asr', frameIndex, rows(textOut, C), { buffer: encIn, stride: C + 2, offset: 0 }, F, C),
      ops.conv1d('decoder.F0_conv', dec.f0Conv, rows(f0.y, 1), f0.n, { buffer: encIn, stride: C + 2, offset: C }).dispatch,
      ops.conv1d('decoder.N_conv', dec.nConv, rows(nCurve.y, 1), nCurve.n, { buffer: encIn, stride: C + 2, offset: C + 1 }).dispatch,
    );
    // The decode blocks read [x, asr_res, F0, N]: two such buffers, the blocks writing x into each in turn.
    const D = dec.encode.cout;
    const wide = [0, 1].map((i) => f32(`decoder.wide.${i}`, F * (D + R + 2)));
    const wideView = (i: number): View => ({ buffer: wide[i]!, stride: D + R + 2, offset: 0 });
    for (const [i, buffer] of wide.entries()) {
      frames.push(
        ops.conv1d('decoder.asr_res', dec.asrRes, { buffer: encIn, stride: C + 2, offset: 0 }, F, { buffer, stride: D + R + 2, offset: D }).dispatch,
        ops.conv1d('decoder.F0_conv', dec.f0Conv, rows(f0.y, 1), f0.n, { buffer, stride: D + R + 2, offset: D + R }).dispatch,
        ops.conv1d('decoder.N_conv', dec.nConv, rows(nCurve.y, 1), nCurve.n, { buffer, stride: D + R + 2, offset: D + R + 1 }).dispatch,
      );
      if (i === 0) this.adainBlock(scratch, frames, 'decoder.encode', dec.encode, rows(encIn, C + 2), F, wideView(0), decoderAffine);
    }
    let x: View = wideView(0);
    let n = F;
    let current = 0;
    for (const [i, block] of dec.decode.entries()) {
      const into = block.upsample || dec.decode.slice(0, i).some((b) => b.upsample) ? rows(f32(`decoder.decode.${i}`, 2 * n * block.cout), block.cout) : wideView(1 - current);
      n = this.adainBlock(scratch, frames, `decoder.decode.${i}`, block, x, n, into, decoderAffine);
      x = into;
      current = 1 - current;
    }

    // The generator.
    const { istft } = cfg;
    const samples = f0.n * dec.source.upsample;
    const source = f32('source', samples);
    frames.stage('generator: harmonic source and STFT');
    const stftFrames = Math.floor(samples / istft.hop) + 1;
    const har = f32('har', stftFrames * (istft.nFft + 2));
    frames.push(
      ...ops.harmonicSource('decoder.generator.m_source', dec.source, f0.y, f0.n, f32('source_phase', f0.n * SOURCE.harmonics), source, seed),
      ops.stft('decoder.generator.stft', source, samples, har, istft.nFft, istft.hop),
    );
    for (const [i, stage] of dec.stages.entries()) {
      frames.stage(`generator: upsampling stage ${i}`);
      const last = i + 1 === dec.stages.length;
      const ch = stage.channels;
      const noiseFrames = Math.floor((stftFrames + 2 * stage.noiseConv.pad - stage.noiseConv.taps) / (stage.noiseConv.stride ?? 1)) + 1;
      const noise = f32(`generator.noise.${i}`, noiseFrames * ch);
      const sum = f32(`generator.x.${i}`, noiseFrames * ch);
      const mean = f32(`generator.mean.${i}`, noiseFrames * ch);
      frames.push(ops.conv1d(`decoder.generator.noise_convs.${i}`, stage.noiseConv, rows(har, istft.nFft + 2), stftFrames, rows(noise, ch)).dispatch);
      this.snakeBlock(scratch, frames, `decoder.generator.noise_res.${i}`, stage.noiseRes, rows(noise, ch), noiseFrames, rows(sum, ch), decoderAffine, {});
      const up = ops.convTranspose1d(`decoder.generator.ups.${i}`, stage.up, x, n, rows(sum, ch), { inSlope: 0.1, accumulate: true, reflectLeft: last });
      if (up.frames !== noiseFrames) throw new Error(`decoder.generator.ups.${i} gives ${up.frames} frames, the source ${noiseFrames}: the config's upsampling does not match the STFT's`);
      frames.push(up.dispatch);
      const kernels = stage.resblocks.length;
      stage.resblocks.forEach((block, j) => {
        this.snakeBlock(scratch, frames, `decoder.generator.resblocks.${i * kernels + j}`, block, rows(sum, ch), noiseFrames, rows(mean, ch), decoderAffine, {
          accumulate: j > 0, scale: j === kernels - 1 ? 1 / kernels : 1,
        });
      });
      x = rows(mean, ch);
      n = noiseFrames;
    }
    const spectrum = f32('spectrum', n * (istft.nFft + 2));
    const audioSamples = istft.hop * (n - 1);
    const audio = f32('audio', audioSamples);
    frames.stage('generator: conv_post and iSTFT');
    frames.push(
      ops.conv1d('decoder.generator.conv_post', dec.post, x, n, rows(spectrum, istft.nFft + 2), { inSlope: 0.01 }).dispatch,
      ops.istft('decoder.generator.istft', spectrum, n, audio, istft.nFft, istft.hop),
    );
    const [wave, traceF0, traceN, traceSource, traceHar, traceSpectrum] = await this.submit(frames, F, [
      { buffer: audio, floats: audioSamples },
      ...(trace ? [{ buffer: f0.y, floats: f0.n }, { buffer: nCurve.y, floats: nCurve.n }, { buffer: source, floats: samples }, { buffer: har, floats: stftFrames * (istft.nFft + 2) }, { buffer: spectrum, floats: n * (istft.nFft + 2) }] : []),
    ]);
    if (trace) this.trace = { textEncoder: traceText!, durationEncoder: traceDuration!, f0: traceF0!, n: traceN!, source: traceSource!, har: traceHar!, spectrum: traceSpectrum! };
    return { audio: wave!, durations };
  }

  /** Records an AdaIN residual block from x (frames rows) into y: (residual + shortcut) / sqrt 2. Returns its output frames. */
  private adainBlock(scratch: Scratch, out: Stages, label: string, b: AdainBlock, x: View, frames: number, y: View, affine: GPUBuffer): number {
    const { ops } = this;
    const leaky: NormActivation = { kind: 'leaky', slope: LEAKY };
    const n2 = b.upsample ? 2 * frames : frames;
    const normed = scratch.get('block.normed', frames * b.cin);
    out.push(ops.adain(`${label}.norm1`, x, rows(normed, b.cin), frames, b.cin, affine, b.norm1.offset, b.norm1.norm, leaky));
    let residualIn = rows(normed, b.cin);
    if (b.pool) {
      const pooled = scratch.get('block.pooled', n2 * b.cin);
      out.push(ops.convTranspose1d(`${label}.pool`, b.pool, residualIn, frames, rows(pooled, b.cin)).dispatch);
      residualIn = rows(pooled, b.cin);
    }
    const h = scratch.get('block.h', n2 * b.cout);
    const h2 = scratch.get('block.h2', n2 * b.cout);
    out.push(
      ops.conv1d(`${label}.conv1`, b.conv1, residualIn, n2, rows(h, b.cout)).dispatch,
      ops.adain(`${label}.norm2`, rows(h, b.cout), rows(h2, b.cout), n2, b.cout, affine, b.norm2.offset, b.norm2.norm, leaky),
    );
    const upsample = b.upsample ? 2 : 1;
    if (b.shortcut) out.push(ops.conv1d(`${label}.conv1x1`, b.shortcut, x, frames, y, { upsample }).dispatch);
    else {
      const index = scratch.filled(`${label}.shortcut_index`, Uint32Array.from({ length: n2 }, (_, i) => Math.floor(i / upsample)));
      out.push(ops.gatherRows(`${label}.shortcut`, index, x, y, n2, b.cin));
    }
    out.push(ops.conv1d(`${label}.conv2`, b.conv2, rows(h2, b.cout), n2, y, { accumulate: true, scale: Math.SQRT1_2 }).dispatch);
    return n2;
  }

  /**
   * Records a Snake AdaIN residual stack over x into y: y = x + sum of its steps' outputs
   * (each step adding to the running value), or with accumulate y += that; then y *= scale.
   */
  private snakeBlock(scratch: Scratch, out: Stages, label: string, b: SnakeBlock, x: View, frames: number, y: View, affine: GPUBuffer, opts: { accumulate?: boolean; scale?: number }): void {
    const { ops } = this;
    const c = b.channels;
    const a = rows(scratch.get('snake.a', frames * c), c);
    const t = rows(scratch.get('snake.b', frames * c), c);
    const running = rows(scratch.get('snake.running', frames * c), c);
    b.steps.forEach((s, i) => {
      const last = i + 1 === b.steps.length;
      out.push(
        ops.adain(`${label}.adain1.${i}`, i === 0 ? x : running, a, frames, c, affine, s.norm1.offset, s.norm1.norm, { kind: 'snake', alpha: s.alpha1 }),
        ops.conv1d(`${label}.convs1.${i}`, s.conv1, a, frames, t).dispatch,
        ops.adain(`${label}.adain2.${i}`, t, a, frames, c, affine, s.norm2.offset, s.norm2.norm, { kind: 'snake', alpha: s.alpha2 }),
      );
      const into = last ? y : running;
      const conv = (res: View | undefined, accumulate: boolean, scale: number) => ops.conv1d(`${label}.convs2.${i}`, s.conv2, a, frames, into, { res, accumulate, scale }).dispatch;
      if (i === 0) out.push(conv(x, last && opts.accumulate === true, last ? opts.scale ?? 1 : 1));
      else if (last) out.push(conv(running, opts.accumulate === true, opts.scale ?? 1));
      else out.push(conv(undefined, true, 1));
    });
  }
}

/** Frames per token: round(sum of sigmoid(logits) / speed) (half to even, as torch.round), at least 1. */
export function frameCounts(logits: Float32Array, tokens: number, maxDuration: number, speed: number): Int32Array {
  const out = new Int32Array(tokens);
  for (let i = 0; i < tokens; i++) {
    let sum = 0;
    for (let j = 0; j < maxDuration; j++) sum += 1 / (1 + Math.exp(-logits[i * maxDuration + j]!));
    const v = sum / speed;
    const floor = Math.floor(v);
    const rounded = v - floor === 0.5 ? (floor % 2 === 0 ? floor : floor + 1) : Math.round(v);
    out[i] = Math.max(1, rounded);
  }
  return out;
}
