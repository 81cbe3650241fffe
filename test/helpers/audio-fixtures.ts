// Audio files made in the tests: WAV in every encoding wavefile writes, FLAC and MP3 (the
// speech route's encoders), from a signal given as samples in [-1, 1].
import { createRequire } from 'node:module';
import wavefile from 'wavefile';
import { encodeAudio } from '../../src/server/audio/encode.js';

const require = createRequire(import.meta.url);

/** A deterministic test signal: a few tones under a slow envelope, plus noise, at `rate` Hz. */
export function testSignal(seconds: number, rate = 16000, seed = 1): Float32Array {
  let s = seed >>> 0 || 1;
  const noise = () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 2 ** 32 - 0.5;
  };
  return Float32Array.from({ length: Math.round(seconds * rate) }, (_, i) => {
    const t = i / rate;
    const env = 0.5 + 0.5 * Math.sin(2 * Math.PI * 0.7 * t);
    return 0.6 * env * (0.5 * Math.sin(2 * Math.PI * 220 * t) + 0.3 * Math.sin(2 * Math.PI * 1375 * t)) + 0.05 * noise();
  });
}

export type WavEncoding = '8' | '16' | '24' | '32' | '32f' | '64' | '8a' | '8m';

/** A WAV file of `channels` copies of `samples`, in `encoding` (16-bit written here, the others by wavefile). */
export function wav(samples: Float32Array, rate: number, encoding: WavEncoding = '16', channels = 1): Uint8Array {
  if (encoding === '16') {
    const b = wavHeaderOnly(rate, channels, samples.length);
    const view = new DataView(b.buffer, b.byteOffset + 44);
    samples.forEach((x, i) => {
      for (let c = 0; c < channels; c++) view.setInt16((i * channels + c) * 2, Math.max(-32768, Math.min(32767, Math.round(x * 32767))), true);
    });
    return b;
  }
  const file = new wavefile.WaveFile();
  const data = channels === 1 ? Float64Array.from(samples) : Array.from({ length: channels }, () => Float64Array.from(samples));
  file.fromScratch(channels, rate, '32f', data);
  if (encoding === '8a' || encoding === '8m') {
    file.toBitDepth('16');
    if (encoding === '8a') file.toALaw();
    else file.toMuLaw();
  } else if (encoding !== '32f') {
    file.toBitDepth(encoding);
  }
  return file.toBuffer();
}

/** A WAV header claiming `rate` Hz, `channels` channels and `claimed` frames (default: those present) over `frames` frames of 16-bit silence. */
export function wavHeaderOnly(rate: number, channels: number, frames: number, claimed = frames): Uint8Array {
  const data = frames * channels * 2;
  const b = Buffer.alloc(44 + data);
  b.write('RIFF', 0);
  b.writeUInt32LE(36 + claimed * channels * 2, 4);
  b.write('WAVEfmt ', 8);
  b.writeUInt32LE(16, 16);
  b.writeUInt16LE(1, 20);
  b.writeUInt16LE(channels, 22);
  b.writeUInt32LE(rate, 24);
  b.writeUInt32LE(rate * channels * 2, 28);
  b.writeUInt16LE(channels * 2, 32);
  b.writeUInt16LE(16, 34);
  b.write('data', 36);
  b.writeUInt32LE(claimed * channels * 2, 40);
  return new Uint8Array(b);
}

/** A 16-bit FLAC file of `samples` (mono), as the speech route encodes one. */
export const flac = (samples: Float32Array, rate: number): Promise<Uint8Array> => encodeAudio('flac', samples, rate);

/** A 64 kbps MP3 file of `samples` (mono), as the speech route encodes one. */
export const mp3 = (samples: Float32Array, rate: number): Promise<Uint8Array> => encodeAudio('mp3', samples, rate);

interface FlacModule {
  isReady(): boolean;
  on(event: 'ready', f: () => void): void;
}

/**
 * A 16-bit mono FLAC file's samples, decoded by libFLAC itself (libflacjs): the reference
 * decoder, which reads frames of full-scale noise that @wasm-audio-decoders/flac drops.
 */
export async function flacSamples(bytes: Uint8Array): Promise<Int16Array> {
  const Flac = (require('libflacjs') as () => FlacModule)();
  if (!Flac.isReady()) await new Promise<void>((r) => Flac.on('ready', r));
  const { Decoder } = require('libflacjs/lib/decoder') as { Decoder: new (flac: FlacModule) => { decode(b: Uint8Array): boolean; getSamples(interleaved: true): Uint8Array; destroy(): void } };
  const decoder = new Decoder(Flac);
  try {
    if (!decoder.decode(new Uint8Array(bytes))) throw new Error('libFLAC could not decode the file');
    const pcm = decoder.getSamples(true);
    return new Int16Array(pcm.buffer.slice(pcm.byteOffset, pcm.byteOffset + pcm.byteLength));
  } finally {
    decoder.destroy();
  }
}
