// The HTTP application: middleware order matters. Health comes before auth (it must stay
// open), auth before body parsing (no parse errors for unauthenticated callers), and the
// 404 and error envelopes last.
import express, { type Express } from 'express';
import type { Engine } from '../engine/engine.js';
import { apiKeyAuth } from './auth.js';
import { ApiError, errorHandler, sendError } from './errors.js';
import { healthRoutes } from './health.js';
import { ModelState } from './model-state.js';
import { modelRoutes } from './models.js';
import { nativeRoutes } from './native.js';
import { openAIChatRoutes } from './openai-chat.js';
import { openAICompletionRoutes } from './openai-completions.js';

export interface AppOptions {
  /** When set, every route but GET /health and GET / needs this key. */
  apiKey?: string;
}

/** `engine` may still be loading: routes answer 503 until it resolves. */
export function createApp(engine: Engine | Promise<Engine>, options: AppOptions = {}): Express {
  const models = new ModelState(engine);
  const app = express();
  app.disable('x-powered-by');
  app.use(healthRoutes(models));
  if (options.apiKey) app.use(apiKeyAuth(options.apiKey));
  // Any content type is read as JSON, as llama-server does: curl -d sends form encoding.
  app.use(express.json({ limit: '32mb', type: () => true }));
  app.use(openAIChatRoutes(models), openAICompletionRoutes(models), nativeRoutes(models), modelRoutes(models));
  app.use((req, res) => {
    sendError(res, new ApiError(404, 'not_found_error', `no route for ${req.method} ${req.path}`));
  });
  app.use(errorHandler);
  return app;
}
