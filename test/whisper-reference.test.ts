// Whisper on the GPU against a CPU reference written here from the published architecture
// (llama.cpp cannot serve Whisper): openai-whisper's / transformers' log-mel front end (a
// direct DFT, librosa's Slaney filterbank), the encoder and decoder in float64 with exact
// GELU, every decoder step recomputed from scratch (no KV cache), and openai-whisper's
// greedy decoding rules (blank and special-token suppression, timestamp pairing and
// order, the 1 s first-timestamp limit). On the tiny random checkpoint of
// helpers/whisper-checkpoint.ts (d_model 64, 2 + 2 layers, 80 mel bins):
// - mel features within 2e-4 of the reference (float32 arithmetic on values of order 1, the
//   log10 of powers summed over up to ~20 bins: a few ulps of 1e-7 each);
// - the encoder's output within 2e-3 (LayerNormed, so of order 1: 1500-key softmaxes and
//   seven float32 matmul layers accumulate about 1e-4 of relative error, with margin for the
//   erf approximation's 1.5e-7 through GELU);
// - the greedy tokens equal, with a forced language, with the language detected, and with
//   timestamps (the first window's segments sliced as openai-whisper slices them).
// The mel front end is also checked on hand-worked inputs: silence, a pure tone on an FFT
// bin, and the reflect padding at both window edges. And the same weights in mlx-whisper's
// layout (its names, channels-last convolutions, computed sinusoids, ModelDimensions config,
// weights.safetensors) decode the same tokens as in transformers'; and the checkpoint
// quantized to MLX's 8-bit affine format (group 64) matches the reference run on its
// dequantized weights: encoder output within the same 2e-3, greedy tokens equal.
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadTranscriber, type Transcriber } from '../src/engine/transcriber.js';
import { LogMel } from '../src/models/mel.js';
import { dequantizeAffine, quantizeCheckpoint } from '../src/models/quantize.js';
import { listCheckpointTensors, readSafetensorsBytes, readTensorF32, writeSafetensors } from '../src/models/safetensors.js';
import { makeWhisperCheckpoint, TINY_WHISPER, type WhisperIds } from './helpers/whisper-checkpoint.js';
import { testSignal } from './helpers/audio-fixtures.js';

const SR = 16000;
const NFFT = 400;
const HOP = 160;
const FRAMES = 3000;

/** librosa.filters.mel(sr=16000, n_fft=400, n_mels, htk=False, norm="slaney"), [mels][201]. */
function referenceFilters(mels: number): number[][] {
  const fSp = 200 / 3;
  const logStep = Math.log(6.4) / 27;
  const toMel = (f: number) => (f < 1000 ? f / fSp : 15 + Math.log(f / 1000) / logStep);
  const toHz = (m: number) => (m < 15 ? m * fSp : 1000 * Math.exp(logStep * (m - 15)));
  const points = Array.from({ length: mels + 2 }, (_, i) => toHz((i * toMel(SR / 2)) / (mels + 1)));
  const freqs = Array.from({ length: NFFT / 2 + 1 }, (_, k) => (k * SR) / NFFT);
  return Array.from({ length: mels }, (_, m) => {
    const [lo, mid, hi] = [points[m]!, points[m + 1]!, points[m + 2]!];
    return freqs.map((f) => Math.max(0, Math.min((f - lo) / (mid - lo), (hi - f) / (hi - mid))) * (2 / (hi - lo)));
  });
}

/** Log-mel of one 30 s window starting at `start`: explicit zero padding, reflect padding and a direct DFT. */
function referenceMel(audio: Float32Array, start: number, mels: number): Float64Array {
  const x = new Float64Array(480000);
  for (let i = 0; i < x.length && start + i < audio.length; i++) x[i] = audio[start + i]!;
  const padded = new Float64Array(x.length + NFFT);
  for (let i = 0; i < padded.length; i++) {
    const j = i - NFFT / 2;
    padded[i] = x[j < 0 ? -j : j >= x.length ? 2 * x.length - 2 - j : j]!;
  }
  const window = Array.from({ length: NFFT }, (_, n) => 0.5 * (1 - Math.cos((2 * Math.PI * n) / NFFT)));
  const cos = Array.from({ length: NFFT }, (_, n) => Math.cos((2 * Math.PI * n) / NFFT));
  const sin = Array.from({ length: NFFT }, (_, n) => Math.sin((2 * Math.PI * n) / NFFT));
  const filters = referenceFilters(mels);
  const out = new Float64Array(FRAMES * mels);
  const frame = new Float64Array(NFFT);
  const power = new Float64Array(NFFT / 2 + 1);
  for (let t = 0; t < FRAMES; t++) {
    let any = false;
    for (let n = 0; n < NFFT; n++) any = (frame[n] = padded[t * HOP + n]! * window[n]!) !== 0 || any;
    for (let k = 0; k <= NFFT / 2; k++) {
      let re = 0;
      let im = 0;
      if (any) {
        for (let n = 0; n < NFFT; n++) {
          const a = (k * n) % NFFT;
          re += frame[n]! * cos[a]!;
          im -= frame[n]! * sin[a]!;
        }
      }
      power[k] = re * re + im * im;
    }
    for (let m = 0; m < mels; m++) {
      let e = 0;
      for (let k = 0; k <= NFFT / 2; k++) e += filters[m]![k]! * power[k]!;
      out[t * mels + m] = Math.log10(Math.max(e, 1e-10));
    }
  }
  let max = -Infinity;
  for (const v of out) max = Math.max(max, v);
  return out.map((v) => (Math.max(v, max - 8) + 4) / 4);
}

/** erf to ~1e-14 (its Maclaurin series for |x| < 3, else 1 - erfc's continued fraction). */
function erf(x: number): number {
  const a = Math.abs(x);
  let r: number;
  if (a < 3) {
    let term = a;
    let sum = a;
    for (let n = 1; n < 100; n++) {
      term *= (-a * a) / n;
      sum += term / (2 * n + 1);
    }
    r = (2 / Math.sqrt(Math.PI)) * sum;
  } else {
    let f = 0;
    for (let n = 60; n >= 1; n--) f = n / 2 / (a + f);
    r = 1 - Math.exp(-a * a) / Math.sqrt(Math.PI) / (a + f);
  }
  return x < 0 ? -r : r;
}
const gelu = (x: number) => 0.5 * x * (1 + erf(x / Math.SQRT2));

type Weights = Map<string, Float64Array>;

/** The transformers WhisperForConditionalGeneration forward pass, float64, row-major [rows, d]. */
class ReferenceWhisper {
  readonly d = TINY_WHISPER.dModel;
  readonly heads = TINY_WHISPER.heads;

  constructor(private readonly w: Weights, readonly vocab: number) {}

  private t(name: string): Float64Array {
    const v = this.w.get(name);
    if (!v) throw new Error(`no tensor ${name}`);
    return v;
  }

  /** y = x W^T + b for x [n, inDim], W [outDim, inDim]. */
  linear(x: Float64Array, n: number, name: string, inDim: number, outDim: number, bias = true): Float64Array {
    const W = this.t(`${name}.weight`);
    const b = bias ? this.t(`${name}.bias`) : undefined;
    const y = new Float64Array(n * outDim);
    for (let i = 0; i < n; i++) {
      for (let o = 0; o < outDim; o++) {
        let s = b ? b[o]! : 0;
        for (let j = 0; j < inDim; j++) s += x[i * inDim + j]! * W[o * inDim + j]!;
        y[i * outDim + o] = s;
      }
    }
    return y;
  }

  layerNorm(x: Float64Array, n: number, name: string): Float64Array {
    const { d } = this;
    const g = this.t(`${name}.weight`);
    const b = this.t(`${name}.bias`);
    const y = new Float64Array(x.length);
    for (let i = 0; i < n; i++) {
      const row = x.subarray(i * d, (i + 1) * d);
      const mean = row.reduce((a, v) => a + v, 0) / d;
      const variance = row.reduce((a, v) => a + (v - mean) ** 2, 0) / d;
      for (let j = 0; j < d; j++) y[i * d + j] = ((row[j]! - mean) / Math.sqrt(variance + 1e-5)) * g[j]! + b[j]!;
    }
    return y;
  }

  /** Multi-head attention of nq queries over nk keys; `causal` masks keys after each query's index. */
  attention(x: Float64Array, nq: number, kv: { k: Float64Array; v: Float64Array; n: number }, name: string, causal: boolean): Float64Array {
    const { d, heads } = this;
    const hd = d / heads;
    const q = this.linear(x, nq, `${name}.q_proj`, d, d);
    const out = new Float64Array(nq * d);
    const scores = new Float64Array(kv.n);
    for (let h = 0; h < heads; h++) {
      for (let i = 0; i < nq; i++) {
        const last = causal ? i : kv.n - 1;
        let max = -Infinity;
        for (let j = 0; j <= last; j++) {
          let s = 0;
          for (let c = 0; c < hd; c++) s += q[i * d + h * hd + c]! * kv.k[j * d + h * hd + c]!;
          scores[j] = s / Math.sqrt(hd);
          max = Math.max(max, scores[j]!);
        }
        let total = 0;
        for (let j = 0; j <= last; j++) total += scores[j] = Math.exp(scores[j]! - max);
        for (let c = 0; c < hd; c++) {
          let s = 0;
          for (let j = 0; j <= last; j++) s += scores[j]! * kv.v[j * d + h * hd + c]!;
          out[i * d + h * hd + c] = s / total;
        }
      }
    }
    return this.linear(out, nq, `${name}.out_proj`, d, d);
  }

  keysValues(x: Float64Array, n: number, name: string) {
    return { k: this.linear(x, n, `${name}.k_proj`, this.d, this.d, false), v: this.linear(x, n, `${name}.v_proj`, this.d, this.d), n };
  }

  private add(a: Float64Array, b: Float64Array): Float64Array {
    return a.map((v, i) => v + b[i]!);
  }

  private mlp(x: Float64Array, n: number, l: string): Float64Array {
    const h = this.linear(this.layerNorm(x, n, `${l}.final_layer_norm`), n, `${l}.fc1`, this.d, TINY_WHISPER.ffn).map(gelu);
    return this.add(x, this.linear(h, n, `${l}.fc2`, TINY_WHISPER.ffn, this.d));
  }

  /** Conv1d, kernel 3, padding 1, of x [framesIn, cin] into [framesOut, d], then GELU. */
  private conv(x: Float64Array, framesIn: number, cin: number, stride: number, name: string): Float64Array {
    const { d } = this;
    const W = this.t(`${name}.weight`);
    const b = this.t(`${name}.bias`);
    const framesOut = Math.floor((framesIn + 2 - 3) / stride) + 1;
    const y = new Float64Array(framesOut * d);
    for (let t = 0; t < framesOut; t++) {
      for (let o = 0; o < d; o++) {
        let s = b[o]!;
        for (let k = 0; k < 3; k++) {
          const at = t * stride + k - 1;
          if (at < 0 || at >= framesIn) continue;
          for (let c = 0; c < cin; c++) s += W[(o * cin + c) * 3 + k]! * x[at * cin + c]!;
        }
        y[t * d + o] = gelu(s);
      }
    }
    return y;
  }

  encode(mel: Float64Array): Float64Array {
    const { d } = this;
    const mels = TINY_WHISPER.melBins;
    let x = this.conv(this.conv(mel, FRAMES, mels, 1, 'model.encoder.conv1'), FRAMES, d, 2, 'model.encoder.conv2');
    const n = FRAMES / 2;
    x = this.add(x, this.t('model.encoder.embed_positions.weight'));
    for (let i = 0; i < TINY_WHISPER.encoderLayers; i++) {
      const l = `model.encoder.layers.${i}`;
      const xn = this.layerNorm(x, n, `${l}.self_attn_layer_norm`);
      x = this.add(x, this.attention(xn, n, this.keysValues(xn, n, `${l}.self_attn`), `${l}.self_attn`, false));
      x = this.mlp(x, n, l);
    }
    return this.layerNorm(x, n, 'model.encoder.layer_norm');
  }

  /** The next-token logits after `tokens` (from position 0), over the encoder output. */
  logits(tokens: number[], cross: Array<{ k: Float64Array; v: Float64Array; n: number }>): Float64Array {
    const { d } = this;
    const n = tokens.length;
    const embed = this.t('model.decoder.embed_tokens.weight');
    const pos = this.t('model.decoder.embed_positions.weight');
    let x: Float64Array = new Float64Array(n * d);
    tokens.forEach((id, i) => {
      for (let j = 0; j < d; j++) x[i * d + j] = embed[id * d + j]! + pos[i * d + j]!;
    });
    for (let i = 0; i < TINY_WHISPER.decoderLayers; i++) {
      const l = `model.decoder.layers.${i}`;
      const xn = this.layerNorm(x, n, `${l}.self_attn_layer_norm`);
      x = this.add(x, this.attention(xn, n, this.keysValues(xn, n, `${l}.self_attn`), `${l}.self_attn`, true));
      x = this.add(x, this.attention(this.layerNorm(x, n, `${l}.encoder_attn_layer_norm`), n, cross[i]!, `${l}.encoder_attn`, false));
      x = this.mlp(x, n, l);
    }
    const last = this.layerNorm(x, n, 'model.decoder.layer_norm').subarray((n - 1) * d);
    return Float64Array.from({ length: this.vocab }, (_, t) => {
      let s = 0;
      for (let j = 0; j < d; j++) s += last[j]! * embed[t * d + j]!;
      return s;
    });
  }

  crossKeys(encoded: Float64Array) {
    return Array.from({ length: TINY_WHISPER.decoderLayers }, (_, i) => this.keysValues(encoded, FRAMES / 2, `model.decoder.layers.${i}.encoder_attn`));
  }
}

/** openai-whisper's greedy decode of one window (its DecodingTask with the logit filters), the end token excluded. */
function referenceDecode(model: ReferenceWhisper, cross: ReturnType<ReferenceWhisper['crossKeys']>, ids: WhisperIds, generation: { suppress_tokens: number[]; begin_suppress_tokens: number[] }, prompt: number[], timestamps: boolean): number[] {
  const tokens: number[] = [];
  const tsBegin = ids.timestampBegin;
  for (let step = 0; step < TINY_WHISPER.targetPositions / 2; step++) {
    const logits = model.logits([...prompt, ...tokens], cross);
    const ban = (from: number, to = from + 1) => {
      for (let i = from; i < to && i < logits.length; i++) logits[i] = -Infinity;
    };
    if (tokens.length === 0) generation.begin_suppress_tokens.forEach((t) => ban(t));
    generation.suppress_tokens.forEach((t) => ban(t));
    ban(ids.eot + 1, tsBegin);
    if (!timestamps) {
      ban(tsBegin, logits.length);
    } else {
      const lastTs = tokens.length >= 1 && tokens.at(-1)! >= tsBegin;
      const penultTs = tokens.length < 2 || tokens.at(-2)! >= tsBegin;
      if (lastTs) penultTs ? ban(tsBegin, logits.length) : ban(0, ids.eot);
      const stamps = tokens.filter((t) => t >= tsBegin);
      if (stamps.length > 0) ban(tsBegin, lastTs && !penultTs ? stamps.at(-1)! : stamps.at(-1)! + 1);
      if (tokens.length === 0) {
        ban(0, tsBegin);
        ban(tsBegin + 51, logits.length);
      }
      const max = Math.max(...logits);
      const lse = max + Math.log(logits.reduce((a, v) => a + Math.exp(v - max), 0));
      const tsMass = Math.log(logits.slice(tsBegin).reduce((a, v) => a + Math.exp(v - lse), 0));
      const maxText = Math.max(...logits.slice(0, tsBegin)) - lse;
      if (tsMass > maxText) ban(0, tsBegin);
    }
    let next = 0;
    for (let i = 1; i < logits.length; i++) if (logits[i]! > logits[next]!) next = i;
    if (next === ids.eot) break;
    tokens.push(next);
  }
  return tokens;
}

/** openai-whisper's segments of one window's tokens: slices ending at each pair of consecutive timestamps (and at a single timestamp ending). */
function sliceSegments(tokens: number[], tsBegin: number): number[][] {
  const ts = tokens.map((t) => t >= tsBegin);
  const cuts = ts.flatMap((v, i) => (i > 0 && v && ts[i - 1] ? [i] : []));
  if (cuts.length === 0) return [tokens];
  if (tokens.length >= 2 && !ts.at(-2) && ts.at(-1)) cuts.push(tokens.length);
  return cuts.map((cut, i) => tokens.slice(i === 0 ? 0 : cuts[i - 1], cut));
}

describe('the log-mel front end on hand-worked inputs', () => {
  const mel = new LogMel(80);
  it('maps silence to (log10(1e-10) + 4) / 4 = -1.5 everywhere', () => {
    const out = mel.window30s(new Float32Array(SR), 0);
    expect(out.length).toBe(FRAMES * 80);
    expect(out.every((v) => v === -1.5)).toBe(true);
  });

  it('puts a tone on FFT bin 25 (1 kHz) into the filters around it, with Hann leakage into bins 24 and 26', () => {
    const audio = Float32Array.from({ length: 480000 }, (_, i) => Math.sin((2 * Math.PI * 1000 * i) / SR));
    const out = mel.window30s(audio, 0);
    const filters = referenceFilters(80);
    // |X[25]| = N/4 for a unit sine under a periodic Hann window of N = 400, |X[24]| = |X[26]| = N/8.
    const expected = filters.map((w) => Math.log10(Math.max(w[25]! * 100 ** 2 + (w[24]! + w[26]!) * 50 ** 2, 1e-10)));
    const max = Math.max(...expected);
    const frame = 1500;
    expected.forEach((v, m) => expect(out[frame * 80 + m]).toBeCloseTo((Math.max(v, max - 8) + 4) / 4, 4));
    const peak = expected.indexOf(max);
    expect(filters[peak]![25]).toBeGreaterThan(0);
  });

  it('reflects the window at its edges (frames 0 and 2999) as the reference does', () => {
    // Sound only within 0.05 s of the window's two ends (it starts 0.5 s into the audio).
    const audio = testSignal(31, SR, 9).map((v, i) => (Math.abs(i - SR / 2 - 240000) > 239200 ? v : 0));
    const ours = mel.window30s(audio, SR / 2);
    const ref = referenceMel(audio, SR / 2, 80);
    for (const frame of [0, 1, 2998, 2999]) {
      for (let m = 0; m < 80; m++) expect(Math.abs(ours[frame * 80 + m]! - ref[frame * 80 + m]!)).toBeLessThan(2e-4);
    }
  });
});

describe('the tiny random Whisper against the CPU reference', () => {
  let dir: string;
  let ids: WhisperIds;
  let transcriber: Transcriber;
  let reference: ReferenceWhisper;
  let cross: ReturnType<ReferenceWhisper['crossKeys']>;
  let generation: { suppress_tokens: number[]; begin_suppress_tokens: number[] };
  const audio = testSignal(1.5, SR, 4);

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'whisper-ref-'));
    ids = makeWhisperCheckpoint(dir, 11);
    transcriber = await loadTranscriber({ modelDir: dir, maxQueue: 8, timeoutMs: 120_000 });
    const weights: Weights = new Map([...listCheckpointTensors(dir)].map(([k, t]) => [k, Float64Array.from(readTensorF32(t))]));
    reference = new ReferenceWhisper(weights, ids.vocab);
    generation = JSON.parse(readFileSync(join(dir, 'generation_config.json'), 'utf8'));
  }, 60_000);

  afterAll(async () => {
    await transcriber?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('computes the mel features and the encoder output within tolerance', async () => {
    const refMel = referenceMel(audio, 0, 80);
    const ours = new LogMel(80).window30s(audio, 0);
    let melErr = 0;
    for (let i = 0; i < ours.length; i++) melErr = Math.max(melErr, Math.abs(ours[i]! - refMel[i]!));
    expect(melErr).toBeLessThan(2e-4);
    const model = (transcriber as unknown as { model: { encode(f: Float32Array): Promise<void>; encoderOutput(): Promise<Float32Array> } }).model;
    await model.encode(ours);
    const gpu = await model.encoderOutput();
    const encoded = reference.encode(refMel);
    let encErr = 0;
    for (let i = 0; i < encoded.length; i++) encErr = Math.max(encErr, Math.abs(gpu[i]! - encoded[i]!));
    expect(encErr).toBeLessThan(2e-3);
    cross = reference.crossKeys(encoded);
  }, 60_000);

  it('decodes the reference greedy tokens with a forced language and with the language detected', async () => {
    const forced = referenceDecode(reference, cross, ids, generation, [ids.sot, ids.languages.fr!, ids.transcribe, ids.noTimestamps], false);
    const got = await transcriber.transcribe({ audio, task: 'transcribe', language: 'fr', temperatures: [0], timestamps: false });
    expect(got.segments.flatMap((s) => s.tokens)).toEqual(forced);
    const langLogits = reference.logits([ids.sot], cross);
    const detected = Object.entries(ids.languages).reduce((a, b) => (langLogits[b[1]]! > langLogits[a[1]]! ? b : a))[0];
    const translated = referenceDecode(reference, cross, ids, generation, [ids.sot, ids.languages[detected]!, ids.translate, ids.noTimestamps], false);
    const auto = await transcriber.transcribe({ audio, task: 'translate', temperatures: [0], timestamps: false });
    expect(auto.language).toBe(detected);
    expect(auto.segments.flatMap((s) => s.tokens)).toEqual(translated);
    expect(auto.text).toBe(transcriber.tokenizer.decode(translated.filter((t) => t < ids.eot)).trim());
  }, 60_000);

  it('decodes the reference tokens with timestamps and slices the first window into its segments', async () => {
    const tokens = referenceDecode(reference, cross, ids, generation, [ids.sot, ids.languages.de!, ids.transcribe], true);
    expect(tokens.some((t) => t >= ids.timestampBegin)).toBe(true);
    const got = await transcriber.transcribe({ audio, task: 'transcribe', language: 'de', temperatures: [0], timestamps: true });
    const first = got.segments.filter((s) => s.seek === 0);
    // Segments without text (a lone timestamp pair) are dropped.
    const slices = sliceSegments(tokens, ids.timestampBegin);
    expect(first.map((s) => s.tokens)).toEqual(slices.filter((s) => s.some((t) => t < ids.eot)));
    // Sliced segments start and end at their timestamps; an unsliced window spans the audio.
    const sliced = tokens.some((t, i) => i > 0 && t >= ids.timestampBegin && tokens[i - 1]! >= ids.timestampBegin);
    for (const s of first) {
      expect(s.start).toBeCloseTo(sliced ? (s.tokens[0]! - ids.timestampBegin) * 0.02 : 0, 5);
      if (sliced) expect(s.end).toBeCloseTo((s.tokens.at(-1)! - ids.timestampBegin) * 0.02, 5);
    }
  }, 60_000);
});

/** openai-whisper's sinusoids(length, channels): sin then cos of t / 10000^(i / (channels / 2 - 1)). */
function referenceSinusoids(length: number, channels: number): Float32Array {
  const half = channels / 2;
  return Float32Array.from({ length: length * channels }, (_, i) => {
    const t = Math.floor(i / channels);
    const c = i % channels;
    const a = t / 10000 ** ((c % half) / (half - 1));
    return c < half ? Math.sin(a) : Math.cos(a);
  });
}

/** transformers' tensor name -> mlx-whisper's. */
function mlxName(name: string): string {
  const proj: Record<string, string> = { q_proj: 'query', k_proj: 'key', v_proj: 'value', out_proj: 'out' };
  return name
    .replace(/^model\./, '')
    .replace(/\.layers\./, '.blocks.')
    .replace(/\.self_attn\.(\w+_proj)\./, (_, p: string) => `.attn.${proj[p]}.`)
    .replace(/\.encoder_attn\.(\w+_proj)\./, (_, p: string) => `.cross_attn.${proj[p]}.`)
    .replace('.self_attn_layer_norm.', '.attn_ln.')
    .replace('.encoder_attn_layer_norm.', '.cross_attn_ln.')
    .replace('.final_layer_norm.', '.mlp_ln.')
    .replace('.fc1.', '.mlp1.')
    .replace('.fc2.', '.mlp2.')
    .replace('encoder.layer_norm.', 'encoder.ln_post.')
    .replace('decoder.layer_norm.', 'decoder.ln.')
    .replace('decoder.embed_tokens.', 'decoder.token_embedding.')
    .replace('decoder.embed_positions.weight', 'decoder.positional_embedding');
}

describe("mlx-whisper's layout", () => {
  let root: string;
  beforeAll(() => {
    root = mkdtempSync(join(tmpdir(), 'whisper-mlx-'));
  });
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it('decodes what the same weights decode in transformers\' layout', async () => {
    const source = join(root, 'source');
    makeWhisperCheckpoint(source, 12);
    const tensors = [...listCheckpointTensors(source)].map(([name, t]) => ({ name, shape: t.info.shape, data: readTensorF32(t) }));
    const D = TINY_WHISPER.dModel;
    const hf = join(root, 'hf');
    const mlx = join(root, 'mlx');
    for (const dir of [hf, mlx]) {
      mkdirSync(dir);
      for (const f of ['tokenizer.json', 'tokenizer_config.json', 'generation_config.json']) copyFileSync(join(source, f), join(dir, f));
    }
    // transformers' copy stores the sinusoids mlx-whisper computes.
    const positions = referenceSinusoids(1500, D);
    writeSafetensors(join(hf, 'model.safetensors'), tensors.map((t) => ({ ...t, dtype: 'F32' as const, data: t.name === 'model.encoder.embed_positions.weight' ? positions : t.data })), { format: 'pt' });
    copyFileSync(join(source, 'config.json'), join(hf, 'config.json'));
    const channelsLast = (t: { shape: number[]; data: Float32Array }) => {
      const [o, c, k] = t.shape as [number, number, number];
      return { shape: [o, k, c], data: Float32Array.from({ length: o * c * k }, (_, i) => t.data[(Math.floor(i / (k * c)) * c + (i % c)) * k + (Math.floor(i / c) % k)]!) };
    };
    writeSafetensors(join(mlx, 'weights.safetensors'), tensors.filter((t) => t.name !== 'model.encoder.embed_positions.weight').map((t) => ({
      ...(t.name.includes('.conv') && t.name.endsWith('.weight') ? channelsLast(t) : t), name: mlxName(t.name), dtype: 'F32' as const,
    })));
    const cfg = JSON.parse(readFileSync(join(source, 'config.json'), 'utf8')) as Record<string, number>;
    writeFileSync(join(mlx, 'config.json'), JSON.stringify({
      model_type: 'whisper', n_mels: cfg.num_mel_bins, n_audio_ctx: 1500, n_audio_state: D, n_audio_head: TINY_WHISPER.heads, n_audio_layer: TINY_WHISPER.encoderLayers,
      n_vocab: cfg.vocab_size, n_text_ctx: TINY_WHISPER.targetPositions, n_text_state: D, n_text_head: TINY_WHISPER.heads, n_text_layer: TINY_WHISPER.decoderLayers,
    }));
    const audio = testSignal(1, SR, 6);
    const tokens: number[][] = [];
    for (const dir of [hf, mlx]) {
      const t = await loadTranscriber({ modelDir: dir, maxQueue: 1, timeoutMs: 120_000 });
      try {
        const got = await t.transcribe({ audio, task: 'transcribe', language: 'en', temperatures: [0], timestamps: false });
        tokens.push(got.segments.flatMap((s) => s.tokens));
      } finally {
        await t.close();
      }
    }
    expect(tokens[0]!.length).toBeGreaterThan(0);
    expect(tokens[1]).toEqual(tokens[0]);
  }, 60_000);
});

describe('MLX 8-bit affine weights', () => {
  it('match the reference on the dequantized weights', async () => {
    const root = mkdtempSync(join(tmpdir(), 'whisper-q8-'));
    try {
      const source = join(root, 'source');
      const q8 = join(root, 'q8');
      const ids = makeWhisperCheckpoint(source, 13);
      quantizeCheckpoint(source, q8, { bits: 8, groupSize: 64 });
      const stored = listCheckpointTensors(q8);
      const weights: Weights = new Map();
      for (const [name, t] of stored) {
        if (name.endsWith('.scales') || name.endsWith('.biases')) continue;
        if (t.info.dtype !== 'U32') {
          weights.set(name, Float64Array.from(readTensorF32(t)));
          continue;
        }
        const prefix = name.slice(0, -'.weight'.length);
        const [N, words] = t.info.shape as [number, number];
        const bytes = readSafetensorsBytes(t.path, t.header, name);
        const packed = new Uint32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
        const K = (words * 32) / 8;
        weights.set(name, Float64Array.from(dequantizeAffine(packed, readTensorF32(stored.get(`${prefix}.scales`)!), readTensorF32(stored.get(`${prefix}.biases`)!), N, K, 8, 64)));
      }
      const reference = new ReferenceWhisper(weights, ids.vocab);
      const transcriber = await loadTranscriber({ modelDir: q8, maxQueue: 1, timeoutMs: 120_000 });
      try {
        const audio = testSignal(1, SR, 7);
        const mel = new LogMel(80).window30s(audio, 0);
        const model = (transcriber as unknown as { model: { encode(f: Float32Array): Promise<void>; encoderOutput(): Promise<Float32Array> } }).model;
        await model.encode(mel);
        const gpu = await model.encoderOutput();
        const encoded = reference.encode(Float64Array.from(mel));
        let err = 0;
        for (let i = 0; i < encoded.length; i++) err = Math.max(err, Math.abs(gpu[i]! - encoded[i]!));
        expect(err).toBeLessThan(2e-3);
        const generation = JSON.parse(readFileSync(join(q8, 'generation_config.json'), 'utf8'));
        const want = referenceDecode(reference, reference.crossKeys(encoded), ids, generation, [ids.sot, ids.languages.en!, ids.transcribe, ids.noTimestamps], false);
        const got = await transcriber.transcribe({ audio, task: 'transcribe', language: 'en', temperatures: [0], timestamps: false });
        expect(got.segments.flatMap((s) => s.tokens)).toEqual(want);
      } finally {
        await transcriber.close();
      }
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  }, 90_000);
});
