// The shader warmer (src/runtime/shader-warmer.ts): a second process compiles the pipelines
// a load creates, into Mesa's on-disk cache, and the loading process compiles the rest at
// its warm-up. On stories260k: every pipeline is compiled by exactly one of the two (the
// child is given time to take some first), the child's are done before the warm-up goes
// on, their shared folder is gone after, and the model then generates what a model loaded
// without the warmer does.
import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ForwardRunner } from '../src/engine/forward.js';
import { loadModel } from '../src/models/model.js';
import { warmerHelps } from '../src/runtime/shader-warmer.js';
import { greedy, SERVER_KV_TYPES, testGpu } from './helpers/model-harness.js';

const MODEL = 'models/stories260k';
const OPTIONS = { maxTokens: 16, maxSeqs: 1, kvTokens: 64, maxContext: 64, blockSize: 16, kvTypes: SERVER_KV_TYPES };
const PROMPT = [1, 403, 407, 261, 378];

describe('shader warmer', () => {
  it('splits the compiles between two processes, and the model runs as without it', async () => {
    const gpu = await testGpu();
    expect(warmerHelps(gpu.isCpu)).toBe(true);
    expect(warmerHelps(gpu.isCpu, { MESA_SHADER_CACHE_DISABLE: 'true' })).toBe(false);
    expect(warmerHelps(false)).toBe(false);
    const warmed = await loadModel(gpu, MODEL, { ...OPTIONS, warmShaders: true });
    const warmer = warmed.ops.pipelines.warmer!;
    const count = warmed.ops.pipelines.list().length;
    for (const deadline = Date.now() + 20_000; warmer.childDone() === 0 && Date.now() < deadline;) await new Promise((r) => setTimeout(r, 20));
    const split = await warmed.ops.pipelines.settle();
    expect(split!.child).toBeGreaterThan(0);
    expect(split!.here + split!.child).toBe(count);
    expect(warmed.ops.pipelines.warmer).toBeUndefined();
    expect(await warmed.ops.pipelines.settle()).toBeUndefined();
    const runner = new ForwardRunner(warmed);
    await runner.warmUp();
    const plain = new ForwardRunner(await loadModel(gpu, MODEL, OPTIONS));
    expect((await greedy(runner, PROMPT, 8)).tokens).toEqual((await greedy(plain, PROMPT, 8)).tokens);
    expect(existsSync(warmer.dir)).toBe(false);
  });
});
