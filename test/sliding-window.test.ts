// Mistral's sliding-window attention against the CPU reference (test/helpers/hf-reference.ts).
// llama.cpp cannot be the oracle here: it runs Mistral as Llama, every layer with full
// attention (as it does Phi-3, whose window goes through the same attention() path).
//
// The same random weights are checked twice, with sliding_window 8 and with null: the prompt
// (~35 tokens) and the greedy steps run far past the window, so prefill and decode both read a
// cut-off KV range. Each run must match the reference run with the same window (greedy tokens
// equal, prompt log-probs within TOLERANCE), and the two must differ from each other by far
// more than that, so the window is honoured and not a no-op at this length.
// The windowed run prefills in chunks of CHUNK tokens, so its layers keep a ring of
// WINDOW + CHUNK - 1 = 11 positions (the engine's layout) that wraps five times over the ~59
// positions; the same run with every position kept (--swa-full's layout) must give the same
// tokens and the same logits to the bit, and the GPU layout's decode kernel the same tokens.
// test/server-slots.e2e.test.ts serves the same layout through the engine.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { TextTokenizer } from '../src/models/tokenizer.js';
import { HfReference } from './helpers/hf-reference.js';
import { maxLogitsLogProbDiff } from './helpers/llama-oracle.js';
import { F32_KV_TYPES, greedy, openRunner } from './helpers/model-harness.js';
import { ORACLE_STORY } from './helpers/oracle-cases.js';
import { makeRandomCheckpoint, type RandomCheckpointOptions } from './helpers/random-checkpoint.js';

const WINDOW = 8;
const STEPS = 24;
const CHUNK = 4;
// f32 on the GPU (an f32 KV cache: the window, not the cache's rounding, is under test)
// against f64 on the CPU (observed 2e-5); the reference's window off by one (9) moves them
// by 12.
const TOLERANCE = 1e-3;

const base: RandomCheckpointOptions = {
  arch: 'mistral', tokenizer: 'stories', hidden: 64, layers: 2, heads: 4, kvHeads: 2, headDim: 16, intermediate: 128, seed: 12,
};

describe('mistral sliding window vs the CPU reference', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'mlxcel-window-'));
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  it(`window ${WINDOW} matches the reference with the window, and differs from no window`, async () => {
    const runs = [];
    for (const window of [WINDOW, null]) {
      const ck = makeRandomCheckpoint({ ...base, extraConfig: { sliding_window: window } }, join(tmp, `w${window}`));
      const tokenizer = await TextTokenizer.load(ck.dir);
      const prompt = [ck.bosId, ...tokenizer.encode(ORACLE_STORY, false)];
      expect(prompt.length).toBeGreaterThan(3 * WINDOW);

      const runner = await openRunner(ck.dir, 256, { kvTypes: F32_KV_TYPES, maxTokens: CHUNK });
      const ours = await greedy(runner, prompt, STEPS);
      if (window !== null) {
        expect(runner.model.kv.layers.map((l) => l?.ring)).toEqual([WINDOW + CHUNK - 1, WINDOW + CHUNK - 1]);
        const full = await openRunner(ck.dir, 256, { kvTypes: F32_KV_TYPES, maxTokens: CHUNK, swaFull: true });
        expect(full.model.kv.layers.map((l) => l?.ring)).toEqual([undefined, undefined]);
        const kept = await greedy(full, prompt, STEPS);
        expect(ours.tokens).toEqual(kept.tokens);
        expect(ours.promptLogits).toEqual(kept.promptLogits);
        // A GPU's decode kernel (attention_decode_workgroup.wgsl) reads the same rings.
        const gpu = await greedy(await openRunner(ck.dir, 256, { kvTypes: F32_KV_TYPES, maxTokens: CHUNK, asGpu: true }), prompt, STEPS);
        expect(gpu.tokens).toEqual(ours.tokens);
      }
      const reference = new HfReference(ck.dir, window ?? Infinity);
      const diff = maxLogitsLogProbDiff(ours.promptLogits, reference.logits(prompt));
      if (process.env.ORACLE_VERBOSE) console.info(`sliding_window ${window}: max log-prob diff ${diff.toExponential(2)}`);
      expect(diff).toBeLessThan(TOLERANCE);
      expect(ours.tokens).toEqual(reference.greedy(prompt, STEPS));
      runs.push(ours);
    }
    const [windowed, full] = runs;
    expect(maxLogitsLogProbDiff(windowed!.promptLogits, full!.promptLogits)).toBeGreaterThan(100 * TOLERANCE);
    expect(windowed!.tokens).not.toEqual(full!.tokens);
  });
});
