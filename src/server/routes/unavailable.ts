// Routes the REST reference documents that this server cannot serve: each answers 501
// naming what is missing, in place of a 404. The image routes need --image-model; the
// audio routes run in audio-only server processes (Kokoro speaks, Whisper transcribes);
// /v1/realtime needs a Nemotron VoiceChat checkpoint. None reads its body, so they mount
// ahead of the parser. (The embedding and rerank routes answer their own 501 without a
// model: ./embeddings.ts, ./rerank.ts.)
import { Router } from 'express';
import { ApiError } from '../errors.js';

const SERVED =
  'this server serves text generation (/v1/chat/completions, /v1/completions, /v1/responses, /v1/messages, /completion)';

const notImplemented = (message: string) => new ApiError(501, 'not_implemented', message);

/** Method, paths (with and without /v1), and the error each answers with. */
const UNAVAILABLE: Array<{ method: 'get' | 'post'; paths: string[]; error: (path: string) => ApiError }> = [
  {
    method: 'post',
    paths: ['/v1/images/generations', '/images/generations', '/v1/images/edits', '/images/edits'],
    error: (path) => notImplemented(`POST ${path} needs an image model: start the server with --image-model (or MLXCEL_IMAGE_MODEL); ${SERVED}`),
  },
  {
    method: 'post',
    paths: ['/v1/audio/speech', '/audio/speech'],
    error: (path) => notImplemented(`POST ${path} needs a Kokoro text-to-speech checkpoint, served by an audio-only server process; ${SERVED}`),
  },
  {
    method: 'post',
    paths: ['/v1/audio/transcriptions', '/audio/transcriptions', '/v1/audio/translations', '/audio/translations'],
    error: (path) => notImplemented(`POST ${path} needs a Whisper checkpoint, served by an audio-only server process; ${SERVED}`),
  },
  {
    method: 'get',
    paths: ['/v1/realtime'],
    error: (path) => notImplemented(`GET ${path} needs a Nemotron VoiceChat checkpoint; ${SERVED}`),
  },
];

export function unavailableRoutes(): Router {
  const router = Router();
  for (const { method, paths, error } of UNAVAILABLE) {
    router[method](paths, (req) => {
      throw error(req.path);
    });
  }
  return router;
}
