// Structured-output bench on the bench checkpoint (Qwen3-0.6B shape, 4-bit, 151,936-token
// vocabulary; bench/bench-model.ts):
//   - schema compile time for each of the 30 real-world schemas of the tests (first
//     compile in this process, so cold caches; target < 50 ms each);
//   - mask time per step on the 151,936-token vocabulary, feeding a nested document token
//     by token: first pass (cold frame caches) and second pass (warm);
//   - decode tok/s, one slot, temperature 1 with a new seed per run (so each constrained
//     run walks new states): unconstrained vs constrained by a nested schema (target:
//     constrained costs < 15%). tok/s = (tokens - 1) / (time first -> last token), median
//     of BENCH_SO_RUNS runs after one warm-up request each; the constrained warm-up is
//     reported on its own.
// Run: npx tsx bench/structured-output.ts. Settings: BENCH_MODEL_DIR (default
// <tmp>/mlxcel-bench/qwen3-0.6b-4bit), BENCH_SO_TOKENS (24), BENCH_SO_RUNS (3).
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { loadEngine } from '../src/engine/load.js';
import type { Engine } from '../src/engine/engine.js';
import type { TokenConstraint } from '../src/engine/types.js';
import { compileJsonSchema, engineConstraint, matcherStats } from '../src/grammar/index.js';
import { REAL_WORLD_SCHEMAS } from '../test/helpers/json-schemas.js';
import { writeBenchModel } from './bench-model.js';

const env = process.env;
const MODEL_DIR = env.BENCH_MODEL_DIR ?? join(tmpdir(), 'mlxcel-bench', 'qwen3-0.6b-4bit');
const TOKENS = Number(env.BENCH_SO_TOKENS ?? 24);
const RUNS = Number(env.BENCH_SO_RUNS ?? 3);
const NESTED = REAL_WORLD_SCHEMAS.find((s) => s.name === 'company-addresses')!.schema;

const log = (msg: string) => console.error(`[bench] ${msg}`);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
const fmt = (x: number, d = 2) => x.toFixed(d);

function compileTimes(): Array<{ name: string; ms: number }> {
  return REAL_WORLD_SCHEMAS.map(({ name, schema }) => {
    const t0 = performance.now();
    compileJsonSchema(schema);
    return { name, ms: performance.now() - t0 };
  });
}

function maskTimes(engine: Engine): { cold: number[]; warm: number[] } {
  const text =
    '{"company":"Acme Widgets GmbH","headquarters":{"street":"1 Main Street","city":"Springfield","postalCode":"12345","country":"DE","geo":{"lat":52.52,"lon":13.405}},' +
    '"offices":[{"street":"2 Side St","city":"Shelbyville","country":"US"}],"founded":"1999-04-01"}';
  const ids = engine.tokenizer.encode(text, false);
  const pass = (): number[] => {
    const c = engineConstraint(engine, NESTED);
    return ids.map((id) => {
      const t0 = performance.now();
      const mask = c.allowed();
      const ms = performance.now() - t0;
      if (!((mask[id >>> 5]! >>> (id & 31)) & 1)) throw new Error(`token ${id} refused`);
      c.accept(id);
      return ms;
    });
  };
  return { cold: pass(), warm: pass() };
}

async function decode(engine: Engine, seed: number, constraint: () => TokenConstraint | undefined): Promise<{ tokens: number; tokPerS: number }> {
  const promptTokens = engine.tokenizer.encode('Describe a company with its headquarters as JSON.', false);
  const c = constraint();
  const times: number[] = [];
  for await (const ev of engine.generate({ promptTokens, maxTokens: TOKENS, sampling: { temperature: 1, topK: 0, topP: 1, seed }, ...(c ? { constraint: c } : {}) })) {
    if (ev.type === 'token') times.push(performance.now());
  }
  const span = times.at(-1)! - times[0]!;
  return { tokens: times.length, tokPerS: times.length > 1 ? ((times.length - 1) * 1000) / span : 0 };
}

async function main(): Promise<void> {
  log(`model ${MODEL_DIR}`);
  writeBenchModel(MODEL_DIR);
  const compiled = compileTimes();
  const engine = await loadEngine({ modelDir: MODEL_DIR, parallel: 1, contextSize: 1024 });
  try {
    const t0 = performance.now();
    engineConstraint(engine, { type: 'null' });
    const vocabMs = performance.now() - t0;
    // First, while every frame cache is cold.
    const masks = maskTimes(engine);

    log('warm-up');
    await decode(engine, 100, () => undefined);
    let before = { ...matcherStats };
    const cold = await decode(engine, 101, () => engineConstraint(engine, NESTED));
    const coldMaskMs = matcherStats.maskMs - before.maskMs;
    const free: number[] = [];
    const constrained: number[] = [];
    before = { ...matcherStats };
    for (let r = 0; r < RUNS; r++) {
      log(`run ${r + 1}/${RUNS}`);
      free.push((await decode(engine, r, () => undefined)).tokPerS);
      const c = await decode(engine, r, () => engineConstraint(engine, NESTED));
      if (c.tokens < TOKENS) log(`constrained run ended after ${c.tokens} tokens (document complete)`);
      constrained.push(c.tokPerS);
    }
    const maskMs = matcherStats.maskMs - before.maskMs;
    const maskSteps = matcherStats.maskMisses - before.maskMisses + (matcherStats.maskHits - before.maskHits);

    const f = median(free);
    const c = median(constrained);
    console.log(`## Structured output (${engine.adapterDescription})\n`);
    console.log(`Decode, temperature 1, one slot, ${TOKENS} tokens, median of ${RUNS}:\n`);
    console.log('| | tok/s |\n|---|---|');
    console.log(`| unconstrained | ${fmt(f)} |`);
    console.log(`| constrained (company-addresses schema) | ${fmt(c)} |`);
    console.log(`| cost | ${fmt((1 - c / f) * 100, 1)}% |`);
    console.log(`| first constrained request (warm-up) | ${fmt(cold.tokPerS)} (mask ${fmt(coldMaskMs, 0)} ms over ${cold.tokens} steps) |`);
    console.log(`\nMask computation during the constrained runs: ${fmt(maskMs, 1)} ms over ${maskSteps} steps (${fmt(maskMs / Math.max(1, maskSteps))} ms/step).`);
    console.log(`\nVocabulary trie build (once per tokenizer): ${fmt(vocabMs, 0)} ms.`);
    const stats = (xs: number[]) => `median ${fmt(median(xs))}, p90 ${fmt([...xs].sort((a, b) => a - b)[Math.floor(xs.length * 0.9)]!)}, max ${fmt(Math.max(...xs))}, mean ${fmt(xs.reduce((a, b) => a + b) / xs.length)}`;
    console.log(`\nMask ms per step on 151,936 tokens (${masks.cold.length} steps of a nested document):\n`);
    console.log(`- first pass (cold caches): ${stats(masks.cold)}`);
    console.log(`- second pass (warm): ${stats(masks.warm)}`);
    console.log(`\nSchema compile ms (first compile, 30 real-world schemas): max ${fmt(Math.max(...compiled.map((x) => x.ms)))}, mean ${fmt(compiled.reduce((a, x) => a + x.ms, 0) / compiled.length)}\n`);
    console.log('| schema | ms |\n|---|---|');
    for (const { name, ms } of compiled) console.log(`| ${name} | ${fmt(ms)} |`);
  } finally {
    await engine.close();
  }
}

await main();
