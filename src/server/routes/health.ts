// GET /health and GET /: liveness, loading status and the engine's load, open even when
// an API key is set. 503 while loading or while every slot is busy, as the REST reference has it.
import { Router } from 'express';
import { supportsTools } from '../../chat/tools/registry.js';
import type { ModelState } from '../model-state.js';

export function healthRoutes(models: ModelState): Router {
  const router = Router();
  router.get(['/health', '/'], (_req, res) => {
    const model = models.current;
    if (!model) {
      res.status(503).json({ status: 'loading model' });
      return;
    }
    const { info } = model.engine;
    const stats = model.engine.stats();
    const busy = stats.activeSequences >= stats.slots;
    res.status(busy ? 503 : 200).json({
      status: busy ? 'no slot available' : 'ok',
      model: info.id,
      batch: { active_sequences: stats.activeSequences, queue_depth: stats.queueDepth, max_batch_size: stats.slots },
      observability: {
        ...stats.counters,
        current_batch_size: stats.activeSequences,
        // Each active sequence holds one KV-cache allocation.
        cache_pool_active: stats.activeSequences,
      },
      context_size: info.contextSize,
      tool_call_parser: supportsTools(model.chatFormat) ? 'mlxcel' : null,
    });
  });
  return router;
}
