// POST /v1/audio/speech (and /audio/speech): OpenAI's text-to-speech route over the Kokoro
// speaker (../../engine/speaker.ts). The JSON body is validated (ajv), the input turned into
// phoneme pieces and the voice checked before the job is queued, so bad input costs no model
// time. Without stream_format the answer is one file with its Content-Length; with
// stream_format "audio" the file streams chunk by chunk (chunked transfer encoding) as each
// piece is synthesised; with "sse" each chunk comes base64-encoded in a speech.audio.delta
// event, then speech.audio.done with the usage (input tokens: phonemes; output tokens:
// predicted frames).
import { Router, type Request, type Response } from 'express';
import { SpeakTimeoutError, type Speaker, type Speech } from '../../engine/speaker.js';
import { CONTENT_TYPES, encodeAudio, SPEECH_FORMATS, streamEncoder, type SpeechFormat } from '../audio/encode.js';
import type { EmbedderState } from '../embedder-state.js';
import { ApiError, badRequest } from '../errors.js';
import { validateBody, validateSpeech } from '../schemas.js';
import { runSse, sendSse } from '../sse.js';

const SPEECH_PATHS = ['/v1/audio/speech', '/audio/speech'];

/** OpenAI's input limit, in characters. */
const MAX_INPUT = 4096;
const SPEED = { min: 0.25, max: 4, default: 1 } as const;
/** The harmonic source's seed when the request gives none: the same request gives the same audio. */
const DEFAULT_SEED = 0;

export function speechRoutes(speakers: EmbedderState<Speaker>): Router {
  const router = Router();
  router.post(SPEECH_PATHS, async (req: Request, res: Response) => {
    const body = validateBody(validateSpeech, req.body);
    if (body.input.trim() === '') throw badRequest('input must not be empty: the text to speak', 'empty_input');
    if ([...body.input].length > MAX_INPUT) throw badRequest(`input is ${[...body.input].length} characters, past the ${MAX_INPUT} character limit`, 'input_too_long');
    const format = (body.response_format ?? 'mp3') as SpeechFormat;
    if (!SPEECH_FORMATS.includes(format)) throw badRequest(`response_format "${body.response_format}" is not supported: this server encodes ${SPEECH_FORMATS.join(', ')}`, 'unsupported_value');
    const speed = body.speed ?? SPEED.default;
    if (!(speed >= SPEED.min && speed <= SPEED.max)) throw badRequest(`speed must be between ${SPEED.min} and ${SPEED.max.toFixed(1)}, got ${speed}`);
    const speaker = speakers.require();
    const voice = typeof body.voice === 'string' ? body.voice : body.voice.id;
    if (!speaker.info.voices.includes(voice)) throw badRequest(`voice "${voice}" is not one of this model's voices: ${speaker.info.voices.join(', ')}`, 'unknown_voice');
    const pieces = speaker.pieces(body.input, voice);
    if (pieces.length === 0) throw badRequest('input has nothing to speak: no word or number in it', 'empty_input');
    const rate = speaker.info.sampleRate;
    // A client that leaves stops its request at the next piece.
    const gone = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) gone.abort();
    });
    const speak = (onAudio?: (audio: Float32Array) => void) =>
      speaker.speak({ pieces, voice, speed, seed: body.seed ?? DEFAULT_SEED, onAudio, signal: gone.signal }).catch((e: unknown) => {
        if (e instanceof SpeakTimeoutError) throw new ApiError(504, 'timeout_error', e.message);
        // No one is left to answer (nginx's 499): not a fault of the server's.
        if (gone.signal.aborted) throw new ApiError(499, 'invalid_request_error', 'the client closed the connection');
        throw e;
      });
    if (body.stream_format === undefined) {
      const speech = await speak();
      res.type(CONTENT_TYPES[format]).send(Buffer.from(await encodeAudio(format, speech.audio, rate)));
      return;
    }
    const chunks: Float32Array[] = [];
    let wake: (() => void) | undefined;
    // Queued before the answer starts: a full queue is answered as a status.
    const started = speak((audio) => {
      chunks.push(audio);
      wake?.();
    });
    let finished = false;
    const done = started.finally(() => {
      finished = true;
      wake?.();
    });
    const encoder = await streamEncoder(format, rate);
    /** Each chunk's encoded bytes as the speaker hands it on, then the encoder's last bytes; the speech when done. */
    const pump = async (send: (bytes: Uint8Array) => void): Promise<Speech> => {
      while (!finished || chunks.length > 0) {
        if (chunks.length === 0) await new Promise<void>((r) => (wake = r));
        for (const chunk of chunks.splice(0)) send(encoder.write(chunk));
      }
      const speech = await done;
      send(encoder.end());
      return speech;
    };
    try {
      if (body.stream_format === 'sse') {
        await runSse(res, async () => {
          const speech = await pump((bytes) => {
            if (bytes.length > 0) sendSse(res, { type: 'speech.audio.delta', audio: Buffer.from(bytes).toString('base64') });
          });
          const input = pieces.reduce((n, p) => n + p.ids.length, 0);
          const output = speech.durations.reduce((n, d) => n + d.reduce((a, b) => a + b, 0), 0);
          sendSse(res, { type: 'speech.audio.done', usage: { input_tokens: input, output_tokens: output, total_tokens: input + output } });
          res.end();
        });
        return;
      }
      // The first chunk decides the status: a job that times out before any audio is answered as an error.
      if (chunks.length === 0) await Promise.race([done, new Promise<void>((r) => (wake = r))]);
      res.status(200).type(CONTENT_TYPES[format]);
      try {
        await pump((bytes) => {
          if (bytes.length > 0 && !res.destroyed) res.write(bytes);
        });
        res.end();
      } catch {
        // Past the status line an audio stream has no way to carry an error: it is cut short.
        res.destroy();
      }
    } finally {
      encoder.close();
    }
  });
  return router;
}
