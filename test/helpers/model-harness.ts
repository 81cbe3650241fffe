// Direct access to a loaded model's forward pass for tests that compare logits or
// greedy tokens with an oracle, below the engine's request queue.
import { ForwardRunner } from '../../src/engine/forward.js';
import { ENGINE_DEFAULTS } from '../../src/engine/engine.js';
import { loadModel, type KvTypes } from '../../src/models/model.js';
import { openGpu, type Backend, type Gpu } from '../../src/runtime/gpu.js';

/**
 * The backend the GPU tests open: MLXCEL_TEST_BACKEND (e.g. vulkan, metal) on a machine with
 * a GPU; by default OpenGL ES, which is llvmpipe on a machine without one.
 */
export const TEST_BACKEND = (process.env.MLXCEL_TEST_BACKEND ?? 'opengles') as Backend;

/** The KV cache types the server runs with by default. */
export const SERVER_KV_TYPES: KvTypes = { k: ENGINE_DEFAULTS.cacheTypeK, v: ENGINE_DEFAULTS.cacheTypeV };
/** An f32 KV cache: for comparisons with f32 references. */
export const F32_KV_TYPES: KvTypes = { k: 'f32', v: 'f32' };

let gpu: Promise<Gpu> | undefined;

/** One device per test process, shared by every model a test file loads. */
export function testGpu(): Promise<Gpu> {
  gpu ??= openGpu(TEST_BACKEND);
  return gpu;
}

/**
 * With `asGpu`, Ops is told the adapter is not a CPU, so the model records the kernel layouts
 * meant for GPUs; `maxTokens` is the pass's token capacity (greedy's prefill chunk; default 128).
 * The KV cache has the server's default types unless `kvTypes` names others, and its layout:
 * sliding-window layers keep a ring for the one slot (window + maxTokens - 1 positions, where
 * shorter than the context), or every position with `swaFull`.
 */
export async function openRunner(dir: string, context = 256, o: { asGpu?: boolean; maxTokens?: number; kvTypes?: KvTypes; swaFull?: boolean } = {}): Promise<ForwardRunner> {
  const gpu = await testGpu();
  const model = await loadModel(o.asGpu ? { ...gpu, isCpu: false } : gpu, dir, {
    maxTokens: o.maxTokens ?? 128, maxSeqs: 1, kvTokens: context, maxContext: context, blockSize: 16, kvTypes: o.kvTypes ?? SERVER_KV_TYPES, ...(o.swaFull ? {} : { ringSlots: 1 }),
  });
  return new ForwardRunner(model);
}

const GREEDY = { temperature: 0, topK: 0, topP: 1, minP: 0, pLess: false, xtcThreshold: 0, u: 0 };

/** Greedy continuation of `prompt` and the logits at the prompt's last position. */
export async function greedy(runner: ForwardRunner, prompt: number[], steps: number): Promise<{ tokens: number[]; promptLogits: Float32Array }> {
  const table = Array.from({ length: runner.model.kv.blocks }, (_, i) => i);
  const chunk = runner.model.maxTokens;
  let next = -1;
  for (let start = 0; start < prompt.length; start += chunk) {
    const tokens = prompt.slice(start, start + chunk);
    const last = start + tokens.length === prompt.length;
    const [sampled] = await runner.run([{ tokens, startPos: start, table, sample: last ? GREEDY : undefined }]);
    if (sampled) next = sampled.token;
  }
  const promptLogits = (await runner.readLogits(1)).slice(0, runner.model.cfg.vocab);
  const tokens: number[] = [];
  for (let pos = prompt.length; tokens.length < steps; pos++) {
    tokens.push(next);
    if (tokens.length < steps) [{ token: next }] = await runner.run([{ tokens: [next], startPos: pos, table, sample: GREEDY }]);
  }
  return { tokens, promptLogits };
}
