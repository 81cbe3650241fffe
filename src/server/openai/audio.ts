// POST /v1/audio/transcriptions and /v1/audio/translations (and the aliases without /v1):
// OpenAI's speech-to-text routes over the Whisper transcriber (../../engine/transcriber.ts).
// The multipart body is read by busboy with the upload limit enforced as it streams; the
// fields are validated (ajv) before the model is asked for, so a malformed request gets its
// 400 on any server, and the audio's header is checked against the limits before it is
// decoded (./audio/decode.ts). Answers in json, text, verbose_json, srt or vtt; with
// stream=true, SSE transcript.text.delta events, transcript.text.done, then [DONE].
import busboy from 'busboy';
import { Router, type Request, type Response } from 'express';
import { TranscribeTimeoutError, WHISPER_LANGUAGES, type Segment, type Transcriber, type Transcript } from '../../engine/transcriber.js';
import { SAMPLE_RATE } from '../../models/mel.js';
import { decodeAudio } from '../audio/decode.js';
import type { EmbedderState } from '../embedder-state.js';
import { ApiError, badRequest } from '../errors.js';
import { validateAudioFields, validateBody, type AudioFields } from '../schemas.js';
import { endSse, runSse, sendSse } from '../sse.js';

/** OpenAI's upload limit. */
const MAX_UPLOAD_BYTES = 25 * 1024 * 1024;
/** Room for the other fields and the multipart framing beside the file, in a Content-Length checked before reading. */
const FORM_OVERHEAD = 64 * 1024;

const TRANSCRIBE_PATHS = ['/v1/audio/transcriptions', '/audio/transcriptions'];
const TRANSLATE_PATHS = ['/v1/audio/translations', '/audio/translations'];

export function audioRoutes(transcribers: EmbedderState<Transcriber>): Router {
  const router = Router();
  const handle = (task: 'transcribe' | 'translate') => async (req: Request, res: Response) => {
    const form = await readForm(req);
    const fields = validateBody(validateAudioFields, form.fields);
    if (!form.file) throw badRequest('file is required: the audio to transcribe, as a multipart file field', 'missing_file');
    const request = requestOptions(fields, task);
    const transcriber = transcribers.require();
    if (request.language !== undefined && !transcriber.info.languages.includes(request.language)) {
      throw badRequest(`language "${fields.language}" is not one of this model's: ${transcriber.info.languages.join(', ')}`);
    }
    const { samples } = await decodeAudio(form.file, SAMPLE_RATE);
    const run = (onText?: (delta: string) => void) => transcriber.transcribe({ ...request, audio: samples, onText }).catch((e: unknown) => {
      if (e instanceof TranscribeTimeoutError) throw new ApiError(504, 'timeout_error', e.message);
      throw e;
    });
    if (request.stream) {
      const deltas: string[] = [];
      let wake: (() => void) | undefined;
      // Queued before the stream starts: a full queue is answered as a status.
      const started = run((delta) => {
        deltas.push(delta);
        wake?.();
      });
      await runSse(res, async () => {
        let done = false;
        const finished = started.finally(() => {
          done = true;
          wake?.();
        });
        while (!done || deltas.length > 0) {
          if (deltas.length === 0) await new Promise<void>((r) => (wake = r));
          for (const delta of deltas.splice(0)) sendSse(res, { type: 'transcript.text.delta', delta });
        }
        const transcript = await finished;
        sendSse(res, { type: 'transcript.text.done', text: transcript.text });
        endSse(res, true);
      });
      return;
    }
    const transcript = await run();
    sendTranscript(res, transcript, request.format, task);
  };
  router.post(TRANSCRIBE_PATHS, handle('transcribe'));
  router.post(TRANSLATE_PATHS, handle('translate'));
  return router;
}

type Format = NonNullable<AudioFields['response_format']>;

function requestOptions(fields: AudioFields, task: 'transcribe' | 'translate') {
  const format: Format = fields.response_format ?? 'json';
  const granularities = fields['timestamp_granularities[]'] ?? [];
  if (granularities.includes('word')) throw badRequest('timestamp_granularities[]: "word" is not supported; "segment" is', 'unsupported_value');
  const stream = fields.stream === 'true';
  if (stream && !['json', 'text'].includes(format)) throw badRequest(`stream is supported with response_format json or text, not ${format}`, 'unsupported_value');
  const temperatures = (fields.temperature ?? '0').split(',').map((t) => Number(t.trim()));
  if (temperatures.some((t, i) => !(t >= 0 && t <= 1) || (i > 0 && t <= temperatures[i - 1]!))) {
    throw badRequest(`temperature must be a number in 0 .. 1, or several increasing ones separated by commas (the fallback), got "${fields.temperature}"`);
  }
  return {
    task,
    format,
    stream,
    language: fields.language === undefined || fields.language === '' ? undefined : languageCode(fields.language),
    prompt: fields.prompt || undefined,
    temperatures,
    timestamps: granularities.includes('segment') || ['verbose_json', 'srt', 'vtt'].includes(format),
  };
}

/** A language code ("en") or name ("english", "English"). */
function languageCode(language: string): string {
  const lower = language.toLowerCase();
  if (lower in WHISPER_LANGUAGES) return lower;
  const byName = Object.entries(WHISPER_LANGUAGES).find(([, name]) => name === lower);
  if (!byName) throw badRequest(`language "${language}" is not a language Whisper knows (ISO-639-1 codes such as "en", "de")`);
  return byName[0];
}

/** The multipart fields (repeated ones as arrays when their name ends in []) and the file's bytes. */
async function readForm(req: Request): Promise<{ fields: Record<string, string | string[]>; file?: Uint8Array }> {
  const type = req.headers['content-type'] ?? '';
  if (!/^multipart\/form-data/i.test(type)) throw badRequest('the body must be multipart/form-data with a file field', 'invalid_content_type');
  const declared = Number(req.headers['content-length']);
  if (declared > MAX_UPLOAD_BYTES + FORM_OVERHEAD) {
    await drained(req);
    throw new ApiError(413, 'invalid_request_error', `the upload exceeds the ${MAX_UPLOAD_BYTES / 1024 / 1024} MiB limit`, 'file_too_large');
  }
  return new Promise((resolve, reject) => {
    let parser: busboy.Busboy;
    try {
      parser = busboy({ headers: req.headers, limits: { fileSize: MAX_UPLOAD_BYTES, files: 1, fields: 32, fieldSize: 64 * 1024 } });
    } catch (e) {
      reject(badRequest(`malformed multipart body: ${(e as Error).message}`, 'invalid_multipart'));
      return;
    }
    const fields: Record<string, string | string[]> = {};
    const chunks: Buffer[] = [];
    let file = false;
    let failed = false;
    const fail = (err: ApiError) => {
      if (failed) return;
      failed = true;
      req.unpipe(parser);
      void drained(req).then(() => reject(err));
    };
    parser.on('field', (name, value) => {
      if (name.endsWith('[]')) fields[name] = [...((fields[name] as string[] | undefined) ?? []), value];
      else fields[name] = value;
    });
    parser.on('file', (name, stream) => {
      if (name !== 'file') {
        stream.resume();
        fail(badRequest(`unknown file field "${name}": the audio goes in "file"`, 'invalid_multipart'));
        return;
      }
      file = true;
      stream.on('data', (chunk: Buffer) => chunks.push(chunk));
      stream.on('error', (e: Error) => fail(badRequest(`malformed multipart body: ${e.message}`, 'invalid_multipart')));
      stream.on('limit', () => fail(new ApiError(413, 'invalid_request_error', `the file exceeds the ${MAX_UPLOAD_BYTES / 1024 / 1024} MiB limit`, 'file_too_large')));
    });
    parser.on('filesLimit', () => fail(badRequest('one file per request', 'invalid_multipart')));
    parser.on('fieldsLimit', () => fail(badRequest('too many fields', 'invalid_multipart')));
    parser.on('error', (e: Error) => fail(badRequest(`malformed multipart body: ${e.message}`, 'invalid_multipart')));
    parser.on('close', () => {
      if (!failed) resolve({ fields, file: file ? new Uint8Array(Buffer.concat(chunks)) : undefined });
    });
    req.pipe(parser);
  });
}

/** Bytes of a refused upload read and dropped before the answer, so the client sees it rather than a reset; past this the connection is closed. */
const DRAIN_LIMIT = 4 * MAX_UPLOAD_BYTES;

/** Reads the rest of the request body and drops it. */
function drained(req: Request): Promise<void> {
  if (req.readableEnded) return Promise.resolve();
  return new Promise((resolve) => {
    let bytes = 0;
    req.on('data', (chunk: Buffer) => {
      bytes += chunk.length;
      if (bytes > DRAIN_LIMIT) req.destroy();
    });
    req.once('end', () => resolve());
    req.once('error', () => resolve());
    req.resume();
  });
}

function sendTranscript(res: Response, t: Transcript, format: Format, task: 'transcribe' | 'translate'): void {
  switch (format) {
    case 'json':
      res.json({ text: t.text });
      return;
    case 'text':
      res.type('text/plain').send(t.text);
      return;
    case 'verbose_json':
      res.json({
        task,
        language: WHISPER_LANGUAGES[t.language] ?? t.language,
        duration: t.duration,
        text: t.text,
        segments: t.segments.map(verboseSegment),
      });
      return;
    case 'srt':
      res.type('text/plain').send(t.segments.map((s, i) => `${i + 1}\n${clock(s.start, ',')} --> ${clock(s.end, ',')}\n${s.text.trim()}\n\n`).join(''));
      return;
    case 'vtt':
      res.type('text/vtt').send(`WEBVTT\n\n${t.segments.map((s) => `${clock(s.start, '.')} --> ${clock(s.end, '.')}\n${s.text.trim()}\n\n`).join('')}`);
  }
}

function verboseSegment(s: Segment) {
  return {
    id: s.id, seek: s.seek, start: s.start, end: s.end, text: s.text, tokens: s.tokens, temperature: s.temperature,
    avg_logprob: s.avgLogprob, compression_ratio: s.compressionRatio, no_speech_prob: s.noSpeechProb,
  };
}

/** hh:mm:ss,mmm (SRT) or hh:mm:ss.mmm (WebVTT). */
function clock(seconds: number, mark: ',' | '.'): string {
  const ms = Math.round(seconds * 1000);
  const pad = (n: number, w = 2) => String(n).padStart(w, '0');
  return `${pad(Math.floor(ms / 3_600_000))}:${pad(Math.floor(ms / 60_000) % 60)}:${pad(Math.floor(ms / 1000) % 60)}${mark}${pad(ms % 1000, 3)}`;
}
