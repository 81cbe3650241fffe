// GET /v1/models and GET /models (llama-server serves both): the one model this process
// serves, with every --alias. A request's `model` is not checked (any name reaches the one
// model), as in llama-server. Both need the API key when one is set, as the REST reference
// has every route but GET /health and GET / (llama-server leaves these two open).
import { Router } from 'express';
import { capabilities, type Services } from '../services.js';
import type { ModelState } from '../model-state.js';

export interface ModelListOptions {
  /** --alias: every id the model answers to (the first is engine.info.id). */
  aliases?: string[];
  /** --tags. */
  tags?: string[];
}

export function modelRoutes(models: ModelState, services: Services, options: ModelListOptions = {}): Router {
  const router = Router();
  router.get(['/v1/models', '/models'], (_req, res) => {
    const { engine, created } = models.require();
    // The -m model does what the server does but for a second embedding model, listed after it.
    const beside = services.embedders.current;
    const second = beside && beside.info.id !== engine.info.id ? beside : undefined;
    const own = capabilities(services).filter((c) => !(second && c === 'embedding'));
    // One entry, as the REST reference has it; llama-server's aliases and tags beside it.
    res.json({
      object: 'list',
      data: [
        {
          id: engine.info.id,
          object: 'model',
          created,
          owned_by: 'user',
          aliases: options.aliases ?? [engine.info.id],
          tags: options.tags ?? [],
          capabilities: own,
        },
        ...(second ? [{ id: second.info.id, object: 'model', created, owned_by: 'user', aliases: [second.info.id], tags: [], capabilities: ['embedding'] }] : []),
      ],
    });
  });
  return router;
}
