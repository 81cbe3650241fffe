// Whisper (config.json model_type "whisper"): an encoder-decoder speech-to-text
// transformer. The encoder reads a 30 s window's log-mel spectrogram (./mel.ts) as [3000
// frames, num_mel_bins]: two 3-tap convolutions with GELU (the second of stride 2, so 1500
// positions), sinusoidal positions, pre-LayerNorm blocks of bidirectional attention and a
// GELU MLP, a final LayerNorm. The decoder embeds tokens plus learned positions; each
// pre-LayerNorm block has causal self-attention over its KV cache, cross-attention over
// the encoder's output, and a GELU MLP; a final LayerNorm and the head tied to the token
// embedding (proj_out where the checkpoint stores one). Cross-attention's keys and values
// are computed once per window, at the end of the encoder pass, into caches of their own.
// Tensor names are transformers' (model.encoder.*, model.decoder.*); mlx-whisper's layout
// (encoder.blocks.N.attn.query, ...) is mapped onto them (MLX_NAMES), its channels-last
// convolution weights read tap-major. The convolutions run as im2col.wgsl plus a linear
// layer, attention through the paged-KV kernels with identity block tables.
import { mapRead, textureBytes, type Gpu } from '../runtime/gpu.js';
import { Ops } from '../runtime/ops.js';
import { Program, type StepShape } from '../runtime/program.js';
import { filledBuffer, kvCacheTexture, storageBuffer, type GpuWeight } from '../runtime/tensors.js';
import type { KvLayer } from '../runtime/ops/attention.js';
import { Checkpoint, loadMatrix, loadVector } from './checkpoint.js';
import { configReader, readQuantization, type Json, type Quantization } from './config.js';

/** Mel frames per 30 s window (hop 160 at 16 kHz); the encoder's 2:1 stem makes them 1500 positions. */
export const WINDOW_FRAMES = 3000;
const KV_BLOCK = 16;
const KERNEL_TAPS = 3;

export interface WhisperConfig {
  dModel: number;
  encoderLayers: number;
  decoderLayers: number;
  encoderHeads: number;
  decoderHeads: number;
  encoderFfn: number;
  decoderFfn: number;
  melBins: number;
  /** Encoder positions per window (1500). */
  sourcePositions: number;
  /** Decoder positions (448): the longest prompt plus generated tokens. */
  targetPositions: number;
  vocab: number;
  quantization?: Quantization;
}

/** mlx-whisper's config.json fields (openai-whisper's ModelDimensions) by transformers' names; its MLP is 4 x d_model wide. */
function transformersFields(json: Json): Json {
  if (json.n_audio_state == null) return json;
  const d = json.n_audio_state;
  const ffn = typeof d === 'number' ? 4 * d : undefined;
  return {
    ...json, d_model: d, encoder_layers: json.n_audio_layer, decoder_layers: json.n_text_layer, encoder_attention_heads: json.n_audio_head,
    decoder_attention_heads: json.n_text_head, encoder_ffn_dim: ffn, decoder_ffn_dim: ffn, num_mel_bins: json.n_mels,
    max_source_positions: json.n_audio_ctx, max_target_positions: json.n_text_ctx, vocab_size: json.n_vocab,
  };
}

/** config.json of a Whisper checkpoint (transformers' or mlx-whisper's), checked against what the model implements. */
export function whisperConfig(json: Json, file = 'config.json'): WhisperConfig {
  json = transformersFields(json);
  const c = configReader(json, file);
  c.oneOf('activation_function', ['gelu'], 'gelu');
  c.oneOf('scale_embedding', [false], false);
  const dModel = c.count('d_model');
  const cfg: WhisperConfig = {
    dModel,
    encoderLayers: c.count('encoder_layers'),
    decoderLayers: c.count('decoder_layers'),
    encoderHeads: c.count('encoder_attention_heads'),
    decoderHeads: c.count('decoder_attention_heads'),
    encoderFfn: c.count('encoder_ffn_dim'),
    decoderFfn: c.count('decoder_ffn_dim'),
    melBins: c.count('num_mel_bins', 80),
    sourcePositions: c.count('max_source_positions', 1500),
    targetPositions: c.count('max_target_positions', 448),
    vocab: c.count('vocab_size'),
    quantization: readQuantization(json, file),
  };
  if (cfg.sourcePositions * 2 !== WINDOW_FRAMES) c.fail('max_source_positions', `must be ${WINDOW_FRAMES / 2} (30 s windows), got ${cfg.sourcePositions}`);
  if (cfg.melBins !== 80 && cfg.melBins !== 128) c.fail('num_mel_bins', `must be 80 or 128, got ${cfg.melBins}`);
  for (const [key, heads] of [['encoder_attention_heads', cfg.encoderHeads], ['decoder_attention_heads', cfg.decoderHeads]] as const) {
    const headDim = dModel / heads;
    if (!Number.isInteger(headDim) || headDim % 8 !== 0 || headDim > 256) c.fail(key, `gives head_dim ${headDim}: d_model / heads must be a multiple of 8, at most 256`);
  }
  return cfg;
}

/**
 * mlx-whisper's names for transformers' (first match applies, as Family.layouts): its
 * checkpoints hold `encoder.blocks.0.attn.query.weight` where transformers has
 * `model.encoder.layers.0.self_attn.q_proj.weight`.
 */
const MLX_NAMES: ReadonlyArray<readonly [RegExp, string]> = [
  [/^model\.(encoder|decoder)\.layers\.(\d+)\.self_attn\.(q|k|v)_proj\./, '$1.blocks.$2.attn.$3.'],
  [/^model\.(encoder|decoder)\.layers\.(\d+)\.self_attn\.out_proj\./, '$1.blocks.$2.attn.out.'],
  [/^model\.decoder\.layers\.(\d+)\.encoder_attn\.(q|k|v)_proj\./, 'decoder.blocks.$1.cross_attn.$2.'],
  [/^model\.decoder\.layers\.(\d+)\.encoder_attn\.out_proj\./, 'decoder.blocks.$1.cross_attn.out.'],
  [/^model\.(encoder|decoder)\.layers\.(\d+)\.self_attn_layer_norm\./, '$1.blocks.$2.attn_ln.'],
  [/^model\.decoder\.layers\.(\d+)\.encoder_attn_layer_norm\./, 'decoder.blocks.$1.cross_attn_ln.'],
  [/^model\.(encoder|decoder)\.layers\.(\d+)\.fc1\./, '$1.blocks.$2.mlp1.'],
  [/^model\.(encoder|decoder)\.layers\.(\d+)\.fc2\./, '$1.blocks.$2.mlp2.'],
  [/^model\.(encoder|decoder)\.layers\.(\d+)\.final_layer_norm\./, '$1.blocks.$2.mlp_ln.'],
  [/^model\.encoder\.layer_norm\./, 'encoder.ln_post.'],
  [/^model\.decoder\.layer_norm\./, 'decoder.ln.'],
  [/^model\.encoder\.conv(1|2)\./, 'encoder.conv$1.'],
  [/^model\.decoder\.embed_tokens\./, 'decoder.token_embedding.'],
];
/** mlx-whisper's expanded renames: q/k/v above are query/key/value there. */
const MLX_PROJ: Record<string, string> = { q: 'query', k: 'key', v: 'value' };

function mlxName(name: string): string {
  for (const [from, to] of MLX_NAMES) {
    if (from.test(name)) return name.replace(from, to).replace(/\.(attn|cross_attn)\.(q|k|v)\./, (_, a: string, p: string) => `.${a}.${MLX_PROJ[p]}.`);
  }
  return name;
}

/** openai-whisper's sinusoidal positions [length, channels]: sin of each timescale, then cos. */
function sinusoids(length: number, channels: number): Float32Array {
  const half = channels / 2;
  const step = Math.log(10000) / (half - 1);
  const out = new Float32Array(length * channels);
  for (let t = 0; t < length; t++) {
    for (let i = 0; i < half; i++) {
      const a = t * Math.exp(-step * i);
      out[t * channels + i] = Math.sin(a);
      out[t * channels + half + i] = Math.cos(a);
    }
  }
  return out;
}

/** The three recorded passes: the first convolution over 3000 frames, the rest of the encoder over 1500 positions (and the cross-attention caches), the decoder. */
interface WhisperPrograms {
  stem: Program;
  encoder: Program;
  decoder: Program;
}

/** What a pass's caller writes and reads. */
interface WhisperBuffers {
  mel: GPUBuffer;
  encoderOut: GPUBuffer;
  tokens: GPUBuffer;
  positions: GPUBuffer;
  seqLast: GPUBuffer;
  logits: GPUBuffer;
}

export class WhisperModel {
  private readonly logitsStaging: GPUBuffer;
  private encoderStaging?: GPUBuffer;

  private constructor(
    readonly cfg: WhisperConfig,
    readonly ops: Ops,
    /** The matrices' stored formats, e.g. "f16" or "q4 g64". */
    readonly weightFormat: string,
    /** Bytes of the weights on the GPU, as uploaded. */
    readonly weightBytes: number,
    private readonly programs: WhisperPrograms,
    private readonly buffers: WhisperBuffers,
  ) {
    this.logitsStaging = ops.gpu.device.createBuffer({ label: 'logits_readback', size: cfg.vocab * 4, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  }

  static async load(gpu: Gpu, dir: string, cfg: WhisperConfig): Promise<WhisperModel> {
    const device = gpu.device;
    const ckpt = new Checkpoint(dir);
    const mlx = ckpt.has('encoder.conv1.weight');
    // The patterns end at a dot: a matrix's prefix matches as its tensors' names do.
    const named = (name: string) => (mlx ? mlxName(`${name}.`).slice(0, -1) : name);
    const ops = new Ops(gpu);
    // Shader and binding mistakes surface here, at load, rather than as silent garbage.
    device.pushErrorScope('validation');
    const { dModel: D, melBins, sourcePositions: P, targetPositions: T } = cfg;
    const f32 = (n: number, label: string) => storageBuffer(device, n * 4, label);
    const u32s = (values: number[], label: string) => filledBuffer(device, values.length * 4, label, (dst) => dst.set(new Uint8Array(Uint32Array.from(values).buffer)));
    const range = (n: number, f: (i: number) => number) => Array.from({ length: n }, (_, i) => f(i));
    if (cfg.quantization) ops.reserveMatmulInput(4 * Math.max(P * Math.max(cfg.encoderFfn, KERNEL_TAPS * D), WINDOW_FRAMES * KERNEL_TAPS * melBins, T * cfg.decoderFfn));
    const formats = new Set<string>();
    let weightBytes = 0;
    const counted = (w: GpuWeight): GpuWeight => {
      for (const part of w.parts) for (const d of [part.data, part.affine]) if (d) weightBytes += 'size' in d ? d.size : textureBytes(d);
      return w;
    };
    const matrix = (prefix: string, rows: number, cols: number): GpuWeight => {
      const w = counted(loadMatrix(device, gpu, ckpt, [{ prefix: named(prefix), rows, cols }], cfg.quantization));
      formats.add(w.groupSize ? `${w.format} g${w.groupSize}` : w.format);
      return w;
    };
    const vector = (name: string, length: number) => {
      const v = loadVector(device, ckpt, [{ name: named(name), length }]);
      weightBytes += v.size;
      return v;
    };
    // The conv weights are [out, in, taps] (transformers) or [out, taps, in] (MLX): read as [out, in * taps].
    const convMatrix = (prefix: string, channels: number) => {
      const name = named(`${prefix}.weight`);
      const shape = ckpt.entry(name).info.shape;
      if (shape.length !== 3 || shape[0] !== D || shape[mlx ? 2 : 1] !== channels || shape[mlx ? 1 : 2] !== KERNEL_TAPS) {
        throw new Error(`${dir}: ${name} has shape [${shape.join(', ')}], expected ${mlx ? `[${D}, ${KERNEL_TAPS}, ${channels}]` : `[${D}, ${channels}, ${KERNEL_TAPS}]`}`);
      }
      const data = ckpt.readF32(name);
      const part = filledBuffer(device, data.byteLength, name, (dst) => dst.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength)));
      return counted({ format: 'f32', rows: D, cols: channels * KERNEL_TAPS, groupSize: 0, parts: [{ rowStart: 0, rows: D, data: part }] });
    };
    const table = (data: Float32Array, rows: number, label: string): GpuWeight => {
      if (data.length !== rows * D) throw new Error(`${dir}: ${label} holds ${data.length} values, expected [${rows}, ${D}]`);
      const part = filledBuffer(device, data.byteLength, label, (dst) => dst.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength)));
      return counted({ format: 'f32', rows, cols: D, groupSize: 0, parts: [{ rowStart: 0, rows, data: part }] });
    };
    // Keys and values of one window (the encoder's, cross-attention's) and one decoding (self-attention's), kept in f32.
    const cache = (rows: number, heads: number, label: string) => kvCacheTexture(device, (rows * heads * (D / heads)) / 4, 'f32', label);
    const layerNorm = (name: string, x: GPUBuffer, out?: GPUBuffer) =>
      ops.layernorm(name, x, vector(`${name}.weight`, D), vector(`${name}.bias`, D), { width: D, eps: 1e-5, out });
    const linear = (name: string, x: GPUBuffer, y: GPUBuffer, rows: number, cols: number, opts: { bias?: boolean; accumulate?: boolean; perSeq?: boolean } = {}) =>
      ops.linear(name, matrix(name, rows, cols), x, y, { bias: opts.bias === false ? undefined : vector(`${name}.bias`, rows), accumulate: opts.accumulate, perSeq: opts.perSeq });

    // Encoder buffers: one window's frames, then its positions.
    const mel = f32(WINDOW_FRAMES * melBins, 'mel');
    const cols = f32(Math.max(WINDOW_FRAMES * melBins, P * D) * KERNEL_TAPS, 'conv_columns');
    const conv1 = f32(WINDOW_FRAMES * D, 'conv1');
    const eh = f32(P * D, 'encoder_h');
    const exn = f32(P * D, 'encoder_xn');
    const [eq, ek, ev, eattn] = ['q', 'k', 'v', 'attn'].map((n) => f32(P * D, `encoder_${n}`)) as [GPUBuffer, GPUBuffer, GPUBuffer, GPUBuffer];
    const effn = f32(P * Math.max(cfg.encoderFfn, cfg.decoderFfn), 'encoder_ffn');
    const blocks = Math.ceil(Math.max(P, T) / KV_BLOCK);
    const identity = u32s(range(blocks, (i) => i), 'block_table');
    const enc = { tokenPos: u32s(range(P, (i) => i), 'encoder_pos'), tokenTable: u32s(range(P, () => 0), 'encoder_table'), blockTable: identity, keyEnd: u32s(range(P, () => P - 1), 'encoder_key_end') };
    const encCache = { k: cache(P, cfg.encoderHeads, 'encoder_k'), v: cache(P, cfg.encoderHeads, 'encoder_v') };

    const buffers: WhisperBuffers = {
      mel, encoderOut: eh, tokens: u32s(range(T, () => 0), 'tokens'), positions: u32s(range(T, (i) => i), 'positions'), seqLast: u32s([0], 'seq_last'), logits: f32(cfg.vocab, 'logits'),
    };
    const programs: WhisperPrograms = { stem: new Program(), encoder: new Program(), decoder: new Program() };
    // The stem's first convolution runs over the window's 3000 frames.
    programs.stem.add(
      ops.im2col('conv1.columns', mel, cols, { channels: melBins, framesIn: WINDOW_FRAMES, kernelSize: KERNEL_TAPS, stride: 1, pad: 1, tapMajor: mlx }),
      ...ops.linear('model.encoder.conv1', convMatrix('model.encoder.conv1', melBins), cols, conv1, { bias: vector('model.encoder.conv1.bias', D) }),
      ops.glu(conv1, undefined, D, 'gelu'),
    );
    const encHeadDim = D / cfg.encoderHeads;
    // Stored by transformers (mlx-whisper may store its _positional_embedding); else openai-whisper's sinusoids.
    const positions = ckpt.has('model.encoder.embed_positions.weight') ? matrix('model.encoder.embed_positions', P, D)
      : ckpt.has('encoder._positional_embedding') ? table(ckpt.readF32('encoder._positional_embedding'), P, 'encoder_positions')
      : table(sinusoids(P, D), P, 'encoder_positions');
    programs.encoder.add(
      ops.im2col('conv2.columns', conv1, cols, { channels: D, framesIn: WINDOW_FRAMES, kernelSize: KERNEL_TAPS, stride: 2, pad: 1, tapMajor: mlx }),
      ...ops.linear('model.encoder.conv2', convMatrix('model.encoder.conv2', D), cols, eh, { bias: vector('model.encoder.conv2.bias', D) }),
      ops.glu(eh, undefined, D, 'gelu'),
      ...ops.embedding(positions, enc.tokenPos, eh, 1, true),
    );
    for (let i = 0; i < cfg.encoderLayers; i++) {
      const l = `model.encoder.layers.${i}`;
      programs.encoder.add(
        layerNorm(`${l}.self_attn_layer_norm`, eh, exn),
        ...linear(`${l}.self_attn.q_proj`, exn, eq, D, D),
        ...linear(`${l}.self_attn.k_proj`, exn, ek, D, D, { bias: false }),
        ...linear(`${l}.self_attn.v_proj`, exn, ev, D, D),
        ...ops.attention(`${l}.self_attn`, { q: eq, k: ek, v: ev, heads: cfg.encoderHeads, kvHeads: cfg.encoderHeads, cache: encCache, blockSize: KV_BLOCK },
          eattn, { headDim: encHeadDim, rotaryDim: 0, scale: encHeadDim ** -0.5 }, enc),
        ...linear(`${l}.self_attn.out_proj`, eattn, eh, D, D, { accumulate: true }),
        layerNorm(`${l}.final_layer_norm`, eh, exn),
        ...linear(`${l}.fc1`, exn, effn, cfg.encoderFfn, D),
        ops.glu(effn, undefined, cfg.encoderFfn, 'gelu'),
        ...linear(`${l}.fc2`, effn, eh, D, cfg.encoderFfn, { accumulate: true }),
      );
    }
    programs.encoder.add(layerNorm('model.encoder.layer_norm', eh));

    // Cross-attention's keys and values of every decoder layer, from the encoder's output.
    const decHeadDim = D / cfg.decoderHeads;
    const cross = Array.from({ length: cfg.decoderLayers }, (_, i) => ({ k: cache(P, cfg.decoderHeads, `cross_k.${i}`), v: cache(P, cfg.decoderHeads, `cross_v.${i}`) }));
    cross.forEach((c, i) => {
      const a = `model.decoder.layers.${i}.encoder_attn`;
      programs.encoder.add(
        ...linear(`${a}.k_proj`, eh, ek, D, D, { bias: false }),
        ...linear(`${a}.v_proj`, eh, ev, D, D),
        ops.ropeKvWrite(`${a}.kv_write`, { q: eq, k: ek, v: ev, heads: cfg.decoderHeads, kvHeads: cfg.decoderHeads, cache: c, blockSize: KV_BLOCK },
          { headDim: decHeadDim, rotaryDim: 0 }, enc),
      );
    });

    // Decoder: up to targetPositions tokens of one sequence per pass.
    const { tokens, positions: pos, seqLast } = buffers;
    const dh = f32(T * D, 'decoder_h');
    const dxn = f32(T * D, 'decoder_xn');
    const [dq, dk, dv, dattn] = ['q', 'k', 'v', 'attn'].map((n) => f32(T * D, `decoder_${n}`)) as [GPUBuffer, GPUBuffer, GPUBuffer, GPUBuffer];
    const dffn = f32(T * cfg.decoderFfn, 'decoder_ffn');
    const dec = { tokenPos: pos, tokenTable: u32s(range(T, () => 0), 'decoder_table'), blockTable: identity };
    const crossKeys = { ...dec, keyEnd: u32s(range(T, () => P - 1), 'cross_key_end') };
    const embedTokens = matrix('model.decoder.embed_tokens', cfg.vocab, D);
    const decPositions = mlx
      ? table(ckpt.readF32('decoder.positional_embedding'), T, 'decoder_positions')
      : matrix('model.decoder.embed_positions', T, D);
    programs.decoder.add(...ops.embedding(embedTokens, tokens, dh), ...ops.embedding(decPositions, pos, dh, 1, true));
    for (let i = 0; i < cfg.decoderLayers; i++) {
      const l = `model.decoder.layers.${i}`;
      const self = { k: cache(T, cfg.decoderHeads, `self_k.${i}`), v: cache(T, cfg.decoderHeads, `self_v.${i}`) };
      const inputs = (cache: KvLayer) => ({ q: dq, k: dk, v: dv, heads: cfg.decoderHeads, kvHeads: cfg.decoderHeads, cache, blockSize: KV_BLOCK });
      const scores = { headDim: decHeadDim, rotaryDim: 0, scale: decHeadDim ** -0.5 };
      programs.decoder.add(
        layerNorm(`${l}.self_attn_layer_norm`, dh, dxn),
        ...linear(`${l}.self_attn.q_proj`, dxn, dq, D, D),
        ...linear(`${l}.self_attn.k_proj`, dxn, dk, D, D, { bias: false }),
        ...linear(`${l}.self_attn.v_proj`, dxn, dv, D, D),
        ...ops.attention(`${l}.self_attn`, inputs(self), dattn, scores, dec),
        ...linear(`${l}.self_attn.out_proj`, dattn, dh, D, D, { accumulate: true }),
        layerNorm(`${l}.encoder_attn_layer_norm`, dh, dxn),
        ...linear(`${l}.encoder_attn.q_proj`, dxn, dq, D, D),
        ...ops.cachedAttention(`${l}.encoder_attn`, inputs(cross[i]!), dattn, scores, crossKeys),
        ...linear(`${l}.encoder_attn.out_proj`, dattn, dh, D, D, { accumulate: true }),
        layerNorm(`${l}.final_layer_norm`, dh, dxn),
        ...linear(`${l}.fc1`, dxn, dffn, cfg.decoderFfn, D),
        ops.glu(dffn, undefined, cfg.decoderFfn, 'gelu'),
        ...linear(`${l}.fc2`, dffn, dh, D, cfg.decoderFfn, { accumulate: true }),
      );
    }
    const headIn = f32(D, 'head_in');
    const headWeight = ckpt.has('proj_out.weight') ? matrix('proj_out', cfg.vocab, D) : embedTokens;
    programs.decoder.add(
      layerNorm('model.decoder.layer_norm', dh),
      ops.pool(dh, seqLast, headIn, D, 'last'),
      ...ops.linear('head', headWeight, headIn, buffers.logits, { perSeq: true }),
    );
    ckpt.close();
    const error = await device.popErrorScope();
    if (error) throw new Error(`building the whisper forward pass: ${error.message}`);
    return new WhisperModel(cfg, ops, [...formats].join(', '), weightBytes, programs, buffers);
  }

  /** Runs one window's encoder on its mel frames ([3000, num_mel_bins], time-major) and fills the cross-attention caches. */
  async encode(frames: Float32Array): Promise<void> {
    if (frames.length !== WINDOW_FRAMES * this.cfg.melBins) throw new Error(`a window holds ${WINDOW_FRAMES} x ${this.cfg.melBins} mel values, got ${frames.length}`);
    this.ops.gpu.device.queue.writeBuffer(this.buffers.mel, 0, frames);
    await this.run(this.programs.stem, { tokens: WINDOW_FRAMES, seqs: 1, bias: 0 });
    await this.run(this.programs.encoder, { tokens: this.cfg.sourcePositions, seqs: 1, bias: 0 });
  }

  /** The last encode's output [1500, d_model] (for checks against a reference). */
  async encoderOutput(): Promise<Float32Array> {
    const bytes = this.cfg.sourcePositions * this.cfg.dModel * 4;
    this.encoderStaging ??= this.ops.gpu.device.createBuffer({ label: 'encoder_readback', size: bytes, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    const encoder = this.ops.gpu.device.createCommandEncoder();
    encoder.copyBufferToBuffer(this.buffers.encoderOut, 0, this.encoderStaging, 0, bytes);
    this.ops.gpu.device.queue.submit([encoder.finish()]);
    return new Float32Array(await mapRead(this.encoderStaging));
  }

  /**
   * Appends `tokens` at positions start .. start + tokens.length - 1 of the decoder's
   * sequence (over the last encoded window) and returns the next token's logits.
   */
  async decode(tokens: number[], start: number): Promise<Float32Array> {
    const n = tokens.length;
    if (n < 1 || start + n > this.cfg.targetPositions) throw new Error(`decoder positions ${start} .. ${start + n - 1} outside 0 .. ${this.cfg.targetPositions - 1}`);
    const queue = this.ops.gpu.device.queue;
    queue.writeBuffer(this.buffers.tokens, 0, Uint32Array.from(tokens));
    queue.writeBuffer(this.buffers.positions, 0, Uint32Array.from(tokens, (_, i) => start + i));
    queue.writeBuffer(this.buffers.seqLast, 0, Uint32Array.of(n - 1));
    await this.run(this.programs.decoder, { tokens: n, seqs: 1, bias: 0 }, (encoder) => encoder.copyBufferToBuffer(this.buffers.logits, 0, this.logitsStaging, 0, this.cfg.vocab * 4));
    return new Float32Array(await mapRead(this.logitsStaging));
  }

  /** Replays `program` for `shape`; `finish` records after it (Program.submit). */
  private run(program: Program, shape: StepShape, finish?: (encoder: GPUCommandEncoder) => void): Promise<void> {
    this.ops.writeStep(shape);
    return program.submit(this.ops.gpu, shape, { finish });
  }
}
