// The structured-output property: 300 random schemas (fixed seed) and 30 real-world ones,
// each constrained with the real Qwen3 and Llama 3.1 tokenizers; every output must parse,
// validate with ajv and end with "stop".
// Most documents are drawn on the CPU: each step takes the real constraint's mask (what the
// engine hands its sampler), draws an allowed token at random, and feeds it back the way
// the engine's scheduler does (an end-of-generation id stops, any other is accepted, and
// the token limit ends with "length"). Wherever the mask allows the end, the text so far
// must already be a valid document. A handful of schemas also go through the engine on the
// GPU at temperature 1, all at once so constrained requests share the batch; each token it
// emits must be one the constraint allowed at that point.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Ajv2020 } from 'ajv/dist/2020.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/engine/engine.js';
import { loadEngine } from '../src/engine/load.js';
import { engineConstraint, matcherStats } from '../src/grammar/index.js';
import { makeAjv, maxDocumentBytes, randomSchemas, REAL_WORLD_SCHEMAS, type JsonSchema } from './helpers/json-schemas.js';
import { TEST_BACKEND } from './helpers/model-harness.js';
import { makeRandomCheckpoint, type TokenizerName } from './helpers/random-checkpoint.js';
import { rng } from './helpers/rng.js';

/** Tokens a slot may hold: prompt + the longest document we allow. */
const SLOT_CONTEXT = 1024;
const schemas = [...REAL_WORLD_SCHEMAS.map((s) => s.schema), ...randomSchemas(300, 2024)];
/** The schemas also generated on the GPU: the first real-world one and the first random ones. */
const GPU_CASES = [0, 30, 31, 32, 33, 34, 35, 36];

interface Outcome {
  ids: number[];
  reason: string;
}

function invalid(ajv: Ajv2020, schema: JsonSchema, text: string): string | undefined {
  try {
    return ajv.validate(schema, JSON.parse(text)) ? undefined : `invalid: ${ajv.errorsText()}`;
  } catch (err) {
    return `unparsable: ${(err as Error).message}`;
  }
}

/** Every outcome that did not end with "stop" or whose text is not a valid document, described. */
function failures(engine: Engine, ajv: Ajv2020, list: JsonSchema[], outcomes: Outcome[]): string[] {
  return outcomes.flatMap((o, i) => {
    const text = engine.tokenizer.decode(o.ids, true, false);
    const why = o.reason === 'stop' ? invalid(ajv, list[i]!, text) : `finish_reason ${o.reason} after ${o.ids.length} tokens`;
    return why ? [`#${i} ${why}\n  schema ${JSON.stringify(list[i])}\n  output ${JSON.stringify(text)}`] : [];
  });
}

/** The token limit a document gets: one token per byte at worst, and one more step to sample the end. */
function maxTokens(promptTokens: number[], schema: JsonSchema): number {
  return Math.min(SLOT_CONTEXT - promptTokens.length, maxDocumentBytes(schema) + 1);
}

const isSet = (mask: Uint32Array, id: number) => (mask[id >>> 5]! & (1 << (id & 31))) !== 0;

function popcount(x: number): number {
  x -= (x >>> 1) & 0x55555555;
  x = (x & 0x33333333) + ((x >>> 2) & 0x33333333);
  return Math.imul((x + (x >>> 4)) & 0x0f0f0f0f, 0x01010101) >>> 24;
}

/** The `k`-th (from 0) allowed id of a mask. */
function nthAllowed(mask: Uint32Array, k: number): number {
  for (let w = 0; w < mask.length; w++) {
    let bits = mask[w]!;
    const n = popcount(bits);
    if (k >= n) {
      k -= n;
      continue;
    }
    for (; k > 0; k--) bits &= bits - 1;
    return w * 32 + 31 - Math.clz32(bits & -bits);
  }
  throw new Error('the mask allows nothing');
}

/**
 * A document drawn on the CPU. Each document mixes two draws in a proportion of its own:
 * uniform over the allowed tokens (mostly whole words: strings run to their maxLength),
 * and the lowest allowed id (single bytes: strings close early, arrays stay short).
 * Wherever the end is allowed, the text so far is checked as a document.
 */
function drawDocument(engine: Engine, ajv: Ajv2020, schema: JsonSchema, seed: number, early: string[]): Outcome {
  const random = rng(seed);
  const uniformShare = random();
  const limit = maxTokens([], schema);
  const eos = engine.info.eosTokenIds;
  const constraint = engineConstraint(engine, schema);
  const ids: number[] = [];
  for (;;) {
    const mask = constraint.allowed();
    if (!mask) throw new Error('a grammar constraint allowed anything');
    if (eos.some((id) => isSet(mask, id))) {
      const text = engine.tokenizer.decode(ids, true, false);
      const why = invalid(ajv, schema, text);
      if (why) early.push(`seed ${seed}: the end allowed after ${JSON.stringify(text)}: ${why}`);
    }
    let total = 0;
    for (const w of mask) total += popcount(w);
    const token = nthAllowed(mask, random() < uniformShare ? Math.floor(random() * total) : 0);
    if (eos.includes(token)) return { ids, reason: 'stop' };
    constraint.accept(token);
    ids.push(token);
    if (ids.length >= limit) return { ids, reason: 'length' };
  }
}

/** A document generated by the engine at temperature 1; every emitted token is checked against the constraint's mask at its step. */
async function generate(engine: Engine, schema: JsonSchema, seed: number, disallowed: string[]): Promise<Outcome> {
  const promptTokens = engine.tokenizer.encode('Reply in JSON:', false);
  const ids: number[] = [];
  let reason = 'none';
  const constraint = engineConstraint(engine, schema);
  const replay = engineConstraint(engine, schema);
  for await (const event of engine.generate({ promptTokens, maxTokens: maxTokens(promptTokens, schema), sampling: { temperature: 1, topK: 0, topP: 1, seed }, constraint })) {
    if (event.type === 'token') {
      if (!isSet(replay.allowed(), event.id)) disallowed.push(`seed ${seed}: token ${event.id} after ${ids.length} tokens`);
      replay.accept(event.id);
      ids.push(event.id);
    } else if (event.type === 'done') reason = event.reason;
  }
  return { ids, reason };
}

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

for (const [tokenizer, seed] of [['qwen3', 11], ['llama3_1', 12]] as const satisfies ReadonlyArray<readonly [TokenizerName, number]>) {
  describe(`every constrained output validates, ${tokenizer} tokenizer`, () => {
    let engine: Engine;
    const ajv = makeAjv();
    beforeAll(async () => {
      const dir = mkdtempSync(join(tmpdir(), `grammar-${tokenizer}-`));
      dirs.push(dir);
      makeRandomCheckpoint({ arch: 'qwen3', tokenizer, hidden: 64, layers: 1, heads: 4, kvHeads: 2, headDim: 16, intermediate: 128, seed }, dir);
      engine = await loadEngine({ modelDir: dir, backend: TEST_BACKEND, parallel: GPU_CASES.length, contextSize: GPU_CASES.length * SLOT_CONTEXT });
    });
    afterAll(async () => {
      await engine?.close();
    });

    it(`${schemas.length} schemas, tokens drawn on the CPU through the real constraint`, () => {
      const t0 = performance.now();
      const before = { ...matcherStats };
      const early: string[] = [];
      const outcomes = schemas.map((schema, i) => drawDocument(engine, ajv, schema, 1000 * seed + i, early));
      const tokens = outcomes.reduce((n, o) => n + o.ids.length, 0);
      console.log(
        `${tokenizer}: ${outcomes.length} documents, ${tokens} tokens (max ${Math.max(...outcomes.map((o) => o.ids.length))}) in ${((performance.now() - t0) / 1000).toFixed(1)} s; ` +
          `mask: ${matcherStats.maskMisses - before.maskMisses} computed (${(matcherStats.maskMs - before.maskMs).toFixed(0)} ms), ` +
          `${matcherStats.maskHits - before.maskHits} cached, ${matcherStats.frameWalks - before.frameWalks} frame walks`,
      );
      expect(early).toEqual([]);
      expect(failures(engine, ajv, schemas, outcomes)).toEqual([]);
    });

    it(`${GPU_CASES.length} schemas generated on the GPU at once, each token one the constraint allowed`, async () => {
      const disallowed: string[] = [];
      const before = engine.stats().counters;
      const outcomes = await Promise.all(GPU_CASES.map((i) => generate(engine, schemas[i]!, 1000 * seed + i, disallowed)));
      console.log(`${tokenizer} on the GPU: ${outcomes.map((o) => o.ids.length).join(' + ')} tokens`);
      expect(disallowed).toEqual([]);
      expect(failures(engine, ajv, GPU_CASES.map((i) => schemas[i]!), outcomes)).toEqual([]);
      // Decode steps held several constrained sequences at once.
      const after = engine.stats().counters;
      expect(after.decode_steps_processed - before.decode_steps_processed).toBeLessThan(after.total_decode_tokens - before.total_decode_tokens);
    });
  });
}
