// The slots routes. GET /slots: one entry per decode slot, then one per request waiting in
// the prefill queue, from the engine's own view (engine.stats().slotStates); --no-slots
// turns it into a 501 naming --slots. POST /slots/:id?action=save|restore|erase:
// llama-server's slot files under --slot-save-path (save and restore name a file in that
// directory, {"filename": ...}; erase drops the slot's cache), 501 naming the flag without
// it. Both answer 503 while the model loads, like every route that needs it.
import { join } from 'node:path';
import { Router, type Request } from 'express';
import { SlotFileError } from '../../engine/slot-file.js';
import { ApiError, badRequest } from '../errors.js';
import type { ModelState } from '../model-state.js';
import { validateBody, validateSlotFile } from '../schemas.js';

export interface SlotRouteOptions {
  /** GET /slots; on unless false (--no-slots). */
  enabled?: boolean;
  /** --slot-save-path: the directory slot files live in; undefined: no slot actions. */
  savePath?: string;
}

/** GET /slots, which reads no body: mounted ahead of the body parser. */
export function slotRoutes(models: ModelState, options: SlotRouteOptions): Router {
  const router = Router();
  router.get('/slots', (_req, res) => {
    if (options.enabled === false) throw new ApiError(501, 'not_supported_error', 'This server does not support slots endpoint. Start it with `--slots`');
    const { engine } = models.require();
    const { id: model, contextSize } = engine.info;
    const { slotStates, kv } = engine.stats();
    res.json(
      slotStates.map((state, id) => ({
        id,
        state,
        model,
        // The effective per-slot window, the same value /health reports.
        context_size: contextSize,
        // llama-server's name for it.
        n_ctx: contextSize,
        is_processing: state === 'decoding',
        // KV-cache blocks the slot's request holds (the queued hold none); with /metrics'
        // vllm:cache_config_info they give vllm:kv_cache_usage_perc.
        ...(kv ? { kv_blocks: kv.slotBlocks[id] ?? 0 } : {}),
      })),
    );
  });
  return router;
}

/** POST /slots/:id?action=..., after the body parser. */
export function slotActionRoutes(models: ModelState, options: SlotRouteOptions): Router {
  const router = Router();
  router.post('/slots/:id', async (req: Request<{ id: string }>, res) => {
    const dir = options.savePath;
    if (dir === undefined) throw new ApiError(501, 'not_supported_error', 'This server does not support slots action. Start it with `--slot-save-path`');
    const { engine } = models.require();
    const slot = /^\d+$/.test(req.params.id) ? Number(req.params.id) : -1;
    if (!(slot >= 0 && slot < engine.stats().slots)) throw badRequest('Invalid slot ID');
    const action = req.query.action;
    const start = performance.now();
    if (action === 'erase') {
      res.json({ id_slot: slot, n_erased: await engine.eraseSlot(slot) });
      return;
    }
    if (action !== 'save' && action !== 'restore') throw badRequest('Invalid action: action must be save, restore or erase');
    const { filename } = validateBody(validateSlotFile, req.body);
    if (!validFilename(filename)) throw badRequest('Invalid filename');
    const path = join(dir, filename);
    if (action === 'save') {
      const saved = await engine.saveSlot(slot, path);
      res.json({ id_slot: slot, filename, n_saved: saved.tokens, n_written: saved.bytes, timings: { save_ms: performance.now() - start } });
      return;
    }
    try {
      const restored = await engine.restoreSlot(slot, path);
      res.json({ id_slot: slot, filename, n_restored: restored.tokens, n_read: restored.bytes, timings: { restore_ms: performance.now() - start } });
    } catch (err) {
      if (err instanceof SlotFileError) throw badRequest(`Unable to restore slot ${slot} from "${filename}": ${err.message}`);
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw badRequest(`Unable to restore slot ${slot}: no slot file "${filename}"`);
      throw err;
    }
  });
  return router;
}

/** One file name in the slot directory: no path separators, no "..", no control characters. */
function validFilename(name: string): boolean {
  return name.length > 0 && Buffer.byteLength(name) <= 255 && !/[/\\\x00-\x1f\x7f]/.test(name) && !name.includes('..') && name.trim() === name && name !== '.';
}
