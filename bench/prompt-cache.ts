// Prompt cache: time to first token over a 10-turn chat conversation replayed through the
// server's chat route, each turn resending the whole history (~2,000 prompt tokens by turn
// 10), with the prompt cache on and with it off (--no-cache-prompt). Run:
//   npx tsx bench/prompt-cache.ts
//
// The model is a random-weight Qwen3 checkpoint made with test/helpers/random-checkpoint.ts
// (hidden 256, 4 layers, 8/4 heads of 32, max_position_embeddings 4096, the real Qwen3
// tokenizer and chat template): stories260k's 512-token context cannot hold the
// conversation, and the Qwen3-0.6B-shaped bench checkpoint prefills too slowly on a CPU
// adapter to replay it in reasonable time. One slot, --ctx-size 4096.
//
// Each turn streams a chat completion with logprobs on, so that every token gets its own
// SSE chunk: TTFT is the time from sending the request to the first chunk carrying a
// token. The reply (BENCH_REPLY_TOKENS, 24) becomes the assistant message of the history.
// The same user messages are used with the cache on and off; each mode warms up with one
// conversation, then replays it BENCH_REPEATS times (the cache reset before each) and
// reports the per-turn median.
//
// Settings (environment): BENCH_MODEL_DIR (default /tmp/mlxcel-bench/qwen3-h256-l4-random,
// written on first use), BENCH_TURNS (10), BENCH_USER_TOKENS (~175 per user message),
// BENCH_REPLY_TOKENS (24), BENCH_REPEATS (3), BENCH_BACKEND (auto).
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { loadEngine } from '../src/engine/load.js';
import type { Engine } from '../src/engine/engine.js';
import { startServer } from '../src/server/server.js';
import { makeRandomCheckpoint, makeRng } from '../test/helpers/random-checkpoint.js';

const modelDir = process.env.BENCH_MODEL_DIR ?? '/tmp/mlxcel-bench/qwen3-h256-l4-random';
const turns = Number(process.env.BENCH_TURNS ?? 10);
const userTokens = Number(process.env.BENCH_USER_TOKENS ?? 175);
const replyTokens = Number(process.env.BENCH_REPLY_TOKENS ?? 24);
const repeats = Number(process.env.BENCH_REPEATS ?? 3);

type Message = { role: 'user' | 'assistant'; content: string };

interface Turn {
  promptTokens: number;
  cachedTokens: number;
  ttftMs: number;
}

const WORDS = (
  'the a small old river town built under green hills where people walked slowly past bright shops selling bread fish ' +
  'lamps rope paper maps and clocks while children asked questions about ships storms stars numbers colours music ' +
  'and every evening a bell rang twice before the lights came on across the quiet square near the harbour wall'
).split(' ');

/** A user message of about `n` tokens, different for each turn, the same in both runs. */
function userMessage(engine: Engine, turn: number, n: number): string {
  const rng = makeRng(1000 + turn);
  const words: string[] = [`Turn ${turn}: tell me more.`];
  while (engine.tokenizer.encode(words.join(' '), false).length < n) words.push(WORDS[Math.floor(rng.uniform() * WORDS.length)]!);
  return `${words.join(' ')}.`;
}

async function conversation(url: string, engine: Engine): Promise<Turn[]> {
  const history: Message[] = [];
  const out: Turn[] = [];
  for (let t = 1; t <= turns; t++) {
    history.push({ role: 'user', content: userMessage(engine, t, userTokens) });
    const start = performance.now();
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({
        messages: history,
        max_tokens: replyTokens,
        temperature: 0,
        logprobs: true,
        stream: true,
        stream_options: { include_usage: true },
      }),
    });
    if (!res.ok) throw new Error(`turn ${t}: HTTP ${res.status} ${await res.text()}`);
    let ttft = NaN;
    let reply = '';
    let usage: { prompt_tokens: number; prompt_tokens_details: { cached_tokens: number } } | undefined;
    const decoder = new TextDecoder();
    let buffered = '';
    for await (const piece of res.body!) {
      buffered += decoder.decode(piece as Uint8Array, { stream: true });
      const events = buffered.split('\n\n');
      buffered = events.pop()!;
      for (const event of events) {
        const data = event.slice('data: '.length);
        if (data === '[DONE]') continue;
        const chunk = JSON.parse(data);
        if (chunk.usage) usage = chunk.usage;
        const choice = chunk.choices[0];
        if (choice?.logprobs && Number.isNaN(ttft)) ttft = performance.now() - start;
        reply += choice?.delta?.content ?? '';
      }
    }
    history.push({ role: 'assistant', content: reply });
    out.push({ promptTokens: usage!.prompt_tokens, cachedTokens: usage!.prompt_tokens_details.cached_tokens, ttftMs: ttft });
  }
  return out;
}

async function run(cachePrompt: boolean): Promise<Turn[]> {
  const engine = await loadEngine({ modelDir, parallel: 1, contextSize: 4096, cachePrompt, backend: process.env.BENCH_BACKEND });
  const server = await startServer(engine, { host: '127.0.0.1', port: 0 });
  try {
    // Warm-up: pipelines and buffers of every shape a turn uses.
    await conversation(server.url, engine);
    const runs: Turn[][] = [];
    for (let r = 0; r < repeats; r++) {
      engine.cacheReset();
      runs.push(await conversation(server.url, engine));
    }
    return runs[0]!.map((turn, i) => ({ ...turn, ttftMs: median(runs.map((run) => run[i]!.ttftMs)) }));
  } finally {
    await server.close();
    await engine.close();
  }
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

async function main(): Promise<void> {
  const t0 = performance.now();
  if (!existsSync(join(modelDir, 'tokenizer_config.json'))) {
    makeRandomCheckpoint(
      { arch: 'qwen3', tokenizer: 'qwen3', hidden: 256, layers: 4, heads: 8, kvHeads: 4, headDim: 32, intermediate: 768, maxPositions: 4096, seed: 11 },
      modelDir,
    );
  }
  const on = await run(true);
  const off = await run(false);
  console.log(`model ${modelDir} (random Qwen3, hidden 256, 4 layers), 1 slot, ctx 4096, ${replyTokens}-token replies, greedy, median of ${repeats}`);
  console.log('\n| turn | prompt tokens | cached (on) | TTFT on (ms) | TTFT off (ms) | off / on |');
  console.log(`|${'---|'.repeat(6)}`);
  on.forEach((r, i) => {
    const o = off[i]!;
    console.log(`| ${i + 1} | ${r.promptTokens} | ${r.cachedTokens} | ${r.ttftMs.toFixed(1)} | ${o.ttftMs.toFixed(1)} | ${(o.ttftMs / r.ttftMs).toFixed(2)}x |`);
  });
  const last = on.length - 1;
  console.log(`\nturn ${last + 1}: TTFT ${off[last]!.ttftMs.toFixed(1)} ms cold vs ${on[last]!.ttftMs.toFixed(1)} ms cached = ${(off[last]!.ttftMs / on[last]!.ttftMs).toFixed(2)}x`);
  console.log(`total ${((performance.now() - t0) / 1000).toFixed(0)} s`);
}

await main();
// Dawn keeps the process alive after the engine closes.
process.exit(0);
