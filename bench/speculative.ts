// Speculative decoding's decode speed, with and without it, in one run:
//   (a) stories260k with prompt lookup on a prompt it continues partly by repeating (its own
//       greedy story, then a newline): where drafts are kept;
//   (b) stories260k with itself as the draft model, same prompt: every draft is kept, and
//       each costs a draft-model pass as long as a plain step; drafting every round
//       (--no-spec-adaptive: the mechanism's cost), then adaptive (it stops drafting);
//   (c) the bench model (Qwen3-0.6B's shape, random 4-bit weights, bench/bench-model.ts)
//       with prompt lookup on a prompt of random tokens: acceptance near zero, so this is
//       what speculation costs when it fails.
// Each case loads two engines (one slot; one with the case's drafter) and alternates
// greedy requests between them, so machine drift hits both alike; decode tok/s is the
// engine's predicted_per_second (tokens after the first over the time since it), and each
// side reports its median. Outputs must be identical (the script fails otherwise).
// Settings (environment): BENCH_MODEL_DIR (default <tmp>/mlxcel-bench/qwen3-0.6b-4bit),
// BENCH_BACKEND (opengles), BENCH_ROUNDS (5 for stories260k, 3 for the bench model),
// BENCH_DRAFT_MAX (16), BENCH_CASES (a,b,c).
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { env } from 'node:process';
import type { Engine } from '../src/engine/engine.js';
import { loadEngine } from '../src/engine/load.js';
import type { SpeculativeOptions } from '../src/engine/speculative.js';
import type { Timings } from '../src/engine/types.js';
import { STORIES_DIR, storiesCases } from '../test/helpers/stories-expected.js';
import { writeBenchModel } from './bench-model.js';

const BACKEND = env.BENCH_BACKEND ?? 'opengles';
const DRAFT_MAX = Number(env.BENCH_DRAFT_MAX ?? 16);
const CASES = (env.BENCH_CASES ?? 'a,b,c').split(',');
const PROMPT_LOOKUP: SpeculativeOptions = { kind: 'prompt-lookup', nMax: DRAFT_MAX, nMin: 0, ngram: 3, adaptive: true };

interface Outcome {
  tokens: number[];
  timings: Timings;
}

async function generate(engine: Engine, promptTokens: number[], maxTokens: number): Promise<Outcome> {
  const tokens: number[] = [];
  for await (const ev of engine.generate({ promptTokens, maxTokens, sampling: { temperature: 0, topK: 0, topP: 1 } })) {
    if (ev.type === 'token') tokens.push(ev.id);
    if (ev.type === 'done') return { tokens, timings: ev.timings };
  }
  throw new Error('no done event');
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function compare(
  name: string,
  modelDir: string,
  speculative: SpeculativeOptions,
  prompt: (engine: Engine) => number[],
  maxTokens: number,
  rounds: number,
  context: number,
): Promise<void> {
  const options = { modelDir, backend: BACKEND, parallel: 1, contextSize: context };
  const plain = await loadEngine(options);
  const spec = await loadEngine({ ...options, speculative });
  const tokens = prompt(plain);
  // One untimed request each: the first pass of each batch shape pays for its pipelines.
  await generate(plain, tokens, 8);
  await generate(spec, tokens, 8);
  const speeds = { plain: [] as number[], spec: [] as number[] };
  let last: Timings | undefined;
  for (let r = 0; r < rounds; r++) {
    const a = await generate(plain, tokens, maxTokens);
    const b = await generate(spec, tokens, maxTokens);
    if (a.tokens.join() !== b.tokens.join()) throw new Error(`${name}: speculative output differs from plain decode`);
    speeds.plain.push(a.timings.predicted_per_second);
    speeds.spec.push(b.timings.predicted_per_second);
    last = b.timings;
  }
  const p = median(speeds.plain);
  const s = median(speeds.spec);
  const drafts = last?.draft_rounds
    ? `${last.draft_n_accepted}/${last.draft_n} drafted tokens kept over ${last.draft_rounds} rounds`
    : 'no verify round';
  console.log(`${name}: prompt ${tokens.length} tokens, ${maxTokens} generated, ${rounds} rounds`);
  console.log(`  plain decode       ${p.toFixed(1)} tok/s   (runs: ${speeds.plain.map((x) => x.toFixed(1)).join(', ')})`);
  console.log(`  speculative        ${s.toFixed(1)} tok/s   (runs: ${speeds.spec.map((x) => x.toFixed(1)).join(', ')})`);
  console.log(`  ratio              ${(s / p).toFixed(2)}x   (last run: ${drafts})`);
  await plain.close();
  await spec.close();
}

if (CASES.includes('a')) {
  await compare(
    '(a) stories260k, prompt lookup, its own story repeated',
    STORIES_DIR,
    PROMPT_LOOKUP,
    (engine) => engine.tokenizer.encode(`${storiesCases[0]!.expected_text}\n`, true),
    200,
    Number(env.BENCH_ROUNDS ?? 5),
    1024,
  );
}
if (CASES.includes('b')) {
  for (const adaptive of [false, true]) {
    await compare(
      `(b) stories260k, itself as the draft model, its own story repeated, ${adaptive ? 'adaptive' : 'drafting every round'}`,
      STORIES_DIR,
      { ...PROMPT_LOOKUP, kind: 'draft-model', draftModel: STORIES_DIR, adaptive },
      (engine) => engine.tokenizer.encode(`${storiesCases[0]!.expected_text}\n`, true),
      200,
      Number(env.BENCH_ROUNDS ?? 5),
      1024,
    );
  }
}
if (CASES.includes('c')) {
  const dir = writeBenchModel(env.BENCH_MODEL_DIR ?? join(tmpdir(), 'mlxcel-bench', 'qwen3-0.6b-4bit'));
  // Random ids: nothing in the prompt predicts the random model's output.
  let x = 12345;
  const random = () => ((x = (Math.imul(x, 1103515245) + 12345) >>> 0) >>> 8) % 150000;
  await compare('(c) Qwen3-0.6B shape, random weights, prompt lookup, random prompt', dir, PROMPT_LOOKUP, () => Array.from({ length: 64 }, random), 64, Number(env.BENCH_ROUNDS ?? 3), 1024);
}
