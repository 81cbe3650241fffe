// The speech-to-text routes through a live audio-only server (-m a Whisper checkpoint: the
// tiny random-weight one of helpers/whisper-checkpoint.ts) with the official openai client
// and raw multipart: every response_format, streaming, translations, WAV in each encoding,
// FLAC and MP3 made here, a 70 s file over three windows, every error and limit, and the
// generation routes' 501. Random weights give random text, so each answer is checked
// against the transcriber run directly on the same decoded samples. A second server over a
// transcriber with no queue and a 1.5 s timeout answers the 503 and the 504.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AUDIO_ONLY } from '../src/engine/embedding-only-engine.js';
import { loadTranscriber, type TranscribeRequest } from '../src/engine/transcriber.js';
import { SAMPLE_RATE } from '../src/models/mel.js';
import { decodeAudio } from '../src/server/audio/decode.js';
import { flac, mp3, testSignal, wav, wavHeaderOnly } from './helpers/audio-fixtures.js';
import { expectErrorResponse, expectQueueFullThenTimeout, useAudioWorker } from './helpers/live-server.js';
import { readSse } from './helpers/sse.js';
import { makeWhisperCheckpoint } from './helpers/whisper-checkpoint.js';

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'whisper-e2e-'));
  makeWhisperCheckpoint(dir, 5);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const lenient = useAudioWorker(() => loadTranscriber({ modelDir: dir, alias: 'whisper-tiny-random', maxQueue: 8, timeoutMs: 120_000 }), AUDIO_ONLY, (transcriber) => ({ transcriber, metrics: true }));
const strict = useAudioWorker(() => loadTranscriber({ modelDir: dir, maxQueue: 0, timeoutMs: 1500 }), AUDIO_ONLY, (transcriber) => ({ transcriber }));

const speech = testSignal(1);
const speechWav = wav(speech, SAMPLE_RATE, '16');

/** The transcriber's own answer for `bytes` as the route decodes them. */
async function direct(bytes: Uint8Array, options: Partial<TranscribeRequest> = {}) {
  const { samples } = await decodeAudio(bytes, SAMPLE_RATE);
  return lenient.worker.transcribe({ audio: samples, task: 'transcribe', temperatures: [0], timestamps: false, ...options });
}

/** A raw multipart POST of `fields` and, unless null, the file. */
function postForm(path: string, fields: Record<string, string | string[]>, file: Uint8Array | null = speechWav, url = lenient.live.url) {
  const form = new FormData();
  if (file) form.append('file', new Blob([new Uint8Array(file)]), 'audio.wav');
  for (const [k, v] of Object.entries(fields)) for (const x of [v].flat()) form.append(k, x);
  return fetch(`${url}${path}`, { method: 'POST', body: form });
}

describe('through the openai client', () => {
  it('transcribes in json, text, verbose_json, srt and vtt, and streams, as the transcriber does', async () => {
    const plain = await direct(speechWav);
    const stamped = await direct(speechWav, { timestamps: true });
    expect(plain.text.length).toBeGreaterThan(0);
    const file = () => toFile(speechWav, 'speech.wav');
    const json = await lenient.live.openai.audio.transcriptions.create({ file: await file(), model: 'whisper-1' });
    expect(json).toEqual({ text: plain.text });
    const text = await lenient.live.openai.audio.transcriptions.create({ file: await file(), model: 'whisper-1', response_format: 'text' });
    expect(text).toBe(plain.text);
    const verbose = await lenient.live.openai.audio.transcriptions.create({ file: await file(), model: 'whisper-1', response_format: 'verbose_json', timestamp_granularities: ['segment'] });
    expect(verbose).toMatchObject({ task: 'transcribe', duration: 1, text: stamped.text, language: { en: 'english', de: 'german', fr: 'french', es: 'spanish' }[stamped.language] });
    expect(verbose.segments!.map((s) => [s.start, s.end, s.text, s.tokens])).toEqual(stamped.segments.map((s) => [s.start, s.end, s.text, s.tokens]));
    for (const s of verbose.segments!) {
      expect(s.end).toBeGreaterThanOrEqual(s.start);
      expect(Object.keys(s).sort()).toEqual(['avg_logprob', 'compression_ratio', 'end', 'id', 'no_speech_prob', 'seek', 'start', 'temperature', 'text', 'tokens']);
    }
    const clock = (t: number, mark: string) => `00:00:${String(Math.floor(t)).padStart(2, '0')}${mark}${String(Math.round((t % 1) * 1000)).padStart(3, '0')}`;
    const srt = await lenient.live.openai.audio.transcriptions.create({ file: await file(), model: 'whisper-1', response_format: 'srt' });
    expect(srt).toBe(stamped.segments.map((s, i) => `${i + 1}\n${clock(s.start, ',')} --> ${clock(s.end, ',')}\n${s.text.trim()}\n\n`).join(''));
    const vtt = await lenient.live.openai.audio.transcriptions.create({ file: await file(), model: 'whisper-1', response_format: 'vtt' });
    expect(vtt).toBe(`WEBVTT\n\n${stamped.segments.map((s) => `${clock(s.start, '.')} --> ${clock(s.end, '.')}\n${s.text.trim()}\n\n`).join('')}`);
    const stream = await lenient.live.openai.audio.transcriptions.create({ file: await file(), model: 'whisper-1', stream: true });
    let deltas = '';
    let done: string | undefined;
    for await (const event of stream) {
      if (event.type === 'transcript.text.delta') deltas += event.delta;
      if (event.type === 'transcript.text.done') done = event.text;
    }
    expect(done).toBe(plain.text);
    expect(deltas.trim()).toBe(plain.text);
  });

  it('translates with the translate task, and names a given language', async () => {
    const translated = await lenient.live.openai.audio.translations.create({ file: await toFile(speechWav, 'speech.wav'), model: 'whisper-1', response_format: 'text' });
    expect(translated).toBe((await direct(speechWav, { task: 'translate' })).text);
    const german = await postForm('/v1/audio/transcriptions', { language: 'German', response_format: 'verbose_json' });
    expect(((await german.json()) as { language: string }).language).toBe('german');
  });
});

describe('temperature', () => {
  it('falls back to the next temperature when the greedy window repeats itself or is unlikely', async () => {
    const greedy = await direct(speechWav, { timestamps: true });
    const res = await postForm('/v1/audio/transcriptions', { response_format: 'verbose_json', temperature: '0,0.6' });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { segments: Array<{ temperature: number }> };
    const w = greedy.segments[0]!;
    // The random model repeats itself greedily (its text compresses past 2.4): the fallback runs.
    expect(w.compressionRatio > 2.4 || w.avgLogprob < -1).toBe(true);
    expect(body.segments.length).toBeGreaterThan(0);
    expect(body.segments.map((s) => s.temperature)).toEqual(body.segments.map(() => 0.6));
  });
});

describe('audio containers', () => {
  it('reads WAV (24-bit stereo 44.1 kHz), FLAC and MP3 uploads', async () => {
    const files: Array<[string, Uint8Array]> = [
      ['wav', wav(testSignal(0.5, 44100), 44100, '24', 2)],
      ['flac', await flac(testSignal(0.5, 22050), 22050)],
      ['mp3', await mp3(testSignal(0.5, 44100), 44100)],
    ];
    for (const [name, bytes] of files) {
      const res = await postForm('/audio/transcriptions', { response_format: 'verbose_json' }, bytes);
      expect(res.status, name).toBe(200);
      const body = (await res.json()) as { duration: number; text: string };
      // MP3 frames pad the end (the encoder's delay and the last frame).
      expect(body.duration, name).toBeGreaterThanOrEqual(0.5);
      expect(body.duration, name).toBeLessThan(0.6);
      if (name === 'flac') expect(body.text).toBe((await direct(bytes, { timestamps: true })).text);
    }
  });

  it('transcribes a 70 s file window by window, streaming each window\'s text', async () => {
    const res = await postForm('/v1/audio/transcriptions', { response_format: 'text', stream: 'true' }, wav(testSignal(70, 8000, 3), 8000, '16'));
    expect(res.status).toBe(200);
    const events = (await readSse(res)) as Array<{ type: string; delta?: string; text?: string }>;
    const deltas = events.filter((e) => e.type === 'transcript.text.delta');
    expect(deltas).toHaveLength(3);
    const done = events.find((e) => e.type === 'transcript.text.done')!;
    expect(deltas.map((e) => e.delta).join('').trim()).toBe(done.text);
  });
});

describe('errors and limits', () => {
  it('answers 400 for a missing file, bad fields, a malformed body and what is not audio', async () => {
    await expectErrorResponse(await postForm('/v1/audio/transcriptions', { model: 'whisper-1' }, null), 400, /^file is required/);
    await expectErrorResponse(await postForm('/v1/audio/transcriptions', { response_format: 'xml' }), 400, /^response_format must be one of: json, text, srt, verbose_json, vtt/);
    await expectErrorResponse(await postForm('/v1/audio/transcriptions', { colour: 'blue' }), 400, /^unknown field colour/);
    await expectErrorResponse(await postForm('/v1/audio/transcriptions', { temperature: 'hot' }), 400, /^temperature must match/);
    await expectErrorResponse(await postForm('/v1/audio/transcriptions', { temperature: '0.4,0.2' }), 400, /^temperature must be a number in 0 \.\. 1, or several increasing ones/);
    await expectErrorResponse(await postForm('/v1/audio/transcriptions', { language: 'xx' }), 400, /^language "xx" is not a language Whisper knows/);
    await expectErrorResponse(await postForm('/v1/audio/transcriptions', { language: 'ja' }), 400, /^language "ja" is not one of this model's: en, de, es, fr/);
    await expectErrorResponse(await postForm('/v1/audio/transcriptions', { 'timestamp_granularities[]': 'word' }), 400, /"word" is not supported/);
    await expectErrorResponse(await postForm('/v1/audio/transcriptions', { stream: 'true', response_format: 'srt' }), 400, /^stream is supported with response_format json or text/);
    await expectErrorResponse(await postForm('/v1/audio/transcriptions', {}, new Uint8Array(4096).fill(7)), 400, /not audio this server reads: expected WAV, FLAC or MP3/);
    const json = await fetch(`${lenient.live.url}/v1/audio/transcriptions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"file":"x"}' });
    await expectErrorResponse(json, 400, /multipart\/form-data/);
    const broken = await fetch(`${lenient.live.url}/v1/audio/translations`, {
      method: 'POST', headers: { 'content-type': 'multipart/form-data; boundary=XYZ' }, body: '--XYZ\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\nRIFF',
    });
    await expectErrorResponse(broken, 400, /^malformed multipart body/);
  });

  it('enforces the upload, sample-rate, channel and duration limits from the headers', async () => {
    await expectErrorResponse(await postForm('/v1/audio/transcriptions', {}, new Uint8Array(25 * 1024 * 1024 + 1)), 413, /exceeds the 25 MiB limit/);
    await expectErrorResponse(await postForm('/v1/audio/transcriptions', {}, wavHeaderOnly(384_000, 1, 100)), 400, /^sample rate 384000 Hz is outside 1 \.\. 192000 Hz/);
    await expectErrorResponse(await postForm('/v1/audio/transcriptions', {}, wavHeaderOnly(16000, 9, 100)), 400, /^9 channels: at most 8/);
    await expectErrorResponse(await postForm('/v1/audio/transcriptions', {}, wavHeaderOnly(16000, 1, 100, 601 * 16000)), 400, /^the audio is 601\.0 s long, past the 600 s limit/);
    // A FLAC header claiming 700 s ahead of a few frames: refused before decoding.
    const header = await flac(testSignal(0.1, 16000), 16000);
    const claim = 700 * 16000;
    header[8 + 13] = (header[8 + 13]! & 0xf0) | Math.floor(claim / 2 ** 32);
    new DataView(header.buffer, header.byteOffset + 8 + 14, 4).setUint32(0, claim);
    await expectErrorResponse(await postForm('/v1/audio/transcriptions', {}, header), 400, /^the audio is 700\.0 s long/);
  });

  it('answers 503 when the queue is full and 504 past the timeout', async () => {
    // Five windows: past the timeout on any machine.
    const running = postForm('/v1/audio/transcriptions', {}, wav(testSignal(150), SAMPLE_RATE, '16'), strict.live.url);
    await expectQueueFullThenTimeout(strict.worker, running, () => postForm('/v1/audio/transcriptions', {}, speechWav, strict.live.url), /^the transcription request timed out after 1\.5 s/);
  });
});

describe('the audio-only server', () => {
  it('answers the generation routes with 501 naming the model kind, and reports the model', async () => {
    const chat = await lenient.live.post('/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }] });
    expect(chat.status).toBe(501);
    expect(chat.body.error.message).toMatch(/^This server's model \(-m\) is a Whisper speech-to-text checkpoint: it serves speech to text only/);
    expect((await lenient.live.post('/completion', { prompt: 'hi' })).status).toBe(501);
    const health = await fetch(`${lenient.live.url}/health`);
    expect(health.status).toBe(200);
    const props = (await (await fetch(`${lenient.live.url}/props`)).json()) as { capabilities: string[] };
    expect(props.capabilities).toEqual(['transcription']);
    const models = await lenient.live.openai.models.list();
    expect(models.data.map((m) => m.id)).toContain('whisper-tiny-random');
    const metrics = await (await fetch(`${lenient.live.url}/metrics`)).text();
    expect(metrics).toMatch(/^mlxcel_slots_total 1$/m);
  });
});
