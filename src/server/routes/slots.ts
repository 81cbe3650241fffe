// GET /slots: one entry per decode slot, then one per request waiting in the prefill
// queue, from the engine's own view (engine.stats().slotStates). Mounted unless
// --no-slots; 503 while the model loads, like every route that needs it.
import { Router } from 'express';
import type { ModelState } from '../model-state.js';

export function slotRoutes(models: ModelState): Router {
  const router = Router();
  router.get('/slots', (_req, res) => {
    const { engine } = models.require();
    const { id: model, contextSize } = engine.info;
    res.json(
      engine.stats().slotStates.map((state, id) => ({
        id,
        state,
        model,
        // The effective per-slot window, the same value /health reports.
        context_size: contextSize,
        // llama-server's name for it.
        n_ctx: contextSize,
        is_processing: state === 'decoding',
      })),
    );
  });
  return router;
}
