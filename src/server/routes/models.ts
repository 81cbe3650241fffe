// GET /v1/models: the one model this process serves.
import { Router } from 'express';
import type { ModelState } from '../model-state.js';

export function modelRoutes(models: ModelState): Router {
  const router = Router();
  router.get('/v1/models', (_req, res) => {
    const { engine, created } = models.require();
    res.json({
      object: 'list',
      data: [{ id: engine.info.id, object: 'model', created, owned_by: 'user' }],
    });
  });
  return router;
}
