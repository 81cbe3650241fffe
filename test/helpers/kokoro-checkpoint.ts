// A random-weight Kokoro checkpoint with the real one's tensor names and config.json
// block (hexgrad/Kokoro-82M's, as mlx-community's safetensors conversion keeps them) at
// chosen widths, and voice packs under voices/. Convolutions are stored weight-normed
// (weight_g, weight_v) as the release stores them; the F0 projection puts F0 around 60 Hz,
// spread by about 60 Hz, so that the harmonic source has voiced and unvoiced frames, and
// the duration projection gives phonemes a few frames each.
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { crc32 } from 'node:zlib';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeSafetensors, type SafetensorsWriteTensor } from '../../src/models/safetensors.js';
import { rng } from './rng.js';

export interface KokoroShape {
  hidden: number;
  style: number;
  layers: number;
  maxDuration: number;
  textKernel: number;
  tokens: number;
  bert: { hidden: number; embedding: number; heads: number; intermediate: number; layers: number; positions: number };
  /** The decoder's widths: encode and decode blocks (the last upsamples to upsample_initial_channel), asr_res. */
  decoder: { width: number; blocks: number; asr: number };
  istft: { upsampleRates: number[]; upsampleKernels: number[]; initialChannel: number; resblockKernels: number[]; resblockDilations: number[][]; nFft: number; hop: number };
}

/** Kokoro-82M's shape (hexgrad/Kokoro-82M config.json; the decoder's widths from its tensors). */
export const KOKORO_82M: KokoroShape = {
  hidden: 512, style: 128, layers: 3, maxDuration: 50, textKernel: 5, tokens: 178,
  bert: { hidden: 768, embedding: 128, heads: 12, intermediate: 2048, layers: 12, positions: 512 },
  decoder: { width: 1024, blocks: 4, asr: 64 },
  istft: { upsampleRates: [10, 6], upsampleKernels: [20, 12], initialChannel: 512, resblockKernels: [3, 7, 11], resblockDilations: [[1, 3, 5], [1, 3, 5], [1, 3, 5]], nFft: 20, hop: 5 },
};

/** A small shape with every part of the real one (two upsampling stages, two resblock kernels). */
export const TINY_KOKORO: KokoroShape = {
  hidden: 16, style: 8, layers: 2, maxDuration: 8, textKernel: 5, tokens: 24,
  bert: { hidden: 16, embedding: 8, heads: 2, intermediate: 32, layers: 2, positions: 32 },
  decoder: { width: 24, blocks: 2, asr: 8 },
  istft: { upsampleRates: [3, 2], upsampleKernels: [5, 4], initialChannel: 16, resblockKernels: [3, 5], resblockDilations: [[1, 3], [1, 2]], nFft: 8, hop: 2 },
};

/** The phoneme symbols of the test vocabulary (ids 1 .. tokens - 1; 0 is the pad). */
const SYMBOLS = 'ˈˌ.,!? abdefhiklmnoprstuvwzæðŋɑɔəɛɪʃʊʌʒθ';

export function kokoroConfig(shape: KokoroShape): Record<string, unknown> {
  const vocab: Record<string, number> = {};
  for (let i = 1; i < shape.tokens && i <= SYMBOLS.length; i++) vocab[SYMBOLS[i - 1]!] = i;
  const b = shape.bert;
  return {
    istftnet: {
      upsample_kernel_sizes: shape.istft.upsampleKernels, upsample_rates: shape.istft.upsampleRates, gen_istft_hop_size: shape.istft.hop, gen_istft_n_fft: shape.istft.nFft,
      resblock_dilation_sizes: shape.istft.resblockDilations, resblock_kernel_sizes: shape.istft.resblockKernels, upsample_initial_channel: shape.istft.initialChannel,
    },
    dim_in: 64, dropout: 0.2, hidden_dim: shape.hidden, max_conv_dim: 512, max_dur: shape.maxDuration, multispeaker: true, n_layer: shape.layers, n_mels: 80,
    n_token: shape.tokens, style_dim: shape.style, text_encoder_kernel_size: shape.textKernel,
    plbert: { hidden_size: b.hidden, num_attention_heads: b.heads, intermediate_size: b.intermediate, max_position_embeddings: b.positions, num_hidden_layers: b.layers, dropout: 0.1, embedding_size: b.embedding },
    vocab,
  };
}

/** Every tensor of a checkpoint of `shape`, by name, with its shape and the scale of its random values. */
export function kokoroTensors(shape: KokoroShape): Array<{ name: string; shape: number[]; scale: number; offset?: number }> {
  const out: Array<{ name: string; shape: number[]; scale: number; offset?: number }> = [];
  const t = (name: string, dims: number[], scale: number, offset?: number) => out.push({ name, shape: dims, scale, offset });
  const C = shape.hidden;
  const S = shape.style;
  const H = C / 2;
  const b = shape.bert;
  const linear = (p: string, rows: number, cols: number, bias = true) => {
    t(`${p}.weight`, [rows, cols], 1 / Math.sqrt(cols));
    if (bias) t(`${p}.bias`, [rows], 0.1);
  };
  const conv = (p: string, cout: number, cin: number, taps: number, bias = true) => {
    t(`${p}.weight_g`, [cout, 1, 1], 0.3, 1);
    t(`${p}.weight_v`, [cout, cin, taps], 1);
    if (bias) t(`${p}.bias`, [cout], 0.1);
  };
  const lstm = (p: string, input: number) => {
    for (const s of ['', '_reverse']) {
      t(`${p}.weight_ih_l0${s}`, [4 * H, input], 1 / Math.sqrt(input));
      t(`${p}.weight_hh_l0${s}`, [4 * H, H], 1 / Math.sqrt(H));
      t(`${p}.bias_ih_l0${s}`, [4 * H], 0.1);
      t(`${p}.bias_hh_l0${s}`, [4 * H], 0.1);
    }
  };
  const adain = (p: string, channels: number) => {
    linear(`${p}.fc`, 2 * channels, S);
    t(`${p}.norm.weight`, [channels], 0.1, 1);
    t(`${p}.norm.bias`, [channels], 0.1);
  };
  const block = (p: string, cin: number, cout: number, upsample: boolean) => {
    conv(`${p}.conv1`, cout, cin, 3);
    conv(`${p}.conv2`, cout, cout, 3);
    adain(`${p}.norm1`, cin);
    adain(`${p}.norm2`, cout);
    if (cin !== cout) conv(`${p}.conv1x1`, cout, cin, 1, false);
    if (upsample) {
      t(`${p}.pool.weight_g`, [cin, 1, 1], 0.3, 1);
      t(`${p}.pool.weight_v`, [cin, 1, 3], 1);
      t(`${p}.pool.bias`, [cin], 0.1);
    }
  };
  const snake = (p: string, ch: number, taps: number, dilations: number[]) => {
    dilations.forEach((_, i) => {
      conv(`${p}.convs1.${i}`, ch, ch, taps);
      conv(`${p}.convs2.${i}`, ch, ch, taps);
      adain(`${p}.adain1.${i}`, ch);
      adain(`${p}.adain2.${i}`, ch);
      t(`${p}.alpha1.${i}`, [1, ch, 1], 0.2, 1);
      t(`${p}.alpha2.${i}`, [1, ch, 1], 0.2, 1);
    });
  };

  // PL-BERT (ALBERT).
  t('bert.embeddings.word_embeddings.weight', [shape.tokens, b.embedding], 1);
  t('bert.embeddings.position_embeddings.weight', [b.positions, b.embedding], 1);
  t('bert.embeddings.token_type_embeddings.weight', [2, b.embedding], 1);
  t('bert.embeddings.LayerNorm.weight', [b.embedding], 0.1, 1);
  t('bert.embeddings.LayerNorm.bias', [b.embedding], 0.1);
  linear('bert.encoder.embedding_hidden_mapping_in', b.hidden, b.embedding);
  const l = 'bert.encoder.albert_layer_groups.0.albert_layers.0';
  for (const n of ['query', 'key', 'value', 'dense']) linear(`${l}.attention.${n}`, b.hidden, b.hidden);
  t(`${l}.attention.LayerNorm.weight`, [b.hidden], 0.1, 1);
  t(`${l}.attention.LayerNorm.bias`, [b.hidden], 0.1);
  linear(`${l}.ffn`, b.intermediate, b.hidden);
  linear(`${l}.ffn_output`, b.hidden, b.intermediate);
  t(`${l}.full_layer_layer_norm.weight`, [b.hidden], 0.1, 1);
  t(`${l}.full_layer_layer_norm.bias`, [b.hidden], 0.1);
  linear('bert.pooler', b.hidden, b.hidden);
  linear('bert_encoder', C, b.hidden);

  // The prosody predictor.
  for (let i = 0; i < shape.layers; i++) {
    lstm(`predictor.text_encoder.lstms.${2 * i}`, C + S);
    linear(`predictor.text_encoder.lstms.${2 * i + 1}.fc`, 2 * C, S);
  }
  lstm('predictor.lstm', C + S);
  // About 3.5 frames per phoneme, as real speech has, whatever max_dur is: each logit
  // varies by about 2.6 (its weights times LSTM outputs of about 0.3, and its bias), so the
  // offset is the logit of the mean sigmoid wanted scaled up by sqrt(1 + pi 2.6^2 / 8) (the
  // probit approximation of a sigmoid's mean over a normal).
  const p = 3.5 / shape.maxDuration;
  t('predictor.duration_proj.linear_layer.weight', [shape.maxDuration, C], 8 / Math.sqrt(C));
  t('predictor.duration_proj.linear_layer.bias', [shape.maxDuration], 1, 1.9 * Math.log(p / (1 - p)));
  lstm('predictor.shared', C + S);
  for (const n of ['F0', 'N']) {
    block(`predictor.${n}.0`, C, C, false);
    block(`predictor.${n}.1`, C, H, true);
    block(`predictor.${n}.2`, H, H, false);
    t(`predictor.${n}_proj.weight`, [1, H, 1], n === 'F0' ? 170 / Math.sqrt(H) : 1);
    t(`predictor.${n}_proj.bias`, [1], n === 'F0' ? 10 : 0.1, n === 'F0' ? 60 : 0);
  }

  // The text encoder.
  t('text_encoder.embedding.weight', [shape.tokens, C], 1);
  for (let i = 0; i < shape.layers; i++) {
    conv(`text_encoder.cnn.${i}.0`, C, C, shape.textKernel);
    t(`text_encoder.cnn.${i}.1.gamma`, [C], 0.1, 1);
    t(`text_encoder.cnn.${i}.1.beta`, [C], 0.1);
  }
  lstm('text_encoder.lstm', C);

  // The decoder.
  const d = shape.decoder;
  const is = shape.istft;
  conv('decoder.F0_conv', 1, 1, 3);
  conv('decoder.N_conv', 1, 1, 3);
  conv('decoder.asr_res.0', d.asr, C, 1);
  block('decoder.encode', C + 2, d.width, false);
  for (let i = 0; i < d.blocks; i++) {
    const last = i + 1 === d.blocks;
    block(`decoder.decode.${i}`, d.width + d.asr + 2, last ? is.initialChannel : d.width, last);
  }
  const g = 'decoder.generator';
  t(`${g}.m_source.l_linear.weight`, [1, 9], 0.5);
  t(`${g}.m_source.l_linear.bias`, [1], 0.1);
  is.upsampleRates.forEach((_, i) => {
    const cin = is.initialChannel >> i;
    const ch = is.initialChannel >> (i + 1);
    const k = is.upsampleKernels[i]!;
    t(`${g}.ups.${i}.weight_g`, [cin, 1, 1], 0.3, 1);
    t(`${g}.ups.${i}.weight_v`, [cin, ch, k], 1);
    t(`${g}.ups.${i}.bias`, [ch], 0.1);
    const last = i + 1 === is.upsampleRates.length;
    const strideF0 = is.upsampleRates.slice(i + 1).reduce((a, b) => a * b, 1);
    t(`${g}.noise_convs.${i}.weight`, [ch, is.nFft + 2, last ? 1 : 2 * strideF0], 0.3);
    t(`${g}.noise_convs.${i}.bias`, [ch], 0.1);
    snake(`${g}.noise_res.${i}`, ch, last ? 11 : 7, [1, 3, 5]);
    is.resblockKernels.forEach((taps, j) => snake(`${g}.resblocks.${i * is.resblockKernels.length + j}`, ch, taps, is.resblockDilations[j]!));
  });
  // Small enough that exp() of the log-magnitudes stays moderate.
  t(`${g}.conv_post.weight_g`, [is.nFft + 2, 1, 1], 0.05, 0.3);
  t(`${g}.conv_post.weight_v`, [is.nFft + 2, is.initialChannel >> is.upsampleRates.length, 7], 1);
  t(`${g}.conv_post.bias`, [is.nFft + 2], 0.1);
  return out;
}

/** mlx-audio's names for PyTorch's LSTM tensors. */
const MLX_LSTM: Record<string, string> = {
  weight_ih_l0: 'Wx_forward', weight_hh_l0: 'Wh_forward', bias_ih_l0: 'bias_ih_forward', bias_hh_l0: 'bias_hh_forward',
  weight_ih_l0_reverse: 'Wx_backward', weight_hh_l0_reverse: 'Wh_backward', bias_ih_l0_reverse: 'bias_ih_backward', bias_hh_l0_reverse: 'bias_hh_backward',
};

/** A tensor as mlx-audio's sanitize leaves it: LSTMs renamed, LayerNorm gamma/beta as weight/bias, convolutions [out, taps, in]. */
function mlxTensor(t: SafetensorsWriteTensor): SafetensorsWriteTensor {
  const lstm = /\.(weight_ih_l0|weight_hh_l0|bias_ih_l0|bias_hh_l0)(_reverse)?$/.exec(t.name);
  if (lstm) return { ...t, name: t.name.replace(lstm[0], `.${MLX_LSTM[lstm[1]! + (lstm[2] ?? '')]}`) };
  if (/^text_encoder\.cnn\.\d+\.1\.gamma$/.test(t.name)) return { ...t, name: t.name.replace(/gamma$/, 'weight') };
  if (/^text_encoder\.cnn\.\d+\.1\.beta$/.test(t.name)) return { ...t, name: t.name.replace(/beta$/, 'bias') };
  const [a, b, k] = t.shape as [number, number, number];
  if (t.shape.length !== 3 || !/(weight_v|convs\.\d+\.weight|_proj\.weight)$/.test(t.name) || b === k) return t;
  const src = t.data as Float32Array;
  const data = new Float32Array(src.length);
  for (let i = 0; i < a; i++) for (let j = 0; j < b; j++) for (let tap = 0; tap < k; tap++) data[(i * k + tap) * b + j] = src[(i * b + j) * k + tap]!;
  return { ...t, shape: [a, k, b], data };
}

/** A zip of stored (uncompressed) entries, as torch.save writes. */
function zip(entries: Array<[string, Buffer]>): Buffer {
  const parts: Buffer[] = [];
  const central: Buffer[] = [];
  let offset = 0;
  for (const [name, data] of entries) {
    const n = Buffer.from(name);
    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0);
    local.writeUInt32LE(crc32(data), 14);
    local.writeUInt32LE(data.length, 18);
    local.writeUInt32LE(data.length, 22);
    local.writeUInt16LE(n.length, 26);
    const dir = Buffer.alloc(46);
    dir.writeUInt32LE(0x02014b50, 0);
    dir.writeUInt32LE(crc32(data), 16);
    dir.writeUInt32LE(data.length, 20);
    dir.writeUInt32LE(data.length, 24);
    dir.writeUInt16LE(n.length, 28);
    dir.writeUInt32LE(offset, 42);
    parts.push(local, n, data);
    central.push(dir, n);
    offset += 30 + n.length + data.length;
  }
  const dirBytes = Buffer.concat(central);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(entries.length, 8);
  end.writeUInt16LE(entries.length, 10);
  end.writeUInt32LE(dirBytes.length, 12);
  end.writeUInt32LE(offset, 16);
  return Buffer.concat([...parts, dirBytes, end]);
}

/**
 * torch.save's zip of `root` (pickle protocol 2): tensors as _rebuild_tensor_v2 over
 * FloatStorage entries, nested records as dicts (the top level) and OrderedDicts.
 */
function torchSave(root: Float32Array | Map<string, Map<string, SafetensorsWriteTensor>>, shapeOf?: number[]): Buffer {
  const out: Buffer[] = [Buffer.from([0x80, 2])];
  const storages: Array<[string, Buffer]> = [];
  const op = (...bytes: number[]) => out.push(Buffer.from(bytes));
  const str = (v: string) => { const b = Buffer.from(v); const len = Buffer.alloc(4); len.writeUInt32LE(b.length); out.push(Buffer.from([0x58]), len, b); };
  const int = (v: number) => { const b = Buffer.alloc(5); b[0] = 0x4a; b.writeInt32LE(v, 1); out.push(b); };
  const global = (module: string, name: string) => out.push(Buffer.from(`c${module}\n${name}\n`, 'latin1'));
  const orderedDict = () => { global('collections', 'OrderedDict'); op(0x29, 0x52); };
  const tensor = (data: Float32Array, dims: number[]) => {
    const key = String(storages.length);
    storages.push([key, Buffer.from(data.buffer, data.byteOffset, data.byteLength)]);
    global('torch._utils', '_rebuild_tensor_v2');
    op(0x28, 0x28);
    str('storage');
    global('torch', 'FloatStorage');
    str(key);
    str('cpu');
    int(data.length);
    op(0x74, 0x51);
    int(0);
    op(0x28);
    dims.forEach(int);
    op(0x74, 0x28);
    dims.forEach((_, i) => int(dims.slice(i + 1).reduce((a, b) => a * b, 1)));
    op(0x74, 0x89);
    orderedDict();
    op(0x74, 0x52);
  };
  if (root instanceof Float32Array) tensor(root, shapeOf!);
  else {
    op(0x7d, 0x28);
    for (const [module, tensors] of root) {
      str(module);
      orderedDict();
      op(0x28);
      for (const [name, t] of tensors) {
        str(name);
        tensor(t.data as Float32Array, t.shape);
      }
      op(0x75);
    }
    op(0x75);
  }
  op(0x2e);
  return zip([['archive/data.pkl', Buffer.concat(out)], ...storages.map(([k, b]): [string, Buffer] => [`archive/data/${k}`, b]), ['archive/version', Buffer.from('3\n')]]);
}

/**
 * Writes a checkpoint of `shape` (random weights from `seed`) and `voices` voice packs into
 * a new temporary directory; `format`: mlx-audio's layout of the same weights, or hexgrad's
 * release as torch.save wrote it (kokoro-v1_0.pth, a state dict per module with
 * DataParallel's `module.` prefix, and voices/*.pt).
 */
export function makeKokoroCheckpoint(shape: KokoroShape, opts: { seed?: number; voices?: string[]; format?: 'mlx' | 'pth' } = {}): string {
  const dir = mkdtempSync(join(tmpdir(), 'kokoro-'));
  const rand = rng(opts.seed ?? 1);
  const normal = () => Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand());
  const tensors: SafetensorsWriteTensor[] = kokoroTensors(shape).map(({ name, shape: dims, scale, offset }) => {
    const data = new Float32Array(dims.reduce((a, b) => a * b, 1));
    for (let i = 0; i < data.length; i++) data[i] = (offset ?? 0) + scale * normal();
    return { name, dtype: 'F32', shape: dims, data };
  });
  if (opts.format === 'pth') {
    const modules = new Map<string, Map<string, SafetensorsWriteTensor>>();
    for (const t of tensors) {
      const [module, ...rest] = t.name.split('.');
      if (!modules.has(module!)) modules.set(module!, new Map());
      modules.get(module!)!.set(`module.${rest.join('.')}`, t);
    }
    writeFileSync(join(dir, 'kokoro-v1_0.pth'), torchSave(modules));
  } else {
    writeSafetensors(join(dir, 'kokoro-v1_0.safetensors'), opts.format === 'mlx' ? tensors.map(mlxTensor) : tensors);
  }
  writeFileSync(join(dir, 'config.json'), JSON.stringify(kokoroConfig(shape), null, 2));
  mkdirSync(join(dir, 'voices'));
  const rows = shape.bert.positions - 2;
  for (const voice of opts.voices ?? []) {
    const data = new Float32Array(rows * 2 * shape.style);
    for (let i = 0; i < data.length; i++) data[i] = 0.3 * normal();
    if (opts.format === 'pth') writeFileSync(join(dir, 'voices', `${voice}.pt`), torchSave(data, [rows, 1, 2 * shape.style]));
    else writeSafetensors(join(dir, 'voices', `${voice}.safetensors`), [{ name: 'voice', dtype: 'F32', shape: [rows, 1, 2 * shape.style], data }]);
  }
  return dir;
}
