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
    // The -m model does what the server does but for second models (--embedding-model,
    // --reranker-model, --stt-model, --tts-model), each listed after it with its own capability.
    const beside = [
      { model: services.embedders.current, capability: 'embedding' },
      { model: services.rerankers.current, capability: 'rerank' },
      { model: services.transcribers.current, capability: 'transcription' },
      { model: services.speakers.current, capability: 'speech' },
    ].filter((b) => b.model && b.model.info.id !== engine.info.id);
    const own = capabilities(services).filter((c) => !beside.some((b) => b.capability === c));
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
        ...beside.map(({ model, capability }) => ({ id: model!.info.id, object: 'model', created, owned_by: 'user', aliases: [model!.info.id], tags: [], capabilities: [capability] })),
      ],
    });
  });
  return router;
}
