// Uploaded audio to 16 kHz mono: the container recognised by its first bytes (WAV, FLAC,
// MP3), its sample rate, channels and duration read from the header and checked against the
// limits before anything is decoded, then decoded by wavefile (PCM 8/16/24/32-bit, float
// 32/64-bit, A-law, mu-law), @wasm-audio-decoders/flac or mpg123-decoder, the channels
// averaged, and resampled with a windowed-sinc filter.
import { FLACDecoder } from '@wasm-audio-decoders/flac';
import { MPEGDecoder } from 'mpg123-decoder';
import wavefile from 'wavefile';
import { ApiError, badRequest } from '../errors.js';

const AUDIO_LIMITS = { maxSampleRate: 192_000, maxChannels: 8, maxSeconds: 600 } as const;

type Container = 'wav' | 'flac' | 'mp3';

/** What a header says, before decoding. */
interface AudioHeader {
  container: Container;
  sampleRate: number;
  channels: number;
  /** From the header (frame count, data size, or bitrate); undefined where it cannot tell. */
  seconds?: number;
}

const tooLong = (seconds: number) => new ApiError(400, 'invalid_request_error', `the audio is ${seconds.toFixed(1)} s long, past the ${AUDIO_LIMITS.maxSeconds} s limit`, 'audio_too_long');

/** The audio's samples at `rate` Hz, one channel; 400 for what it cannot read or what passes the limits. */
export async function decodeAudio(bytes: Uint8Array, rate: number): Promise<{ samples: Float32Array; seconds: number }> {
  const header = readHeader(bytes);
  if (header.sampleRate < 1 || header.sampleRate > AUDIO_LIMITS.maxSampleRate) throw badRequest(`sample rate ${header.sampleRate} Hz is outside 1 .. ${AUDIO_LIMITS.maxSampleRate} Hz`, 'unsupported_audio');
  if (header.channels < 1 || header.channels > AUDIO_LIMITS.maxChannels) throw badRequest(`${header.channels} channels: at most ${AUDIO_LIMITS.maxChannels} are supported`, 'unsupported_audio');
  if (header.seconds !== undefined && header.seconds > AUDIO_LIMITS.maxSeconds) throw tooLong(header.seconds);
  const { channels, sampleRate } = await decodeSamples(header.container, bytes);
  const length = channels[0]?.length ?? 0;
  const seconds = length / sampleRate;
  if (seconds > AUDIO_LIMITS.maxSeconds) throw tooLong(seconds);
  if (length === 0) throw badRequest('the audio file holds no samples', 'invalid_audio');
  const mono = new Float32Array(length);
  for (const c of channels) for (let i = 0; i < length; i++) mono[i]! += c[i]! / channels.length;
  return { samples: resample(mono, sampleRate, rate), seconds };
}

function readHeader(b: Uint8Array): AudioHeader {
  const ascii = (at: number, n: number) => String.fromCharCode(...b.subarray(at, at + n));
  if (b.length >= 12 && ascii(0, 4) === 'RIFF' && ascii(8, 4) === 'WAVE') return wavHeader(b);
  if (b.length >= 4 && ascii(0, 4) === 'fLaC') return flacHeader(b);
  const mp3 = mp3Header(b);
  if (mp3) return mp3;
  throw badRequest('the file is not audio this server reads: expected WAV, FLAC or MP3', 'unsupported_audio_format');
}

function wavHeader(b: Uint8Array): AudioHeader {
  const view = new DataView(b.buffer, b.byteOffset, b.byteLength);
  let fmt: { format: number; channels: number; rate: number; blockAlign: number } | undefined;
  for (let at = 12; at + 8 <= b.length;) {
    const id = String.fromCharCode(...b.subarray(at, at + 4));
    const size = view.getUint32(at + 4, true);
    if (id === 'fmt ' && at + 24 <= b.length) {
      let format = view.getUint16(at + 8, true);
      // WAVE_FORMAT_EXTENSIBLE: the sub-format GUID's first two bytes are the format code.
      if (format === 0xfffe && at + 34 <= b.length) format = view.getUint16(at + 32, true);
      fmt = { format, channels: view.getUint16(at + 10, true), rate: view.getUint32(at + 12, true), blockAlign: view.getUint16(at + 20, true) };
    } else if (id === 'data') {
      if (!fmt) break;
      if (![1, 3, 6, 7].includes(fmt.format)) throw badRequest(`WAV encoding ${fmt.format} is not supported (PCM, IEEE float, A-law, mu-law)`, 'unsupported_audio_format');
      // 0 and all-ones are a streaming writer's placeholders: then the bytes present count.
      const bytes = size === 0 || size >= 0xffffff00 ? b.length - at - 8 : size;
      return { container: 'wav', sampleRate: fmt.rate, channels: fmt.channels, seconds: fmt.blockAlign > 0 && fmt.rate > 0 ? bytes / fmt.blockAlign / fmt.rate : undefined };
    }
    at += 8 + size + (size % 2);
  }
  throw badRequest('malformed WAV file: no fmt chunk before the data chunk', 'invalid_audio');
}

/** STREAMINFO, the first metadata block: 20-bit sample rate, 3-bit channels - 1, 36-bit sample count. */
function flacHeader(b: Uint8Array): AudioHeader {
  if (b.length < 8 + 18 || (b[4]! & 0x7f) !== 0) throw badRequest('malformed FLAC file: no STREAMINFO block', 'invalid_audio');
  const d = b.subarray(8);
  const sampleRate = (d[10]! << 12) | (d[11]! << 4) | (d[12]! >> 4);
  const channels = ((d[12]! >> 1) & 7) + 1;
  const total = (d[13]! & 0x0f) * 2 ** 32 + ((d[14]! << 24) >>> 0) + (d[15]! << 16) + (d[16]! << 8) + d[17]!;
  return { container: 'flac', sampleRate, channels, seconds: total > 0 && sampleRate > 0 ? total / sampleRate : undefined };
}

const MP3_RATES: Record<number, number[]> = { 3: [44100, 48000, 32000], 2: [22050, 24000, 16000], 0: [11025, 12000, 8000] };
/** Layer III bitrates (kbit/s) by index: MPEG-1, and MPEG-2/2.5. */
const MP3_BITRATES = { 1: [0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320], 2: [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160] };

/** The first MPEG audio frame's header (after an ID3v2 tag), and the duration from a Xing/Info frame count or the bitrate; undefined when the bytes are no MPEG audio. */
function mp3Header(b: Uint8Array): AudioHeader | undefined {
  let at = 0;
  if (b.length >= 10 && String.fromCharCode(b[0]!, b[1]!, b[2]!) === 'ID3') {
    at = 10 + ((b[6]! & 0x7f) << 21) + ((b[7]! & 0x7f) << 14) + ((b[8]! & 0x7f) << 7) + (b[9]! & 0x7f) + (b[5]! & 0x10 ? 10 : 0);
  } else if (!(b[0] === 0xff && (b[1]! & 0xe0) === 0xe0)) {
    return undefined;
  }
  // Skip padding between the tag and the first frame.
  const end = Math.min(b.length - 4, at + 64 * 1024);
  while (at < end && !(b[at] === 0xff && (b[at + 1]! & 0xe0) === 0xe0 && ((b[at + 1]! >> 3) & 3) !== 1 && ((b[at + 1]! >> 1) & 3) !== 0)) at++;
  if (at >= end) throw badRequest('malformed MP3 file: no MPEG audio frame', 'invalid_audio');
  const version = (b[at + 1]! >> 3) & 3;
  const layer = 4 - ((b[at + 1]! >> 1) & 3);
  const rate = MP3_RATES[version]?.[(b[at + 2]! >> 2) & 3];
  if (!rate) throw badRequest('malformed MP3 file: a reserved sample rate', 'invalid_audio');
  const channels = b[at + 3]! >> 6 === 3 ? 1 : 2;
  const mpeg1 = version === 3;
  const samplesPerFrame = layer === 1 ? 384 : layer === 3 && !mpeg1 ? 576 : 1152;
  // A Xing/Info tag sits after the side information of the first frame.
  const side = layer === 3 ? (mpeg1 ? (channels === 1 ? 17 : 32) : channels === 1 ? 9 : 17) : 0;
  const tag = at + 4 + side;
  const ascii = String.fromCharCode(...b.subarray(tag, tag + 4));
  if ((ascii === 'Xing' || ascii === 'Info') && b[tag + 7]! & 1) {
    const frames = new DataView(b.buffer, b.byteOffset + tag + 8, 4).getUint32(0);
    return { container: 'mp3', sampleRate: rate, channels, seconds: (frames * samplesPerFrame) / rate };
  }
  const kbps = layer === 3 ? MP3_BITRATES[mpeg1 ? 1 : 2][b[at + 2]! >> 4] : undefined;
  return { container: 'mp3', sampleRate: rate, channels, seconds: kbps ? ((b.length - at) * 8) / (kbps * 1000) : undefined };
}

async function decodeSamples(container: Container, bytes: Uint8Array): Promise<{ channels: Float32Array[]; sampleRate: number }> {
  try {
    if (container === 'wav') return wavSamples(bytes);
    if (container === 'flac') {
      const decoder = new FLACDecoder();
      await decoder.ready;
      try {
        const out = await decoder.decodeFile(bytes);
        if (out.samplesDecoded === 0 && out.errors.length > 0) throw new Error(out.errors[0]!.message);
        return { channels: out.channelData, sampleRate: out.sampleRate };
      } finally {
        decoder.free();
      }
    }
    const decoder = new MPEGDecoder();
    await decoder.ready;
    try {
      const out = decoder.decode(bytes);
      if (out.samplesDecoded === 0 && out.errors.length > 0) throw new Error(out.errors[0]!.message);
      return { channels: out.channelData, sampleRate: out.sampleRate };
    } finally {
      decoder.free();
    }
  } catch (e) {
    if (e instanceof ApiError) throw e;
    throw badRequest(`could not decode the ${container.toUpperCase()} file: ${(e as Error).message}`, 'invalid_audio');
  }
}

/**
 * A WAV file's channels: wavefile parses the container; PCM and float samples are converted
 * here, in one typed pass (wavefile's own per-sample conversion takes seconds a minute of
 * audio); A-law and mu-law are expanded by wavefile to 16-bit first.
 */
function wavSamples(bytes: Uint8Array): { channels: Float32Array[]; sampleRate: number } {
  const wav = new wavefile.WaveFile(bytes);
  if (wav.bitDepth === '8a') wav.fromALaw();
  else if (wav.bitDepth === '8m') wav.fromMuLaw();
  const fmt = wav.fmt as { sampleRate: number; numChannels: number; bitsPerSample: number };
  const data = (wav.data as { samples: Uint8Array }).samples;
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const float = wav.bitDepth === '32f' || wav.bitDepth === '64';
  const width = fmt.bitsPerSample / 8;
  const n = fmt.numChannels;
  const frames = Math.floor(data.length / (width * n));
  const read: (at: number) => number = float
    ? width === 4 ? (at) => view.getFloat32(at, true) : (at) => view.getFloat64(at, true)
    : width === 1 ? (at) => (view.getUint8(at) - 128) / 128
    : width === 2 ? (at) => view.getInt16(at, true) / 32768
    : width === 3 ? (at) => (((view.getUint8(at + 2) << 24) | (view.getUint8(at + 1) << 16) | (view.getUint8(at) << 8)) >> 8) / 8388608
    : width === 4 ? (at) => view.getInt32(at, true) / 2147483648
    : () => {
      throw badRequest(`WAV samples of ${fmt.bitsPerSample} bits are not supported (8, 16, 24, 32; float 32, 64)`, 'unsupported_audio_format');
    };
  const channels = Array.from({ length: n }, () => new Float32Array(frames));
  for (let f = 0; f < frames; f++) for (let c = 0; c < n; c++) channels[c]![f] = read((f * n + c) * width);
  return { channels, sampleRate: fmt.sampleRate };
}

/** Taps each side of a resampled value. */
const SINC_TAPS = 16;

/**
 * x at `from` Hz to `to` Hz: a Hann-windowed sinc low-pass at the lower Nyquist frequency.
 * Output i sits at input position i * from / to, whose fractional part takes to / gcd(from,
 * to) values: each phase's taps are computed once.
 */
function resample(x: Float32Array, from: number, to: number): Float32Array {
  if (from === to) return x;
  const cutoff = Math.min(1, to / from);
  const reach = Math.ceil(SINC_TAPS / cutoff);
  const g = gcd(from, to);
  const step = from / g;
  const phases = to / g;
  const n = Math.floor((x.length * to) / from);
  const out = new Float32Array(n);
  const taps = new Map<number, Float64Array>();
  const tapsOf = (phase: number) => {
    let w = taps.get(phase);
    if (!w) {
      const frac = phase / phases;
      w = Float64Array.from({ length: 2 * reach + 1 }, (_, k) => {
        const t = (k - reach - frac) * cutoff;
        if (Math.abs(t) > SINC_TAPS) return 0;
        const sinc = t === 0 ? 1 : Math.sin(Math.PI * t) / (Math.PI * t);
        return sinc * (0.5 + 0.5 * Math.cos((Math.PI * t) / SINC_TAPS));
      });
      const sum = w.reduce((a, v) => a + v, 0);
      for (let k = 0; k < w.length; k++) w[k]! /= sum;
      taps.set(phase, w);
    }
    return w;
  };
  for (let i = 0; i < n; i++) {
    const base = Math.floor((i * step) / phases);
    const w = tapsOf((i * step) % phases);
    let sum = 0;
    for (let k = 0; k < w.length; k++) {
      const j = base - reach + k;
      if (j >= 0 && j < x.length) sum += x[j]! * w[k]!;
    }
    out[i] = sum;
  }
  return out;
}

function gcd(a: number, b: number): number {
  return b === 0 ? a : gcd(b, a % b);
}
