// Sampler-chain bench on the bench checkpoint (Qwen3-0.6B shape, 4-bit, 151,936-token
// vocabulary; bench/bench-model.ts): decode tok/s with greedy sampling vs the full chain
// (repetition/frequency/presence penalties, DRY, top-k, top-p, min-p, temperature, XTC)
// and vs the chain plus 5 top logprobs. Target (issue 9): the full chain costs < 10%.
// tok/s = (tokens - 1) / (time from first to last token), median of BENCH_SAMPLING_RUNS
// runs after one warm-up request per setting.
// Run: npx tsx bench/sampling.ts. Settings: BENCH_MODEL_DIR (default
// <tmp>/mlxcel-bench/qwen3-0.6b-4bit), BENCH_SAMPLING_TOKENS (24), BENCH_SAMPLING_RUNS (3).
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Engine } from '../src/engine/engine.js';
import { loadEngine } from '../src/engine/load.js';
import type { GenerationRequest, SamplingParams } from '../src/engine/types.js';
import { writeBenchModel } from './bench-model.js';

const env = process.env;
const MODEL_DIR = env.BENCH_MODEL_DIR ?? join(tmpdir(), 'mlxcel-bench', 'qwen3-0.6b-4bit');
const TOKENS = Number(env.BENCH_SAMPLING_TOKENS ?? 24);
const RUNS = Number(env.BENCH_SAMPLING_RUNS ?? 3);

const GREEDY: SamplingParams = { temperature: 0, topK: 0, topP: 1 };
const FULL_CHAIN: SamplingParams = {
  temperature: 0.8,
  topK: 40,
  topP: 0.95,
  minP: 0.05,
  repetitionPenalty: 1.1,
  repetitionContextSize: 64,
  frequencyPenalty: 0.2,
  presencePenalty: 0.2,
  dry: { multiplier: 0.8, base: 1.75, allowedLength: 2, penaltyLastN: 0, sequenceBreakers: [198] },
  xtcProbability: 0.5,
  xtcThreshold: 0.1,
};

async function tokPerS(engine: Engine, req: Omit<GenerationRequest, 'promptTokens' | 'maxTokens'>, seed: number): Promise<number> {
  const prompt = engine.tokenizer.encode('The quick brown fox jumps over the lazy dog because', false);
  let first = 0;
  let n = 0;
  for await (const ev of engine.generate({ ...req, promptTokens: prompt, maxTokens: TOKENS, sampling: { ...req.sampling, seed } })) {
    if (ev.type !== 'token') continue;
    if (n++ === 0) first = performance.now();
  }
  if (n < 2) throw new Error(`only ${n} tokens generated`);
  return ((n - 1) * 1000) / (performance.now() - first);
}

async function measure(engine: Engine, req: Omit<GenerationRequest, 'promptTokens' | 'maxTokens'>): Promise<number> {
  await tokPerS(engine, req, 1);
  const runs: number[] = [];
  for (let r = 0; r < RUNS; r++) runs.push(await tokPerS(engine, req, 100 + r));
  return runs.sort((a, b) => a - b)[runs.length >> 1]!;
}

writeBenchModel(MODEL_DIR);
const engine = await loadEngine({ modelDir: MODEL_DIR, parallel: 1, contextSize: 1024, cachePrompt: false, backend: env.BENCH_BACKEND ?? 'auto' });
const greedy = await measure(engine, { sampling: GREEDY });
const chain = await measure(engine, { sampling: FULL_CHAIN });
const chainLogprobs = await measure(engine, { sampling: FULL_CHAIN, logprobs: 5 });
const cost = (x: number) => `${(((greedy - x) / greedy) * 100).toFixed(1)}%`;
console.log(`Machine: ${cpus().length} cores, ${cpus()[0]?.model ?? 'unknown CPU'}; adapter: ${engine.adapterDescription}`);
console.log(`Decode, ${TOKENS} tokens, median of ${RUNS}:`);
console.log('| sampling | tok/s | cost vs greedy |');
console.log('|---|---:|---:|');
console.log(`| greedy | ${greedy.toFixed(2)} | - |`);
console.log(`| full chain | ${chain.toFixed(2)} | ${cost(chain)} |`);
console.log(`| full chain + 5 top logprobs | ${chainLogprobs.toFixed(2)} | ${cost(chainLogprobs)} |`);
await engine.close();
process.exit(0);
