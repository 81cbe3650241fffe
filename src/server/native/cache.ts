// The prompt-cache endpoints, always mounted: GET /v1/cache/stats (the engine's snapshot,
// every field of the REST reference) and POST /v1/cache/reset (frees every cached block no
// running request holds and returns what was freed; idempotent). With the cache off
// (--no-cache-prompt) both answer the same fixed disabled payload, so monitoring needs no
// conditional routing.
import { Router } from 'express';
import type { Engine } from '../../engine/engine.js';
import { disabledCacheStats, type PromptCacheStats } from '../../engine/prompt-cache.js';
import type { ModelState } from '../model-state.js';

function snapshot(engine: Engine, reset: boolean): PromptCacheStats {
  const stats = reset ? engine.cacheReset() : engine.cacheStats();
  return stats.enabled ? stats : disabledCacheStats(stats.block_size);
}

export function cacheRoutes(models: ModelState): Router {
  const router = Router();
  router.get('/v1/cache/stats', (_req, res) => {
    res.json(snapshot(models.require().engine, false));
  });
  router.post('/v1/cache/reset', (_req, res) => {
    res.json(snapshot(models.require().engine, true));
  });
  return router;
}
