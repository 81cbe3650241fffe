// Routes the REST reference documents that this server cannot serve: each answers 501
// naming what is missing, in place of a 404. The image routes need an image model
// (--image-model); /v1/realtime a Nemotron VoiceChat checkpoint. Neither kind loads yet, and
// the messages say so (../models/model-kinds.ts). None reads its body, so they mount ahead of
// the parser. (The embedding, rerank, transcription and speech routes answer their own 501
// without a model: ./openai/embeddings.ts, ./native/rerank.ts, ./openai/audio.ts,
// ./openai/speech.ts.)
import { Router } from 'express';
import { IMAGE_MODELS_UNSUPPORTED } from '../models/model-kinds.js';
import { ApiError } from './errors.js';
import { capabilities, type Services } from './services.js';

/** The routes of each capability (./services.ts), as the 501s name them. */
const JOB_ROUTES: Record<string, string> = {
  completion: 'text generation (/v1/chat/completions, /v1/completions, /v1/responses, /v1/messages, /completion)',
  embedding: 'embeddings (/v1/embeddings, /embedding, /embeddings)',
  rerank: 'reranking (/v1/rerank, /rerank)',
  transcription: 'speech to text (/v1/audio/transcriptions, /v1/audio/translations)',
  speech: 'text to speech (/v1/audio/speech)',
};

const notImplemented = (message: string) => new ApiError(501, 'not_implemented', message);

/** Method, paths (with and without /v1), and the error each answers with. */
const UNAVAILABLE: Array<{ method: 'get' | 'post'; paths: string[]; error: (path: string, served: string) => ApiError }> = [
  {
    method: 'post',
    paths: ['/v1/images/generations', '/images/generations', '/v1/images/edits', '/images/edits'],
    error: (path, served) => notImplemented(`POST ${path} needs an image generation model, and ${IMAGE_MODELS_UNSUPPORTED}; ${served}`),
  },
  {
    method: 'get',
    paths: ['/v1/realtime'],
    error: (path, served) => notImplemented(`GET ${path} needs a Nemotron VoiceChat checkpoint, and these are not supported yet; ${served}`),
  },
];

/** The 501s, each naming the routes of what this server does serve (known once its models are resolved: asked per request). */
export function unavailableRoutes(services: Services): Router {
  const router = Router();
  for (const { method, paths, error } of UNAVAILABLE) {
    router[method](paths, (req) => {
      throw error(req.path, `this server serves ${capabilities(services).map((job) => JOB_ROUTES[job]).join(', ')}`);
    });
  }
  return router;
}
