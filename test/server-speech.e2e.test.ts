// The text-to-speech route through a live audio-only server (-m a Kokoro checkpoint: the tiny
// random-weight one of helpers/kokoro-checkpoint.ts, its vocabulary widened to every symbol
// the helper knows and its phoneme ceiling to 46) with the official openai client and raw
// fetch: every format (WAV and PCM byte for byte against the speaker run directly, FLAC
// decoded by libFLAC to the same samples, MP3 decoded to the same length), byte-identical
// repeats, both streaming modes, a client leaving mid-stream, a long input cut at its
// clauses, every error, and the generation routes' 501. One duration frame is two of the
// decoder's frames (F0 and energy are predicted at twice the duration rate), each
// gen_istft_hop_size x prod(upsample_rates) samples: the WAV's length is checked against the
// predicted durations with that. A second server over a speaker with no queue and a 1.5 s
// timeout answers the 503 and the 504.
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SPEECH_ONLY } from '../src/engine/embedding-only-engine.js';
import { loadSpeaker, type Speech } from '../src/engine/speaker.js';
import type { KokoroModel } from '../src/models/kokoro.js';
import { decodeAudio } from '../src/server/audio/decode.js';
import { makeKokoroCheckpoint, TINY_KOKORO, type KokoroShape } from './helpers/kokoro-checkpoint.js';
import { flacSamples } from './helpers/audio-fixtures.js';
import { expectErrorResponse, expectQueueFullThenTimeout, useAudioWorker } from './helpers/live-server.js';
import { readSse } from './helpers/sse.js';

const SHAPE: KokoroShape = { ...TINY_KOKORO, tokens: 43, bert: { ...TINY_KOKORO.bert, positions: 48 } };
const VOICES = ['af_heart', 'bf_emma'];
const RATE = 24000;

let dir: string;
/** Samples per predicted duration frame. */
let frameSamples: number;

beforeAll(() => {
  dir = makeKokoroCheckpoint(SHAPE, { seed: 5, voices: VOICES });
  const istft = (JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as { istftnet: { gen_istft_hop_size: number; upsample_rates: number[] } }).istftnet;
  frameSamples = 2 * istft.gen_istft_hop_size * istft.upsample_rates.reduce((a, b) => a * b, 1);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const lenient = useAudioWorker(() => loadSpeaker({ modelDir: dir, alias: 'kokoro-tiny-random', maxQueue: 8, timeoutMs: 120_000 }), SPEECH_ONLY, (speaker) => ({ speaker }));
const strict = useAudioWorker(() => loadSpeaker({ modelDir: dir, maxQueue: 0, timeoutMs: 1500 }), SPEECH_ONLY, (speaker) => ({ speaker }));

const TEXT = 'Hello there. The 3 foxes paid $5.50, said Dr. Smith!';

const spoken = new Map<string, Promise<Speech>>();

/** The speaker's own audio for `input`, as the route asks for it (each asked once). */
function direct(input: string, voice = 'af_heart', speed = 1, seed = 0): Promise<Speech> {
  const key = JSON.stringify([input, voice, speed, seed]);
  if (!spoken.has(key)) spoken.set(key, lenient.worker.speak({ pieces: lenient.worker.pieces(input, voice), voice, speed, seed }));
  return spoken.get(key)!;
}

const pcm16 = (audio: Float32Array) => new Uint8Array(Int16Array.from(audio, (x) => Math.max(-32768, Math.min(32767, Math.round(x * 32767)))).buffer);
const frames = (speech: Speech) => speech.durations.reduce((n, d) => n + d.reduce((a, b) => a + b, 0), 0);

function post(body: unknown, url = lenient.live.url) {
  return fetch(`${url}/v1/audio/speech`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body) });
}

describe('through the openai client', () => {
  it('answers wav, pcm, flac and mp3 with the speaker\'s audio, as long as the predicted durations', async () => {
    const speech = await direct(TEXT);
    expect(speech.durations.length).toBe(lenient.worker.pieces(TEXT, 'af_heart').length);
    expect(speech.durations.length).toBeGreaterThanOrEqual(2);
    expect(speech.audio.length).toBe(frames(speech) * frameSamples);
    expect((lenient.worker as unknown as { model: KokoroModel }).model.samplesPerFrame).toBe(frameSamples);
    const create = async (response_format: 'wav' | 'pcm' | 'flac' | 'mp3') => {
      const res = await lenient.live.openai.audio.speech.create({ model: 'kokoro', voice: 'af_heart', input: TEXT, response_format });
      return { type: res.headers.get('content-type'), bytes: new Uint8Array(await res.arrayBuffer()) };
    };
    const wav = await create('wav');
    expect(wav.type).toBe('audio/wav');
    const view = new DataView(wav.bytes.buffer);
    const ascii = (at: number) => String.fromCharCode(...wav.bytes.subarray(at, at + 4));
    expect([ascii(0), ascii(8), ascii(12), ascii(36)]).toEqual(['RIFF', 'WAVE', 'fmt ', 'data']);
    expect([view.getUint16(20, true), view.getUint16(22, true), view.getUint32(24, true), view.getUint16(34, true)]).toEqual([1, 1, RATE, 16]);
    expect(view.getUint32(40, true)).toBe(speech.audio.length * 2);
    expect(view.getUint32(4, true)).toBe(36 + speech.audio.length * 2);
    expect(wav.bytes.subarray(44)).toEqual(pcm16(speech.audio));
    const pcm = await create('pcm');
    expect(pcm.type).toBe('audio/pcm');
    expect(pcm.bytes).toEqual(wav.bytes.subarray(44));
    const flac = await create('flac');
    expect(flac.type).toBe('audio/flac');
    // Lossless: the WAV's 16-bit samples (random weights reach past full scale: clipped).
    expect(await flacSamples(flac.bytes)).toEqual(new Int16Array(wav.bytes.slice(44).buffer));
    const mp3 = await create('mp3');
    expect(mp3.type).toBe('audio/mpeg');
    // MP3 frames pad the end (the encoder's delay and the last frame of 576 samples at 24 kHz).
    const mp3Seconds = (await decodeAudio(mp3.bytes, RATE)).seconds;
    expect(mp3Seconds).toBeGreaterThanOrEqual(speech.audio.length / RATE);
    expect(mp3Seconds).toBeLessThan(speech.audio.length / RATE + 0.1);
  });

  it('gives byte-identical audio for the same input, voice, speed and seed; speed and voice change it', async () => {
    const wav = async (fields: Record<string, unknown> = {}) => {
      const res = await lenient.live.openai.audio.speech.create({ model: 'kokoro', voice: 'af_heart', input: 'Good morning.', response_format: 'wav', ...fields });
      return new Uint8Array(await res.arrayBuffer());
    };
    const first = await wav();
    expect(await wav()).toEqual(first);
    expect(await wav({ voice: { id: 'af_heart' } })).toEqual(first);
    const fast = await direct('Good morning.', 'af_heart', 2);
    expect((await wav({ speed: 2 })).subarray(44)).toEqual(pcm16(fast.audio));
    expect(fast.audio.length).toBeLessThan((first.length - 44) / 2);
    expect(await wav({ voice: 'bf_emma' })).not.toEqual(first);
    expect((await wav({ seed: 7 })).subarray(44)).toEqual(pcm16((await direct('Good morning.', 'af_heart', 1, 7)).audio));
  });
});

describe('streaming', () => {
  it('streams a WAV of unknown length piece by piece (stream_format audio)', async () => {
    const speech = await direct(TEXT);
    const res = await post({ input: TEXT, voice: 'af_heart', response_format: 'wav', stream_format: 'audio' });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('audio/wav');
    expect(res.headers.get('transfer-encoding')).toBe('chunked');
    const reader = res.body!.getReader();
    const parts: Uint8Array[] = [];
    for (let r = await reader.read(); !r.done; r = await reader.read()) parts.push(r.value);
    expect(parts.length).toBeGreaterThanOrEqual(2);
    const bytes = new Uint8Array(Buffer.concat(parts));
    expect(new DataView(bytes.buffer).getUint32(40, true)).toBe(0xffffffff);
    expect(bytes.subarray(44)).toEqual(pcm16(speech.audio));
    const flac = await post({ input: TEXT, voice: 'af_heart', response_format: 'flac', stream_format: 'audio' });
    expect(await flacSamples(new Uint8Array(await flac.arrayBuffer()))).toEqual(new Int16Array(pcm16(speech.audio).buffer));
  });

  it('streams speech.audio.delta events, then speech.audio.done with the usage (stream_format sse)', async () => {
    const speech = await direct(TEXT);
    const res = await post({ input: TEXT, voice: 'af_heart', response_format: 'pcm', stream_format: 'sse' });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const events = (await readSse(res)) as Array<{ type: string; audio?: string; usage?: Record<string, number> }>;
    const deltas = events.filter((e) => e.type === 'speech.audio.delta');
    expect(deltas.length).toBe(speech.durations.length);
    expect(new Uint8Array(Buffer.concat(deltas.map((e) => Buffer.from(e.audio!, 'base64'))))).toEqual(pcm16(speech.audio));
    const phonemes = lenient.worker.pieces(TEXT, 'af_heart').reduce((n, p) => n + p.ids.length, 0);
    expect(events.at(-1)).toEqual({ type: 'speech.audio.done', usage: { input_tokens: phonemes, output_tokens: frames(speech), total_tokens: phonemes + frames(speech) } });
  });

  it('stops synthesising for a client that leaves mid-stream', async () => {
    const input = 'One more time. '.repeat(24);
    const pieces = lenient.worker.pieces(input, 'af_heart').length;
    expect(pieces).toBe(24);
    // Counts the passes the model runs (the speaker's own model, unchanged otherwise).
    const model = (lenient.worker as unknown as { model: KokoroModel }).model;
    const synthesize = model.synthesize.bind(model);
    let passes = 0;
    model.synthesize = (...args) => {
      passes++;
      return synthesize(...args);
    };
    try {
      const gone = new AbortController();
      const res = await fetch(`${lenient.live.url}/v1/audio/speech`, {
        method: 'POST', headers: { 'content-type': 'application/json' }, signal: gone.signal,
        body: JSON.stringify({ input, voice: 'af_heart', response_format: 'pcm', stream_format: 'audio' }),
      });
      await res.body!.getReader().read();
      gone.abort();
      for (let i = 0; lenient.worker.pending > 0 && i < 1000; i++) await new Promise((r) => setTimeout(r, 20));
      expect(lenient.worker.pending).toBe(0);
      expect(passes).toBeLessThan(pieces);
    } finally {
      model.synthesize = synthesize;
    }
  });
});

describe('long input', () => {
  it('cuts a sentence past the phoneme ceiling at its clauses and speaks every piece', async () => {
    const input = 'When the sun rose over the hills, the birds began to sing, the river ran fast and cold, and the old man walked slowly down to the water. Then he sat.';
    const pieces = lenient.worker.pieces(input, 'af_heart');
    expect(pieces.length).toBeGreaterThanOrEqual(4);
    for (const p of pieces) expect(p.ids.length).toBeLessThanOrEqual(lenient.worker.info.contextSize);
    expect(pieces.slice(0, -2).every((p) => /,$/.test(p.phonemes))).toBe(true);
    const res = await lenient.live.openai.audio.speech.create({ model: 'kokoro', voice: 'af_heart', input, response_format: 'wav' });
    const bytes = new Uint8Array(await res.arrayBuffer());
    const speech = await direct(input);
    expect(speech.durations.length).toBe(pieces.length);
    expect(bytes.length - 44).toBe(frames(speech) * frameSamples * 2);
  });
});

describe('errors and limits', () => {
  it('answers 400 for missing or empty input, an unknown voice, an unsupported format and a speed out of range', async () => {
    await expectErrorResponse(await post({ voice: 'af_heart' }), 400, /^input is required$/);
    await expectErrorResponse(await post({ input: 'hi' }), 400, /^voice is required$/);
    await expectErrorResponse(await post({ input: '  ', voice: 'af_heart' }), 400, /^input must not be empty/);
    await expectErrorResponse(await post({ input: '... !', voice: 'af_heart' }), 400, /^input has nothing to speak/);
    await expectErrorResponse(await post({ input: 'x'.repeat(4097), voice: 'af_heart' }), 400, /^input is 4097 characters, past the 4096 character limit/);
    await expectErrorResponse(await post({ input: 'hi', voice: 'alloy' }), 400, /^voice "alloy" is not one of this model's voices: af_heart, bf_emma$/);
    for (const format of ['opus', 'aac', 'ogg']) await expectErrorResponse(await post({ input: 'hi', voice: 'af_heart', response_format: format }), 400, new RegExp(`^response_format "${format}" is not supported: this server encodes wav, pcm, flac, mp3$`));
    for (const speed of [0.2, 4.5]) await expectErrorResponse(await post({ input: 'hi', voice: 'af_heart', speed }), 400, /^speed must be between 0.25 and 4.0/);
    await expectErrorResponse(await post({ input: 'hi', voice: 'af_heart', speed: 'fast' }), 400, /^speed must be number$/);
    await expectErrorResponse(await post({ input: 'hi', voice: 'af_heart', stream_format: 'chunks' }), 400, /^stream_format must be one of: audio, sse$/);
    await expectErrorResponse(await post({ input: 'hi', voice: 'af_heart', seed: -1 }), 400, /^seed must be >= 0$/);
    await expectErrorResponse(await post('{"input": '), 400, /./);
    // The openai client sees the same 400.
    const err = await lenient.live.openai.audio.speech.create({ model: 'kokoro', voice: 'nova', input: 'hi' }).catch((e: unknown) => e);
    expect((err as { status: number }).status).toBe(400);
  });

  it('answers 503 when the queue is full and 504 past the timeout', async () => {
    // The longest input: past the timeout on any machine.
    const long = 'The quick brown fox jumps over the lazy dog. '.repeat(91);
    expect(long.length).toBe(4095);
    const running = post({ input: long, voice: 'af_heart', response_format: 'wav' }, strict.live.url);
    await expectQueueFullThenTimeout(strict.worker, running, () => post({ input: 'hi', voice: 'af_heart' }, strict.live.url), /^the speech request timed out after 1\.5 s/);
  });
});

describe('the audio-only server', () => {
  it('answers the generation routes with 501 naming the model kind, and reports the model', async () => {
    const chat = await lenient.live.post('/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }] });
    expect(chat.status).toBe(501);
    expect(chat.body.error.message).toMatch(/^This server's model \(-m\) is a Kokoro text-to-speech checkpoint: it serves text to speech only/);
    const form = new FormData();
    form.append('file', new Blob([new Uint8Array(64)]), 'a.wav');
    const transcribe = await fetch(`${lenient.live.url}/v1/audio/transcriptions`, { method: 'POST', body: form });
    expect(transcribe.status).toBe(501);
    const props = (await (await fetch(`${lenient.live.url}/props`)).json()) as { capabilities: string[] };
    expect(props.capabilities).toEqual(['speech']);
    expect((await lenient.live.openai.models.list()).data.map((m) => m.id)).toContain('kokoro-tiny-random');
    // /tokenize maps the phoneme alphabet to the model's input ids.
    const ids = lenient.worker.pieces('Hello.', 'af_heart')[0]!;
    expect((await lenient.live.post('/tokenize', { content: ids.phonemes })).body.tokens).toEqual(ids.ids);
  });
});
