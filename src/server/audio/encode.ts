// Synthesised audio (mono samples in [-1, 1]) in the response formats of /v1/audio/speech,
// whole or as a stream of chunks: pcm (16-bit little-endian samples, no header), wav (a 44-byte
// RIFF header, then the same samples; streamed with the sizes unknown, 0xFFFFFFFF, as OpenAI
// streams it), mp3 (@breezystack/lamejs, 64 kbps) and flac (libflacjs, 16-bit, level 5; a
// streamed file's header leaves the length unknown). OpenAI's opus and aac have no encoder here.
import { createRequire } from 'node:module';
import { Mp3Encoder } from '@breezystack/lamejs';

const require = createRequire(import.meta.url);

export const SPEECH_FORMATS = ['wav', 'pcm', 'flac', 'mp3'] as const;
export type SpeechFormat = (typeof SPEECH_FORMATS)[number];

export const CONTENT_TYPES: Readonly<Record<SpeechFormat, string>> = { wav: 'audio/wav', pcm: 'audio/pcm', flac: 'audio/flac', mp3: 'audio/mpeg' };

const MP3_KBPS = 64;
const FLAC_LEVEL = 5;
/** A streamed WAV's sizes: unknown. */
const UNKNOWN_SIZE = 0xffffffff;

/** Encodes chunks of one stream in order; end() flushes what the encoder still holds; close() frees it (after end(), or instead of it when the stream fails). */
export interface AudioEncoder {
  write(samples: Float32Array): Uint8Array;
  end(): Uint8Array;
  close(): void;
}

function pcm16(samples: Float32Array): Int16Array {
  return Int16Array.from(samples, (x) => Math.max(-32768, Math.min(32767, Math.round(x * 32767))));
}

const bytesOf = (a: Int16Array) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);

// Not Buffer.concat: lamejs's MP3 chunks are Int8Arrays, which it refuses.
function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** The 44-byte header of 16-bit mono PCM: `dataBytes` long, or unknown. */
function wavHeader(rate: number, dataBytes: number | undefined): Uint8Array {
  const b = Buffer.alloc(44);
  b.write('RIFF', 0);
  b.writeUInt32LE(dataBytes === undefined ? UNKNOWN_SIZE : 36 + dataBytes, 4);
  b.write('WAVEfmt ', 8);
  b.writeUInt32LE(16, 16);
  b.writeUInt16LE(1, 20);
  b.writeUInt16LE(1, 22);
  b.writeUInt32LE(rate, 24);
  b.writeUInt32LE(rate * 2, 28);
  b.writeUInt16LE(2, 32);
  b.writeUInt16LE(16, 34);
  b.write('data', 36);
  b.writeUInt32LE(dataBytes ?? UNKNOWN_SIZE, 40);
  return new Uint8Array(b);
}

interface FlacModule {
  isReady(): boolean;
  on(event: 'ready', f: () => void): void;
}
interface FlacEncoder {
  encode(pcm?: Int32Array[]): boolean;
  readonly rawData: Uint8Array[];
  getSamples(): Uint8Array;
  destroy(): void;
}

let flacModule: Promise<FlacModule> | undefined;

async function flacEncoder(rate: number): Promise<FlacEncoder> {
  flacModule ??= (async () => {
    const Flac = (require('libflacjs') as () => FlacModule)();
    if (!Flac.isReady()) await new Promise<void>((r) => Flac.on('ready', r));
    return Flac;
  })();
  const { Encoder } = require('libflacjs/lib/encoder') as { Encoder: new (flac: FlacModule, options: object) => FlacEncoder };
  return new Encoder(await flacModule, { sampleRate: rate, channels: 1, bitsPerSample: 16, compression: FLAC_LEVEL, verify: false });
}

const flacPcm = (samples: Float32Array) => [Int32Array.from(pcm16(samples))];

/** The whole audio as one file. */
export async function encodeAudio(format: SpeechFormat, samples: Float32Array, rate: number): Promise<Uint8Array> {
  switch (format) {
    case 'pcm':
      return bytesOf(pcm16(samples));
    case 'wav':
      return concat([wavHeader(rate, samples.length * 2), bytesOf(pcm16(samples))]);
    case 'mp3': {
      const encoder = new Mp3Encoder(1, rate, MP3_KBPS);
      return concat([encoder.encodeBuffer(pcm16(samples)), encoder.flush()]);
    }
    case 'flac': {
      const encoder = await flacEncoder(rate);
      try {
        encoder.encode(flacPcm(samples));
        encoder.encode();
        return encoder.getSamples();
      } finally {
        encoder.destroy();
      }
    }
  }
}

/** An encoder of chunks that, concatenated, are one file of the format. */
export async function streamEncoder(format: SpeechFormat, rate: number): Promise<AudioEncoder> {
  switch (format) {
    case 'pcm':
      return { write: (s) => bytesOf(pcm16(s)), end: () => new Uint8Array(0), close: () => {} };
    case 'wav': {
      let header: Uint8Array | undefined = wavHeader(rate, undefined);
      const take = () => {
        const h = header ?? new Uint8Array(0);
        header = undefined;
        return h;
      };
      return { write: (s) => concat([take(), bytesOf(pcm16(s))]), end: take, close: () => {} };
    }
    case 'mp3': {
      const encoder = new Mp3Encoder(1, rate, MP3_KBPS);
      return { write: (s) => encoder.encodeBuffer(pcm16(s)), end: () => encoder.flush(), close: () => {} };
    }
    case 'flac': {
      const encoder = await flacEncoder(rate);
      let sent = 0;
      let open = true;
      const fresh = () => {
        const parts = encoder.rawData.slice(sent);
        sent = encoder.rawData.length;
        return concat(parts);
      };
      return {
        write: (s) => {
          encoder.encode(flacPcm(s));
          return fresh();
        },
        end: () => {
          encoder.encode();
          return fresh();
        },
        close: () => {
          if (open) encoder.destroy();
          open = false;
        },
      };
    }
  }
}
