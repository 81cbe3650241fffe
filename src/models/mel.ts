// Whisper's log-mel front end, on the CPU: 16 kHz audio, a periodic Hann window of n_fft
// 400, hop 160, the window's samples reflect-padded by n_fft / 2 at each end (STFT with
// center), the power spectrum's 201 bins through a Slaney-scale, Slaney-normalised mel
// filterbank (0 .. 8 kHz) of 80 or 128 filters, log10(max(x, 1e-10)), clamped to the
// window's maximum - 8, then (x + 4) / 4. A 30 s window (480000 samples, zero-padded past
// the audio's end) gives 3000 frames; STFT's one-past-the-end frame is dropped, as
// openai-whisper and transformers do. The 400-point DFT runs as Bluestein's chirp-z
// transform over fft.js's power-of-two FFT.
import FFT from 'fft.js';

export const SAMPLE_RATE = 16000;
const N_FFT = 400;
export const HOP = 160;
/** Samples per 30 s window. */
const WINDOW_SAMPLES = 30 * SAMPLE_RATE;
const BINS = N_FFT / 2 + 1;
/** The power-of-two FFT the chirp-z transform convolves with: at least 2 * N_FFT - 1. */
const M = 1024;

/** Hz to the Slaney mel scale (librosa's htk=False): linear below 1 kHz, logarithmic above. */
function hzToMel(f: number): number {
  const fSp = 200 / 3;
  if (f < 1000) return f / fSp;
  return 1000 / fSp + Math.log(f / 1000) / (Math.log(6.4) / 27);
}

function melToHz(m: number): number {
  const fSp = 200 / 3;
  const minLogMel = 1000 / fSp;
  if (m < minLogMel) return m * fSp;
  return 1000 * Math.exp((Math.log(6.4) / 27) * (m - minLogMel));
}

/** The filterbank [mels, 201] librosa.filters.mel(sr=16000, n_fft=400, n_mels, norm="slaney") gives, as each filter's non-zero run. */
function melFilters(mels: number): Array<{ first: number; weights: Float32Array }> {
  const fftFreqs = Array.from({ length: BINS }, (_, i) => (i * SAMPLE_RATE) / N_FFT);
  const top = hzToMel(SAMPLE_RATE / 2);
  const hz = Array.from({ length: mels + 2 }, (_, i) => melToHz((top * i) / (mels + 1)));
  return Array.from({ length: mels }, (_, m) => {
    const w = fftFreqs.map((f) => {
      const lower = (f - hz[m]!) / (hz[m + 1]! - hz[m]!);
      const upper = (hz[m + 2]! - f) / (hz[m + 2]! - hz[m + 1]!);
      return Math.max(0, Math.min(lower, upper)) * (2 / (hz[m + 2]! - hz[m]!));
    });
    let first = w.findIndex((v) => v > 0);
    if (first < 0) first = 0;
    let end = w.length;
    while (end > first && w[end - 1] === 0) end--;
    return { first, weights: Float32Array.from(w.slice(first, end)) };
  });
}

/** Bluestein's chirp-z: the first BINS DFT bins' power of a real frame of N_FFT samples. */
class PowerSpectrum {
  private readonly fft = new FFT(M);
  /** exp(-i pi n^2 / N), n < N_FFT, interleaved re/im. */
  private readonly chirp = new Float64Array(2 * N_FFT);
  private readonly kernel: number[];
  private readonly a: number[];
  private readonly fa: number[];
  private readonly conv: number[];

  constructor() {
    for (let n = 0; n < N_FFT; n++) {
      // n^2 mod 2N keeps the angle small, and exact.
      const angle = (-Math.PI * ((n * n) % (2 * N_FFT))) / N_FFT;
      this.chirp[2 * n] = Math.cos(angle);
      this.chirp[2 * n + 1] = Math.sin(angle);
    }
    const b = this.fft.createComplexArray() as number[];
    b.fill(0);
    for (let n = 0; n < N_FFT; n++) {
      const re = this.chirp[2 * n]!;
      const im = -this.chirp[2 * n + 1]!;
      b[2 * n] = re;
      b[2 * n + 1] = im;
      if (n > 0) {
        b[2 * (M - n)] = re;
        b[2 * (M - n) + 1] = im;
      }
    }
    this.kernel = this.fft.createComplexArray() as number[];
    this.fft.transform(this.kernel, b);
    this.a = this.fft.createComplexArray() as number[];
    this.fa = this.fft.createComplexArray() as number[];
    this.conv = this.fft.createComplexArray() as number[];
  }

  /** power[k] = |DFT(frame)[k]|^2 for k < BINS. */
  compute(frame: Float64Array, power: Float64Array): void {
    const { a, fa, conv, kernel, chirp } = this;
    a.fill(0);
    for (let n = 0; n < N_FFT; n++) {
      a[2 * n] = frame[n]! * chirp[2 * n]!;
      a[2 * n + 1] = frame[n]! * chirp[2 * n + 1]!;
    }
    this.fft.transform(fa, a);
    for (let i = 0; i < M; i++) {
      const re = fa[2 * i]! * kernel[2 * i]! - fa[2 * i + 1]! * kernel[2 * i + 1]!;
      const im = fa[2 * i]! * kernel[2 * i + 1]! + fa[2 * i + 1]! * kernel[2 * i]!;
      fa[2 * i] = re;
      fa[2 * i + 1] = im;
    }
    this.fft.inverseTransform(conv, fa);
    for (let k = 0; k < BINS; k++) {
      const re = conv[2 * k]! * chirp[2 * k]! - conv[2 * k + 1]! * chirp[2 * k + 1]!;
      const im = conv[2 * k]! * chirp[2 * k + 1]! + conv[2 * k + 1]! * chirp[2 * k]!;
      power[k] = re * re + im * im;
    }
  }
}

/** Computes 30 s windows' log-mel frames for one filterbank size. */
export class LogMel {
  private readonly filters;
  private readonly spectrum = new PowerSpectrum();
  private readonly window = Float64Array.from({ length: N_FFT }, (_, n) => 0.5 - 0.5 * Math.cos((2 * Math.PI * n) / N_FFT));

  constructor(readonly mels: number) {
    this.filters = melFilters(mels);
  }

  /**
   * The window of `audio` (16 kHz mono) starting at sample `start`: [3000 frames, mels]
   * time-major, as the encoder reads it.
   */
  window30s(audio: Float32Array, start: number): Float32Array {
    const frames = WINDOW_SAMPLES / HOP;
    const pad = N_FFT / 2;
    const sample = (i: number) => (start + i < audio.length && i < WINDOW_SAMPLES ? audio[start + i]! : 0);
    // Reflect padding of the window's samples: index -1 reads 1, WINDOW_SAMPLES reads WINDOW_SAMPLES - 2.
    const padded = (j: number) => {
      let i = j - pad;
      if (i < 0) i = -i;
      else if (i >= WINDOW_SAMPLES) i = 2 * (WINDOW_SAMPLES - 1) - i;
      return sample(i);
    };
    const out = new Float32Array(frames * this.mels);
    const frame = new Float64Array(N_FFT);
    const power = new Float64Array(BINS);
    let max = -Infinity;
    for (let t = 0; t < frames; t++) {
      let silent = true;
      for (let n = 0; n < N_FFT; n++) {
        frame[n] = padded(t * HOP + n) * this.window[n]!;
        if (frame[n] !== 0) silent = false;
      }
      // The zero padding past the audio's end: no transform needed.
      if (silent) power.fill(0);
      else this.spectrum.compute(frame, power);
      for (let m = 0; m < this.mels; m++) {
        const { first, weights } = this.filters[m]!;
        let e = 0;
        for (let i = 0; i < weights.length; i++) e += weights[i]! * power[first + i]!;
        const v = Math.log10(Math.max(e, 1e-10));
        out[t * this.mels + m] = v;
        if (v > max) max = v;
      }
    }
    for (let i = 0; i < out.length; i++) out[i] = (Math.max(out[i]!, max - 8) + 4) / 4;
    return out;
  }
}
