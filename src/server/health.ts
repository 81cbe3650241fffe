// GET /health and GET /: liveness and loading status, open even when an API key is set.
import { Router } from 'express';
import type { ModelState } from './model-state.js';

export function healthRoutes(models: ModelState): Router {
  const router = Router();
  router.get(['/health', '/'], (_req, res) => {
    const model = models.current;
    if (!model) {
      res.status(503).json({ status: 'loading model' });
      return;
    }
    const { info } = model.engine;
    res.json({ status: 'ok', model: info.id, context_size: info.contextSize });
  });
  return router;
}
