// GET /props: the server's default generation settings (what a request gets for each
// field it omits; see ../sampling-defaults.ts), its slot count, model path and whether it
// sleeps (--sleep-idle-seconds), its speculative decoding, in llama-server's shape: the settings flat as the REST
// reference lists them, and again as llama-server's slot object has them (n_ctx, and the
// /completion generation_settings of a request that sets nothing under params).
import { Router } from 'express';
import type { EngineStats } from '../../engine/types.js';
import { samplingFrom } from '../generation-params.js';
import { serverLoopDetection } from '../loop-policy.js';
import { capabilities, type Services } from '../services.js';
import type { EngineMemory } from '../../engine/types.js';
import type { ModelState } from '../model-state.js';
import { generationSettings } from './response.js';
import type { SamplingDefaults } from '../sampling-defaults.js';

/** u64::MAX: how the REST reference (and llama-server's u32 cousin) says "no seed configured". */
const UNSET_SEED = '18446744073709551615';

/** An engine's GPU memory as /props reports it. */
function memoryFields(m: EngineMemory) {
  return { weights_bytes: m.weights, kv_cache_bytes: m.kv, kv_cache_max_bytes: m.kvMax, kv_cache_tokens: m.kvTokens, kv_cache_max_tokens: m.kvMaxTokens, other_bytes: m.other };
}

export function propsRoutes(models: ModelState, defaults: SamplingDefaults, services: Services): Router {
  const router = Router();
  router.get('/props', (_req, res) => {
    const { engine } = models.require();
    // u64::MAX does not survive a JS number (2^64 rounds, and prints as 18446744073709552000),
    // so the seed is spliced into the JSON text as its exact digits.
    // Loop detection as the loaded model gets it by default (MLXCEL_LOOP_DETECTION or its
    // family's default), in the request fields' names; null when off.
    const loop = serverLoopDetection(defaults.loop_detection, engine.info.architecture);
    const loop_detection = loop ? { min_pattern_size: loop.minPatternSize, max_pattern_size: loop.maxPatternSize, min_count: loop.minCount } : null;
    const params = generationSettings(
      { sampling: samplingFrom({}, defaults, engine), nPredict: defaults.n_predict, stop: [], stream: false, nProbs: 0, timingsPerToken: false, postSamplingProbs: false, ignoreEos: false },
      defaults,
    );
    // The flat seed comes first, so that it is the one spliced below.
    const body = JSON.stringify({
      default_generation_settings: { ...defaults, seed: 0, loop_detection, n_ctx: engine.info.contextSize, params },
      total_slots: engine.stats().slots,
      // Request memory admission: the budget, and the weights plus the requests' reservations.
      request_memory: requestMemory(engine.stats().requestMemory),
      model_path: engine.info.path,
      // is_sleeping: llama-server's, true while --sleep-idle-seconds has the model unloaded.
      is_sleeping: engine.isSleeping(),
      // GPU memory in bytes (0 while asleep); the KV cache grows as it fills, up to kv_cache_max_bytes.
      memory: memoryFields(engine.stats().memory),
      // Speculative decoding (--spec-type, --spec-draft-model): null when off; draft_model is
      // the draft model's directory, null for prompt lookup.
      speculative: engine.info.speculative ? { draft_model: engine.info.speculative.draftModel ?? null, kind: engine.info.speculative.kind, n_max: engine.info.speculative.nMax } : null,
      // What the server serves: "completion", "embedding", "rerank".
      capabilities: capabilities(services),
    });
    const seedText = defaults.seed >= 0 ? String(defaults.seed) : UNSET_SEED;
    res.type('application/json').send(body.replace('"seed":0', `"seed":${seedText}`));
  });
  return router;
}

/** /props' request_memory: null where the engine keeps no budget (asleep, or an embedding-only server). */
function requestMemory(memory: EngineStats['requestMemory']): { budget_bytes: number; in_use_bytes: number } | null {
  return memory ? { budget_bytes: memory.budgetBytes, in_use_bytes: memory.inUseBytes } : null;
}
