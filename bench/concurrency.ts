// Continuous-batching throughput: aggregate decode tok/s with 1, 4, 8 and 16 concurrent
// streams on the Qwen3-0.6B-shaped 4-bit bench checkpoint (engine with 16 slots), and
// time to first token of those streams. Run: npx tsx bench/concurrency.ts
//
// It drives the engine directly rather than over HTTP: a step here takes hundreds of
// milliseconds, so the server's per-token overhead would not show, and token events carry
// exact timings (an SSE chunk can lag its token while the detokenizer waits for a whole
// character).
//
// Each level fires its N requests in the same tick. Aggregate decode tok/s is measured
// over the window where all N streams are decoding (after the last first token, up to
// the first stream's end), so the prefill steps do not dilute it. Each level runs
// BENCH_REPEATS times, interleaved with the others, and the table shows the run with the
// median aggregate rate: a step's time on this VM varies by 20-30% between runs, which a
// single short window passes straight into the ratio.
//
// Settings (environment): BENCH_MODEL_DIR (default /tmp/mlxcel-bench/qwen3-0.6b-4bit,
// written on first use), BENCH_TOKENS new tokens per stream (16), BENCH_LEVELS (1,4,8,16),
// BENCH_REPEATS (3), BENCH_BACKEND (auto).
import { loadEngine } from '../src/engine/load.js';
import type { Engine } from '../src/engine/engine.js';
import { writeBenchModel } from './bench-model.js';

const SLOTS = 16;
/** Per-slot context: prompt plus new tokens fit with room to spare; keeps the KV pool small. */
const CONTEXT_PER_SLOT = 256;
const modelDir = process.env.BENCH_MODEL_DIR ?? '/tmp/mlxcel-bench/qwen3-0.6b-4bit';
const tokensPerStream = Number(process.env.BENCH_TOKENS ?? 16);
const levels = (process.env.BENCH_LEVELS ?? '1,4,8,16').split(',').map(Number);
const repeats = Number(process.env.BENCH_REPEATS ?? 3);

interface StreamResult {
  /** Milliseconds from submission, all on one clock. */
  firstAt: number;
  tokenTimes: number[];
}

interface LevelResult {
  streams: number;
  tokens: number;
  decodeTokS: number;
  endToEndTokS: number;
  ttftP50: number;
  ttftP99: number;
  wallS: number;
}

/** Short prompts of equal length, different per stream (so no two requests are identical). */
function prompts(engine: Engine, n: number): number[][] {
  const subjects = ['a dragon', 'the sea', 'a robot', 'my garden', 'the moon', 'a violin', 'old trains', 'a storm'];
  const out = Array.from({ length: n }, (_, i) => engine.tokenizer.encode(`Tell me a story about ${subjects[i % 8]} number ${i}.`, false));
  const len = Math.min(...out.map((p) => p.length));
  return out.map((p) => p.slice(0, len));
}

async function runLevel(engine: Engine, n: number): Promise<LevelResult> {
  const start = performance.now();
  const results = await Promise.all(
    prompts(engine, n).map(async (promptTokens): Promise<StreamResult> => {
      const tokenTimes: number[] = [];
      const sampling = { temperature: 0, topK: 0, topP: 1 };
      for await (const event of engine.generate({ promptTokens, maxTokens: tokensPerStream, sampling })) {
        if (event.type === 'token') tokenTimes.push(performance.now() - start);
      }
      return { firstAt: tokenTimes[0] ?? NaN, tokenTimes };
    }),
  );
  const wall = performance.now() - start;
  // The steady window: every stream past its first token, none finished yet.
  const from = Math.max(...results.map((r) => r.firstAt));
  const to = Math.min(...results.map((r) => r.tokenTimes.at(-1)!));
  const inWindow = results.reduce((sum, r) => sum + r.tokenTimes.filter((t) => t > from && t <= to).length, 0);
  const ttft = results.map((r) => r.firstAt).sort((a, b) => a - b);
  const tokens = results.reduce((sum, r) => sum + r.tokenTimes.length, 0);
  return {
    streams: n,
    tokens,
    decodeTokS: to > from ? (inWindow * 1000) / (to - from) : NaN,
    endToEndTokS: (tokens * 1000) / wall,
    ttftP50: percentile(ttft, 0.5),
    ttftP99: percentile(ttft, 0.99),
    wallS: wall / 1000,
  };
}

/** Nearest-rank percentile of sorted values. */
function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1)]!;
}

async function main(): Promise<void> {
  const t0 = performance.now();
  writeBenchModel(modelDir);
  const engine = await loadEngine({ modelDir, parallel: SLOTS, contextSize: SLOTS * CONTEXT_PER_SLOT, backend: process.env.BENCH_BACKEND });
  console.log(`model ${engine.info.id} (${modelDir}), ${SLOTS} slots x ${engine.info.contextSize} tokens, adapter: ${engine.adapterDescription}`);
  console.log(`load ${((performance.now() - t0) / 1000).toFixed(1)} s; greedy, ${tokensPerStream} new tokens per stream, ${prompts(engine, 1)[0]!.length}-token prompts`);
  // Warm-up: the first pass of each shape pays one-time costs, so every level runs once first.
  for (const n of levels) await runLevel(engine, n);

  const runs = new Map<number, LevelResult[]>(levels.map((n) => [n, []]));
  for (let i = 0; i < repeats; i++) {
    for (const n of levels) {
      const r = await runLevel(engine, n);
      runs.get(n)!.push(r);
      console.log(`  round ${i + 1}: ${n} streams, ${r.decodeTokS.toFixed(2)} tok/s aggregate decode, ${r.wallS.toFixed(1)} s`);
    }
  }
  await engine.close();
  const rows = levels.map((n) => {
    const sorted = [...runs.get(n)!].sort((a, b) => a.decodeTokS - b.decodeTokS);
    return sorted[Math.floor((sorted.length - 1) / 2)]!;
  });

  const base = rows.find((r) => r.streams === 1)?.decodeTokS;
  const header = '| streams | tokens | aggregate decode tok/s | vs 1 stream | end-to-end tok/s | TTFT p50 (s) | TTFT p99 (s) | wall (s) |';
  console.log(`\nMedian of ${repeats} rounds per level:\n\n${header}\n|${'---|'.repeat(8)}`);
  for (const r of rows) {
    const speedup = base ? `${(r.decodeTokS / base).toFixed(2)}x` : '-';
    const cells = [r.streams, r.tokens, r.decodeTokS.toFixed(2), speedup, r.endToEndTokS.toFixed(2), (r.ttftP50 / 1000).toFixed(2), (r.ttftP99 / 1000).toFixed(2), r.wallS.toFixed(1)];
    console.log(`| ${cells.join(' | ')} |`);
  }
  console.log(`\ntotal ${((performance.now() - t0) / 1000).toFixed(0)} s`);
}

await main();
// Dawn keeps the process alive after the engine closes.
process.exit(0);
