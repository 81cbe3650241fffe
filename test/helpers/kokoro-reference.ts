// An independent float64 CPU reference of Kokoro's inference path, written from the
// published architecture (hexgrad's kokoro package: model.py, modules.py, istftnet.py;
// StyleTTS2) in PyTorch's channel-major layout [channels, frames], reading the checkpoint
// by its PyTorch tensor names. It follows the PyTorch code literally where the GPU path
// takes shortcuts: the style concatenated to each LSTM input, weight norm applied per
// call, SineGen's nearest upsampling, linear downsampling, cumulative sum of phases and
// linear upsampling. Three deliberate departures, all shared with the GPU path: SineGen's
// random initial phase is left out (PyTorch's linear downsampling by the upsampling factor
// never reads the first sample it is added to), the noise comes from the same
// counter-based generator (harmonic_source.wgsl) instead of torch.randn, and an STFT bin
// whose imaginary part is below 1e-5 of its real part is taken as real (stft.wgsl says why).
import { readSafetensorsHeader, readTensorF32 } from '../../src/models/safetensors.js';
import type { KokoroConfig } from '../../src/models/kokoro.js';

/** [channels, frames], channel-major (PyTorch's [C, T] without the batch). */
interface Mat {
  c: number;
  t: number;
  d: Float64Array;
}

const mat = (c: number, t: number): Mat => ({ c, t, d: new Float64Array(c * t) });

export interface ReferenceOutput {
  audio: Float64Array;
  durations: number[];
  /** [tokens, hidden], time-major as the GPU path's trace. */
  textEncoder: Float64Array;
  durationEncoder: Float64Array;
  f0: Float64Array;
  n: Float64Array;
  source: Float64Array;
  /** [STFT frames, n_fft + 2]. */
  har: Float64Array;
  /** [frames, n_fft + 2]. */
  spectrum: Float64Array;
}

// The harmonic source's noise: harmonic_source.wgsl's generator.
function pcg(v: number): number {
  const state = (Math.imul(v >>> 0, 747796405) + 2891336453) >>> 0;
  const word = Math.imul(((state >>> ((state >>> 28) + 4)) ^ state) >>> 0, 277803737) >>> 0;
  return ((word >>> 22) ^ word) >>> 0;
}
const unit = (bits: number) => ((bits >>> 8) + 0.5) / 16777216;
function normal(seed: number, i: number): number {
  const key = pcg(seed >>> 0);
  const u1 = unit(pcg((key ^ ((2 * i) >>> 0)) >>> 0));
  const u2 = unit(pcg((key ^ ((2 * i + 1) >>> 0)) >>> 0));
  return Math.sqrt(-2 * Math.log(u1)) * Math.cos(2 * Math.PI * u2);
}

/** Relative magnitude below which an STFT bin's phase is taken as given (forward's phaseOf). */
export const PHASE_FLOOR = 1e-3;
/** How near a whole turn two phases must differ to count as the same angle across the +-pi cut. */
const WRAP_TOLERANCE = 1e-2;

const sigmoid = (x: number) => 1 / (1 + Math.exp(-x));

export class KokoroReference {
  private readonly tensors = new Map<string, { shape: number[]; data: Float64Array }>();

  constructor(private readonly cfg: KokoroConfig, weightsPath: string) {
    const header = readSafetensorsHeader(weightsPath);
    for (const [name, info] of Object.entries(header.tensors)) {
      this.tensors.set(name, { shape: info.shape, data: Float64Array.from(readTensorF32({ name, path: weightsPath, header, info })) });
    }
  }

  private t(name: string): Float64Array {
    const v = this.tensors.get(name);
    if (!v) throw new Error(`reference: no tensor ${name}`);
    return v.data;
  }

  private has(name: string): boolean {
    return this.tensors.has(name);
  }

  private shape(name: string): number[] {
    return this.tensors.get(name)!.shape;
  }

  /** A module's weight, weight norm applied (g v / |v| per slice of dim 0). */
  private weight(prefix: string): { w: Float64Array; shape: number[] } {
    if (!this.has(`${prefix}.weight_v`)) return { w: this.t(`${prefix}.weight`), shape: this.shape(`${prefix}.weight`) };
    const v = this.t(`${prefix}.weight_v`);
    const g = this.t(`${prefix}.weight_g`);
    const shape = this.shape(`${prefix}.weight_v`);
    const per = v.length / shape[0]!;
    const w = new Float64Array(v.length);
    for (let o = 0; o < shape[0]!; o++) {
      let ss = 0;
      for (let i = 0; i < per; i++) ss += v[o * per + i]! ** 2;
      for (let i = 0; i < per; i++) w[o * per + i] = (g[o]! * v[o * per + i]!) / Math.sqrt(ss);
    }
    return { w, shape };
  }

  /** nn.Linear over a vector. */
  private linearVec(prefix: string, x: Float64Array): Float64Array {
    const w = this.t(`${prefix}.weight`);
    const b = this.has(`${prefix}.bias`) ? this.t(`${prefix}.bias`) : undefined;
    const n = w.length / x.length;
    const y = new Float64Array(n);
    for (let o = 0; o < n; o++) {
      let s = b ? b[o]! : 0;
      for (let i = 0; i < x.length; i++) s += w[o * x.length + i]! * x[i]!;
      y[o] = s;
    }
    return y;
  }

  /** nn.Linear over each frame of x [C, T]. */
  private linear(prefix: string, x: Mat): Mat {
    const out = mat(this.shape(`${prefix}.weight`)[0]!, x.t);
    const col = new Float64Array(x.c);
    for (let t = 0; t < x.t; t++) {
      for (let c = 0; c < x.c; c++) col[c] = x.d[c * x.t + t]!;
      const y = this.linearVec(prefix, col);
      for (let o = 0; o < out.c; o++) out.d[o * x.t + t] = y[o]!;
    }
    return out;
  }

  /** nn.Conv1d. */
  private conv(prefix: string, x: Mat, opts: { stride?: number; pad?: number; dilation?: number } = {}): Mat {
    const { w, shape } = this.weight(prefix);
    const [O, I, K] = shape as [number, number, number];
    const stride = opts.stride ?? 1;
    const dil = opts.dilation ?? 1;
    const pad = opts.pad ?? 0;
    const T = Math.floor((x.t + 2 * pad - dil * (K - 1) - 1) / stride) + 1;
    const b = this.has(`${prefix}.bias`) ? this.t(`${prefix}.bias`) : undefined;
    const y = mat(O, T);
    for (let o = 0; o < O; o++) {
      for (let t = 0; t < T; t++) {
        let s = b ? b[o]! : 0;
        for (let k = 0; k < K; k++) {
          const at = t * stride + k * dil - pad;
          if (at < 0 || at >= x.t) continue;
          for (let i = 0; i < I; i++) s += w[(o * I + i) * K + k]! * x.d[i * x.t + at]!;
        }
        y.d[o * T + t] = s;
      }
    }
    return y;
  }

  /** nn.ConvTranspose1d (groups 1 or one per channel). */
  private convTranspose(prefix: string, x: Mat, stride: number, pad: number, outputPadding: number, groups: number): Mat {
    const { w, shape } = this.weight(prefix);
    const [I, Og, K] = shape as [number, number, number];
    const O = Og * groups;
    const T = (x.t - 1) * stride - 2 * pad + K + outputPadding;
    const y = mat(O, T);
    const b = this.t(`${prefix}.bias`);
    for (let o = 0; o < O; o++) y.d.fill(b[o]!, o * T, (o + 1) * T);
    const inPerGroup = I / groups;
    for (let i = 0; i < I; i++) {
      const g = Math.floor(i / inPerGroup);
      for (let ol = 0; ol < Og; ol++) {
        const o = g * Og + ol;
        for (let s = 0; s < x.t; s++) {
          for (let k = 0; k < K; k++) {
            const t = s * stride + k - pad;
            if (t >= 0 && t < T) y.d[o * T + t] += x.d[i * x.t + s]! * w[(i * Og + ol) * K + k]!;
          }
        }
      }
    }
    return y;
  }

  private static map(x: Mat, f: (v: number, c: number) => number): Mat {
    const y = mat(x.c, x.t);
    for (let c = 0; c < x.c; c++) for (let t = 0; t < x.t; t++) y.d[c * x.t + t] = f(x.d[c * x.t + t]!, c);
    return y;
  }

  private static add(a: Mat, b: Mat, scale = 1): Mat {
    const y = mat(a.c, a.t);
    for (let i = 0; i < y.d.length; i++) y.d[i] = (a.d[i]! + b.d[i]!) * scale;
    return y;
  }

  private static cat(...parts: Mat[]): Mat {
    const y = mat(parts.reduce((s, p) => s + p.c, 0), parts[0]!.t);
    let at = 0;
    for (const p of parts) { y.d.set(p.d, at); at += p.d.length; }
    return y;
  }

  private static leaky(x: Mat, slope: number): Mat {
    return KokoroReference.map(x, (v) => (v < 0 ? v * slope : v));
  }

  /** AdaIN1d: (1 + gamma) * InstanceNorm(x) + beta, gamma and beta from fc(s). */
  private adain(prefix: string, x: Mat, s: Float64Array): Mat {
    const h = this.linearVec(`${prefix}.fc`, s);
    const nw = this.has(`${prefix}.norm.weight`) ? this.t(`${prefix}.norm.weight`) : undefined;
    const nb = this.has(`${prefix}.norm.bias`) ? this.t(`${prefix}.norm.bias`) : undefined;
    const y = mat(x.c, x.t);
    for (let c = 0; c < x.c; c++) {
      let mean = 0;
      for (let t = 0; t < x.t; t++) mean += x.d[c * x.t + t]!;
      mean /= x.t;
      let v = 0;
      for (let t = 0; t < x.t; t++) v += (x.d[c * x.t + t]! - mean) ** 2;
      const inv = 1 / Math.sqrt(v / x.t + 1e-5);
      for (let t = 0; t < x.t; t++) {
        const n = (x.d[c * x.t + t]! - mean) * inv * (nw ? nw[c]! : 1) + (nb ? nb[c]! : 0);
        y.d[c * x.t + t] = (1 + h[c]!) * n + h[x.c + c]!;
      }
    }
    return y;
  }

  /** LayerNorm over channels of each frame, then * gamma + beta. */
  private static layerNorm(x: Mat, gamma: Float64Array | undefined, beta: Float64Array | undefined, eps: number): Mat {
    const y = mat(x.c, x.t);
    for (let t = 0; t < x.t; t++) {
      let mean = 0;
      for (let c = 0; c < x.c; c++) mean += x.d[c * x.t + t]!;
      mean /= x.c;
      let v = 0;
      for (let c = 0; c < x.c; c++) v += (x.d[c * x.t + t]! - mean) ** 2;
      const inv = 1 / Math.sqrt(v / x.c + eps);
      for (let c = 0; c < x.c; c++) y.d[c * x.t + t] = (x.d[c * x.t + t]! - mean) * inv * (gamma ? gamma[c]! : 1) + (beta ? beta[c]! : 0);
    }
    return y;
  }

  /** AdaLayerNorm: (1 + gamma) * LayerNorm(x) + beta. */
  private adaLayerNorm(prefix: string, x: Mat, s: Float64Array): Mat {
    const h = this.linearVec(`${prefix}.fc`, s);
    const n = KokoroReference.layerNorm(x, undefined, undefined, 1e-5);
    return KokoroReference.map(n, (v, c) => (1 + h[c]!) * v + h[x.c + c]!);
  }

  /** nn.LSTM(bidirectional, batch_first) over x [C, T]: [2H, T]. */
  private lstm(prefix: string, x: Mat): Mat {
    const H = this.shape(`${prefix}.weight_hh_l0`)[1]!;
    const y = mat(2 * H, x.t);
    for (const [dir, suffix] of ['', '_reverse'].entries()) {
      const wi = this.t(`${prefix}.weight_ih_l0${suffix}`);
      const wh = this.t(`${prefix}.weight_hh_l0${suffix}`);
      const bi = this.t(`${prefix}.bias_ih_l0${suffix}`);
      const bh = this.t(`${prefix}.bias_hh_l0${suffix}`);
      let h = new Float64Array(H);
      const c = new Float64Array(H);
      for (let s = 0; s < x.t; s++) {
        const t = dir === 0 ? s : x.t - 1 - s;
        const g = new Float64Array(4 * H);
        for (let r = 0; r < 4 * H; r++) {
          let v = bi[r]! + bh[r]!;
          for (let i = 0; i < x.c; i++) v += wi[r * x.c + i]! * x.d[i * x.t + t]!;
          for (let j = 0; j < H; j++) v += wh[r * H + j]! * h[j]!;
          g[r] = v;
        }
        const next = new Float64Array(H);
        for (let j = 0; j < H; j++) {
          c[j] = sigmoid(g[H + j]!) * c[j]! + sigmoid(g[j]!) * Math.tanh(g[2 * H + j]!);
          next[j] = sigmoid(g[3 * H + j]!) * Math.tanh(c[j]!);
          y.d[(dir * H + j) * x.t + t] = next[j]!;
        }
        h = next;
      }
    }
    return y;
  }

  /** The style vector s broadcast over T frames, as [S, T]. */
  private static broadcast(s: Float64Array, T: number): Mat {
    const y = mat(s.length, T);
    for (let c = 0; c < s.length; c++) y.d.fill(s[c]!, c * T, (c + 1) * T);
    return y;
  }

  /** CustomAlbert's last hidden state [hidden, T]. */
  private albert(ids: number[]): Mat {
    const b = this.cfg.bert;
    const E = b.embedding;
    const T = ids.length;
    const words = this.t('bert.embeddings.word_embeddings.weight');
    const positions = this.t('bert.embeddings.position_embeddings.weight');
    const types = this.t('bert.embeddings.token_type_embeddings.weight');
    const emb = mat(E, T);
    for (let t = 0; t < T; t++) for (let e = 0; e < E; e++) emb.d[e * T + t] = words[ids[t]! * E + e]! + positions[t * E + e]! + types[e]!;
    let h = this.linear('bert.encoder.embedding_hidden_mapping_in', KokoroReference.layerNorm(emb, this.t('bert.embeddings.LayerNorm.weight'), this.t('bert.embeddings.LayerNorm.bias'), b.eps));
    const l = 'bert.encoder.albert_layer_groups.0.albert_layers.0';
    const hd = b.hidden / b.heads;
    for (let layer = 0; layer < b.layers; layer++) {
      const [q, k, v] = ['query', 'key', 'value'].map((n) => this.linear(`${l}.attention.${n}`, h)) as [Mat, Mat, Mat];
      const ctx = mat(b.hidden, T);
      for (let head = 0; head < b.heads; head++) {
        for (let i = 0; i < T; i++) {
          const scores = new Float64Array(T);
          for (let j = 0; j < T; j++) {
            let s = 0;
            for (let d = 0; d < hd; d++) s += q.d[(head * hd + d) * T + i]! * k.d[(head * hd + d) * T + j]!;
            scores[j] = s / Math.sqrt(hd);
          }
          const max = Math.max(...scores);
          let sum = 0;
          for (let j = 0; j < T; j++) { scores[j] = Math.exp(scores[j]! - max); sum += scores[j]!; }
          for (let d = 0; d < hd; d++) {
            let s = 0;
            for (let j = 0; j < T; j++) s += (scores[j]! / sum) * v.d[(head * hd + d) * T + j]!;
            ctx.d[(head * hd + d) * T + i] = s;
          }
        }
      }
      const attn = KokoroReference.layerNorm(KokoroReference.add(h, this.linear(`${l}.attention.dense`, ctx)), this.t(`${l}.attention.LayerNorm.weight`), this.t(`${l}.attention.LayerNorm.bias`), b.eps);
      const gelu = (x: number) => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3)));
      const ffn = this.linear(`${l}.ffn_output`, KokoroReference.map(this.linear(`${l}.ffn`, attn), gelu));
      h = KokoroReference.layerNorm(KokoroReference.add(ffn, attn), this.t(`${l}.full_layer_layer_norm.weight`), this.t(`${l}.full_layer_layer_norm.bias`), b.eps);
    }
    return h;
  }

  /** StyleTTS2's AdainResBlk1d. */
  private adainResBlk(prefix: string, x: Mat, s: Float64Array, upsample: boolean): Mat {
    let r = KokoroReference.leaky(this.adain(`${prefix}.norm1`, x, s), 0.2);
    if (upsample) r = this.convTranspose(`${prefix}.pool`, r, 2, 1, 1, r.c);
    r = this.conv(`${prefix}.conv1`, r, { pad: 1 });
    r = KokoroReference.leaky(this.adain(`${prefix}.norm2`, r, s), 0.2);
    r = this.conv(`${prefix}.conv2`, r, { pad: 1 });
    let sc = x;
    if (upsample) {
      sc = mat(x.c, 2 * x.t);
      for (let c = 0; c < x.c; c++) for (let t = 0; t < 2 * x.t; t++) sc.d[c * 2 * x.t + t] = x.d[c * x.t + Math.floor(t / 2)]!;
    }
    if (this.has(`${prefix}.conv1x1.weight_v`) || this.has(`${prefix}.conv1x1.weight`)) sc = this.conv(`${prefix}.conv1x1`, sc);
    return KokoroReference.add(r, sc, Math.SQRT1_2);
  }

  /** iSTFTNet's AdaINResBlock1 with Snake. */
  private snakeBlock(prefix: string, x: Mat, s: Float64Array, taps: number, dilations: number[]): Mat {
    const snake = (m: Mat, alpha: Float64Array) => KokoroReference.map(m, (v, c) => v + Math.sin(alpha[c]! * v) ** 2 / alpha[c]!);
    dilations.forEach((d, i) => {
      let xt = snake(this.adain(`${prefix}.adain1.${i}`, x, s), this.t(`${prefix}.alpha1.${i}`));
      xt = this.conv(`${prefix}.convs1.${i}`, xt, { dilation: d, pad: (taps * d - d) / 2 });
      xt = snake(this.adain(`${prefix}.adain2.${i}`, xt, s), this.t(`${prefix}.alpha2.${i}`));
      xt = this.conv(`${prefix}.convs2.${i}`, xt, { pad: (taps - 1) / 2 });
      x = KokoroReference.add(xt, x);
    });
    return x;
  }

  /** SineGen + SourceModuleHnNSF's harmonic branch over F0 at its frame rate: samples. */
  private harmonicSource(f0: Float64Array, upsample: number, seed: number): Float64Array {
    const harmonics = 9;
    const L = f0.length * upsample;
    const sr = 24000;
    const lw = this.t('decoder.generator.m_source.l_linear.weight');
    const lb = this.t('decoder.generator.m_source.l_linear.bias')[0]!;
    const out = new Float64Array(L);
    const sines: Float64Array[] = [];
    for (let h = 0; h < harmonics; h++) {
      // rad_values at the sample rate (F0 upsampled nearest), mod 1.
      const rad = new Float64Array(L);
      for (let n = 0; n < L; n++) { const v = (f0[Math.floor(n / upsample)]! * (h + 1)) / sr; rad[n] = v - Math.floor(v); }
      // F.interpolate(scale_factor = 1 / upsample, linear): src = upsample (j + 0.5) - 0.5.
      const down = new Float64Array(Math.floor(L / upsample));
      for (let j = 0; j < down.length; j++) {
        const src = Math.max(upsample * (j + 0.5) - 0.5, 0);
        const i0 = Math.floor(src);
        const i1 = Math.min(i0 + 1, L - 1);
        const lambda = src - i0;
        down[j] = (1 - lambda) * rad[i0]! + lambda * rad[i1]!;
      }
      const phase = new Float64Array(down.length);
      let cum = 0;
      for (let j = 0; j < down.length; j++) { cum += down[j]!; phase[j] = cum * 2 * Math.PI * upsample; }
      // F.interpolate(scale_factor = upsample, linear): src = (n + 0.5) / upsample - 0.5.
      const sine = new Float64Array(L);
      for (let n = 0; n < L; n++) {
        const src = Math.max((n + 0.5) / upsample - 0.5, 0);
        const i0 = Math.floor(src);
        const i1 = Math.min(i0 + 1, phase.length - 1);
        const lambda = src - i0;
        sine[n] = 0.1 * Math.sin((1 - lambda) * phase[i0]! + lambda * phase[i1]!);
      }
      sines.push(sine);
    }
    for (let n = 0; n < L; n++) {
      const uv = f0[Math.floor(n / upsample)]! > 10 ? 1 : 0;
      let acc = lb;
      for (let h = 0; h < harmonics; h++) {
        const noise = (uv * 0.003 + (1 - uv) * (0.1 / 3)) * normal(seed, n * harmonics + h);
        acc += lw[h]! * (sines[h]![n]! * uv + noise);
      }
      out[n] = Math.tanh(acc);
    }
    return out;
  }

  /** torch.stft (center, reflect, periodic Hann): [n_fft + 2, frames] of |X| then angle X. */
  private static stft(x: Float64Array, nFft: number, hop: number): Mat {
    const frames = Math.floor(x.length / hop) + 1;
    const bins = nFft / 2 + 1;
    const y = mat(nFft + 2, frames);
    const half = nFft / 2;
    for (let m = 0; m < frames; m++) {
      for (let k = 0; k < bins; k++) {
        let re = 0;
        let im = 0;
        for (let n = 0; n < nFft; n++) {
          let at = m * hop + n - half;
          if (at < 0) at = -at;
          if (at >= x.length) at = 2 * (x.length - 1) - at;
          const w = 0.5 - 0.5 * Math.cos((2 * Math.PI * n) / nFft);
          re += x[at]! * w * Math.cos((2 * Math.PI * k * n) / nFft);
          im -= x[at]! * w * Math.sin((2 * Math.PI * k * n) / nFft);
        }
        if (k === 0 || 2 * k === nFft || Math.abs(im) <= 1e-5 * Math.abs(re)) im = 0;
        y.d[k * frames + m] = Math.hypot(re, im);
        y.d[(bins + k) * frames + m] = Math.atan2(im, re);
      }
    }
    return y;
  }

  /** torch.istft (center, periodic Hann) of magnitude exp(x[:bins]) and phase sin(x[bins:]). */
  private static istft(x: Mat, nFft: number, hop: number): Float64Array {
    const bins = nFft / 2 + 1;
    const frames = x.t;
    const full = new Float64Array(nFft + hop * (frames - 1));
    const env = new Float64Array(full.length);
    for (let m = 0; m < frames; m++) {
      for (let n = 0; n < nFft; n++) {
        let v = 0;
        for (let k = 0; k < bins; k++) {
          const mag = Math.exp(x.d[k * frames + m]!);
          const ph = Math.sin(x.d[(bins + k) * frames + m]!);
          const re = mag * Math.cos(ph);
          const im = mag * Math.sin(ph);
          const a = (2 * Math.PI * k * n) / nFft;
          // C2R: the DC and Nyquist bins count once, their imaginary parts ignored.
          v += k === 0 || 2 * k === nFft ? re * Math.cos(a) : 2 * (re * Math.cos(a) - im * Math.sin(a));
        }
        const w = 0.5 - 0.5 * Math.cos((2 * Math.PI * n) / nFft);
        full[m * hop + n] += (w * v) / nFft;
        env[m * hop + n] += w * w;
      }
    }
    const out = new Float64Array(hop * (frames - 1));
    for (let s = 0; s < out.length; s++) out[s] = full[s + nFft / 2]! / env[s + nFft / 2]!;
    return out;
  }

  /**
   * KModel.forward_with_tokens for ids without the pads. The phase of an STFT bin whose
   * magnitude is next to nothing (a smooth source has little past its lowest bins) is the
   * angle of rounding noise in any float implementation, PyTorch's included, and the
   * generator reads it as a value; likewise a phase next to +-pi lands on either side of
   * the cut by rounding. `phaseOf` ([STFT frames, n_fft + 2], the GPU path's) supplies the
   * phases of bins below PHASE_FLOOR of the largest magnitude, and those a whole turn
   * (within WRAP_TOLERANCE) from this one's, so that what follows is compared on the same
   * input.
   */
  forward(phonemes: readonly number[], refS: Float32Array, speed: number, seed: number, phaseOf?: ArrayLike<number>): ReferenceOutput {
    const cfg = this.cfg;
    const S = cfg.style;
    const ids = [0, ...phonemes, 0];
    const T = ids.length;
    const sDecoder = Float64Array.from(refS.subarray(0, S));
    const s = Float64Array.from(refS.subarray(S));
    const bert = this.albert(ids);
    const dEn = this.linear('bert_encoder', bert);
    const style = KokoroReference.broadcast(s, T);
    // DurationEncoder.
    let x = dEn;
    for (let i = 0; i < cfg.layers; i++) {
      x = this.lstm(`predictor.text_encoder.lstms.${2 * i}`, KokoroReference.cat(x, style));
      x = this.adaLayerNorm(`predictor.text_encoder.lstms.${2 * i + 1}`, x, s);
    }
    const d = KokoroReference.cat(x, style);
    const durationLogits = this.linear('predictor.duration_proj.linear_layer', this.lstm('predictor.lstm', d));
    const durations: number[] = [];
    for (let t = 0; t < T; t++) {
      let sum = 0;
      for (let j = 0; j < durationLogits.c; j++) sum += sigmoid(durationLogits.d[j * T + t]!);
      const v = sum / speed;
      const floor = Math.floor(v);
      durations.push(Math.max(1, v - floor === 0.5 ? floor + (floor % 2) : Math.round(v)));
    }
    const F = durations.reduce((a, b) => a + b, 0);
    const align = (m: Mat): Mat => {
      const y = mat(m.c, F);
      let f = 0;
      durations.forEach((n, t) => { for (let j = 0; j < n; j++, f++) for (let c = 0; c < m.c; c++) y.d[c * F + f] = m.d[c * T + t]!; });
      return y;
    };
    // F0Ntrain.
    const shared = this.lstm('predictor.shared', align(d));
    const curve = (name: string) => {
      let y = shared;
      for (let i = 0; i < 3; i++) y = this.adainResBlk(`predictor.${name}.${i}`, y, s, i === 1);
      return this.conv(`predictor.${name}_proj`, y).d;
    };
    const f0 = curve('F0');
    const n = curve('N');
    // TextEncoder.
    const emb = this.t('text_encoder.embedding.weight');
    let te = mat(cfg.hidden, T);
    for (let t = 0; t < T; t++) for (let c = 0; c < cfg.hidden; c++) te.d[c * T + t] = emb[ids[t]! * cfg.hidden + c]!;
    for (let i = 0; i < cfg.layers; i++) {
      te = this.conv(`text_encoder.cnn.${i}.0`, te, { pad: (cfg.textKernel - 1) / 2 });
      te = KokoroReference.leaky(KokoroReference.layerNorm(te, this.t(`text_encoder.cnn.${i}.1.gamma`), this.t(`text_encoder.cnn.${i}.1.beta`), 1e-5), 0.2);
    }
    te = this.lstm('text_encoder.lstm', te);
    // Decoder.
    const asr = align(te);
    const f0Down = this.conv('decoder.F0_conv', { c: 1, t: f0.length, d: f0 }, { stride: 2, pad: 1 });
    const nDown = this.conv('decoder.N_conv', { c: 1, t: n.length, d: n }, { stride: 2, pad: 1 });
    let h = this.adainResBlk('decoder.encode', KokoroReference.cat(asr, f0Down, nDown), sDecoder, false);
    const asrRes = this.conv('decoder.asr_res.0', asr);
    let concat = true;
    for (let i = 0; this.has(`decoder.decode.${i}.norm1.fc.weight`); i++) {
      const upsample = this.has(`decoder.decode.${i}.pool.weight_v`);
      if (concat) h = KokoroReference.cat(h, asrRes, f0Down, nDown);
      h = this.adainResBlk(`decoder.decode.${i}`, h, sDecoder, upsample);
      if (upsample) concat = false;
    }
    // Generator.
    const is = cfg.istft;
    const g = 'decoder.generator';
    const upsampleScale = is.upsampleRates.reduce((a, b) => a * b, 1) * is.hop;
    const source = this.harmonicSource(f0, upsampleScale, seed);
    const har = KokoroReference.stft(source, is.nFft, is.hop);
    if (phaseOf) {
      const bins = is.nFft / 2 + 1;
      let max = 0;
      for (let i = 0; i < bins * har.t; i++) max = Math.max(max, har.d[i]!);
      for (let k = 0; k < bins; k++) {
        for (let m = 0; m < har.t; m++) {
          const at = (bins + k) * har.t + m;
          const given = phaseOf[m * (is.nFft + 2) + bins + k]!;
          const turn = Math.abs(given - har.d[at]!) - 2 * Math.PI;
          if (har.d[k * har.t + m]! < PHASE_FLOOR * max || Math.abs(turn) < WRAP_TOLERANCE) har.d[at] = given;
        }
      }
    }
    const kernels = is.resblockKernels.length;
    is.upsampleRates.forEach((rate, i) => {
      const last = i + 1 === is.upsampleRates.length;
      h = KokoroReference.leaky(h, 0.1);
      const strideF0 = is.upsampleRates.slice(i + 1).reduce((a, b) => a * b, 1);
      let noise = last ? this.conv(`${g}.noise_convs.${i}`, har) : this.conv(`${g}.noise_convs.${i}`, har, { stride: strideF0, pad: Math.floor((strideF0 + 1) / 2) });
      noise = this.snakeBlock(`${g}.noise_res.${i}`, noise, sDecoder, last ? 11 : 7, [1, 3, 5]);
      const k = is.upsampleKernels[i]!;
      h = this.convTranspose(`${g}.ups.${i}`, h, rate, (k - rate) / 2, 0, 1);
      if (last) {
        const padded = mat(h.c, h.t + 1);
        for (let c = 0; c < h.c; c++) { padded.d[c * (h.t + 1)] = h.d[c * h.t + 1]!; padded.d.set(h.d.subarray(c * h.t, (c + 1) * h.t), c * (h.t + 1) + 1); }
        h = padded;
      }
      h = KokoroReference.add(h, noise);
      let sum: Mat | undefined;
      is.resblockKernels.forEach((taps, j) => {
        const r = this.snakeBlock(`${g}.resblocks.${i * kernels + j}`, h, sDecoder, taps, is.resblockDilations[j]!);
        sum = sum ? KokoroReference.add(sum, r) : r;
      });
      h = KokoroReference.map(sum!, (v) => v / kernels);
    });
    const spectrum = this.conv(`${g}.conv_post`, KokoroReference.leaky(h, 0.01), { pad: 3 });
    const audio = KokoroReference.istft(spectrum, is.nFft, is.hop);
    const timeMajor = (m: Mat, channels = m.c) => {
      const out = new Float64Array(m.t * channels);
      for (let t = 0; t < m.t; t++) for (let c = 0; c < channels; c++) out[t * channels + c] = m.d[c * m.t + t]!;
      return out;
    };
    return { audio, durations, textEncoder: timeMajor(te), durationEncoder: timeMajor(x), f0, n, source, har: timeMajor(har), spectrum: timeMajor(spectrum) };
  }
}
