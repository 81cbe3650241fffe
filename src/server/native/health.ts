// GET /health and GET /: liveness, loading status and the engine's load, open even when
// an API key is set. 503 while loading or while every slot is busy, as the REST reference has it;
// while loading, llama-server's error envelope comes along, and what the download or load
// has done so far when the caller knows.
import { Router } from 'express';
import { supportsTools } from '../../chat/tool-calls/registry.js';
import type { ModelState } from '../model-state.js';

/** How far loading has come: its stage ("download", "load") and that stage's counters. */
export type LoadingProgress = { stage: string } & Record<string, string | number>;

export function healthRoutes(models: ModelState, loadingProgress?: () => LoadingProgress | undefined): Router {
  const router = Router();
  router.get(['/health', '/'], (_req, res) => {
    const model = models.current;
    if (!model) {
      const progress = loadingProgress?.();
      res.status(503).json({
        status: 'loading model',
        error: { code: 503, message: 'Loading model', type: 'unavailable_error' },
        ...(progress ? { progress } : {}),
      });
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
