// GET /v1/models and GET /models (llama-server serves both): the one model this process
// serves. Both need the API key when one is set, as the REST reference has every route
// but GET /health and GET / (llama-server leaves these two open).
import { Router } from 'express';
import type { ModelState } from '../model-state.js';

export function modelRoutes(models: ModelState): Router {
  const router = Router();
  router.get(['/v1/models', '/models'], (_req, res) => {
    const { engine, created } = models.require();
    res.json({
      object: 'list',
      data: [{ id: engine.info.id, object: 'model', created, owned_by: 'user' }],
    });
  });
  return router;
}
