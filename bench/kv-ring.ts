// Sliding-window layers' KV rings: what they save, and what they cost a decode step.
//   1. Gemma-3-1B's shape (bench-model.ts GEMMA3_1B: 26 layers, 22 of them windowed at 512,
//      one KV head of 256, f16 KV) at 32k context, 1 x 32768 and 4 x 8192, --batch-size 512:
//      the KV bytes the loader allocates at most with rings (22 rings of 512 + 511 positions
//      per slot beside the 4 global layers' paged pool) and with --swa-full (every layer
//      paged), from the loader's own sizing (kvPlacements, kvTokenBytes, kvRingBytes; the
//      paged pool holds the slots' contexts plus the prompt cache's: as many bytes, at most
//      1024 blocks); then, unless
//      BENCH_SKIP has "gemma", each served in a child process (4-bit random weights, loadEngine
//      in-process, four concurrent 16-token completions): /props-equivalent memory (weights,
//      KV now and at most) and the child's peak RSS (VmHWM).
//   2. Decode tok/s of the Qwen3-0.6B-shaped 4-bit bench model (no window layers: what the
//      kernels' layout branch costs every model), one slot, 8-token prompt, 64 greedy tokens
//      timed from the first to the last, this checkout against BENCH_BASE (the root of
//      another checkout, e.g. the commit before the rings, with node_modules), both loaded in
//      one process and run alternately, three rounds each (the machine's drift hits both).
// Run: npx tsx bench/kv-ring.ts   (BENCH_BASE=/path/to/base-checkout for the A/B; without it
// only this checkout's decode is timed; BENCH_SKIP=gemma,decode leaves parts out)
import { mkdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { ENGINE_DEFAULTS, type Engine } from '../src/engine/engine.js';
import type { GenerationRequest } from '../src/engine/types.js';
import { kvPlacements, kvRingBytes, kvTokenBytes } from '../src/models/model.js';
import { readFamilyConfig } from '../src/models/registry.js';
import { GEMMA3_1B, QWEN3_06B, writeBenchFiles, writeBenchModel } from './bench-model.js';
import { syntheticPrompt } from './kernel-breakdown.js';

const MiB = 2 ** 20;
/** The engine's KV block (load.ts). */
const BLOCK = 16;
const BATCH = 512;
const skip = (process.env.BENCH_SKIP ?? '').split(',');
const RESULT_TAG = 'KV_RING_RESULT ';
const mib = (b: number) => (b / MiB).toFixed(1);

function vmHwmMiB(): number {
  const m = /^VmHWM:\s+(\d+) kB/m.exec(readFileSync('/proc/self/status', 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

async function load(root: string, modelDir: string, options: Record<string, unknown>): Promise<Engine> {
  const { loadEngine } = (await import(join(root, 'src/engine/load.ts'))) as typeof import('../src/engine/load.js');
  return loadEngine({ modelDir, backend: 'opengles', ...options });
}

async function generate(engine: Engine, promptTokens: number[], maxTokens: number): Promise<number[]> {
  const req: GenerationRequest = { promptTokens, maxTokens, sampling: { temperature: 0, topK: 0, topP: 1 }, cachePrompt: false };
  const times: number[] = [];
  for await (const e of engine.generate(req)) if (e.type === 'token') times.push(performance.now());
  return times;
}

/** Child role: serve Gemma-3-1B at `parallel` x `perSlot` with or without rings; report memory and peak RSS. */
async function gemmaChild(dir: string, parallel: number, perSlot: number, swaFull: boolean): Promise<void> {
  const engine = await load(fileURLToPath(new URL('..', import.meta.url)), dir, { parallel, contextSize: parallel * perSlot, batchSize: BATCH, swaFull });
  await Promise.all(Array.from({ length: 4 }, (_, i) => generate(engine, syntheticPrompt(8, i), 16)));
  const m = engine.stats().memory;
  process.stdout.write(`${RESULT_TAG}${JSON.stringify({ weights: m.weights, kv: m.kv, kvMax: m.kvMax, peakMiB: vmHwmMiB() })}\n`);
  await engine.close();
}

function runChild(args: string[]): Promise<{ weights: number; kv: number; kvMax: number; peakMiB: number }> {
  return new Promise((done, fail) => {
    const child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (s: string) => (out += s));
    child.on('close', () => {
      const line = out.split('\n').find((l) => l.startsWith(RESULT_TAG));
      if (line) done(JSON.parse(line.slice(RESULT_TAG.length)));
      else fail(new Error(`gemma child: ${out}`));
    });
  });
}

if (process.argv[2] === 'gemma') {
  await gemmaChild(process.argv[3]!, Number(process.argv[4]), Number(process.argv[5]), process.argv[6] === 'full');
  process.exit(0);
}

// 1. Gemma-3-1B's KV at 32k.
const gemmaDir = join(tmpdir(), 'mlxcel-bench', 'gemma3-1b-4bit');
// Without serving it, its config alone (written beside, not where the checkpoint goes).
const configDir = join(tmpdir(), 'mlxcel-bench-gemma3-1b-config');
if (skip.includes('gemma')) {
  mkdirSync(configDir, { recursive: true });
  writeBenchFiles(configDir, GEMMA3_1B);
}
else writeBenchModel(gemmaDir, GEMMA3_1B);
const { cfg } = readFamilyConfig(skip.includes('gemma') ? configDir : gemmaDir);
const f16 = { k: 'f16', v: 'f16' } as const;
console.log(`## ${GEMMA3_1B.label}'s KV cache at 32k context (f16, --batch-size ${BATCH})\n`);
console.log('| slots x context | layout | paged bytes per position | rings (MiB) | KV of the slots\' contexts (MiB) | KV at most, with the prompt cache\'s pool (MiB) | KV after load (MiB) | peak RSS (MiB) |');
console.log('|---|---|---:|---:|---:|---:|---:|---:|');
for (const [parallel, perSlot] of [[1, 32768], [4, 8192]] as const) {
  for (const swaFull of [false, true]) {
    const placements = kvPlacements(cfg.layerKv, swaFull ? undefined : { slots: parallel, chunk: BATCH, maxContext: perSlot });
    const perToken = kvTokenBytes(cfg, f16, placements);
    const rings = kvRingBytes(cfg, f16, placements, parallel);
    // The paged pool at most: the slots' contexts plus the prompt cache's pool (as many bytes, at most ENGINE_DEFAULTS.cacheMaxEntries blocks).
    const slotBlocks = (parallel * perSlot) / BLOCK;
    const pooled = (slotBlocks + Math.min(slotBlocks, ENGINE_DEFAULTS.cacheMaxEntries)) * BLOCK * perToken;
    let served = { kv: NaN, kvMax: NaN, peakMiB: NaN };
    if (!skip.includes('gemma')) {
      console.error(`gemma ${parallel} x ${perSlot}${swaFull ? ' --swa-full' : ''}`);
      served = await runChild(['gemma', gemmaDir, String(parallel), String(perSlot), swaFull ? 'full' : 'ring']);
    }
    const layout = swaFull ? '--swa-full' : `rings of ${Math.max(...placements.map((p) => p ?? 0))}`;
    console.log(`| ${parallel} x ${perSlot} | ${layout} | ${perToken} | ${mib(rings)} | ${mib(parallel * perSlot * perToken + rings)} | ${mib(pooled + rings)} (served: ${mib(served.kvMax)}) | ${mib(served.kv)} | ${served.peakMiB.toFixed(0)} |`);
  }
}

// 2. Decode tok/s, this checkout against BENCH_BASE.
if (!skip.includes('decode')) {
  const model = resolve(process.env.BENCH_MODEL_DIR ?? join(tmpdir(), 'mlxcel-bench', 'qwen3-0.6b-4bit'));
  writeBenchModel(model, QWEN3_06B);
  const roots: Array<[string, string]> = [['this checkout', fileURLToPath(new URL('..', import.meta.url))]];
  if (process.env.BENCH_BASE) roots.unshift(['BENCH_BASE', resolve(process.env.BENCH_BASE)]);
  const engines: Array<[string, Engine]> = [];
  for (const [name, root] of roots) {
    console.error(`loading ${name} (${root})`);
    const engine = await load(root, model, { parallel: 1, contextSize: 1024 });
    await generate(engine, syntheticPrompt(8, 99), 4);
    engines.push([name, engine]);
  }
  const rates = new Map<string, number[]>(engines.map(([name]) => [name, []]));
  for (let round = 0; round < 3; round++) {
    for (const [name, engine] of engines) {
      const t = await generate(engine, syntheticPrompt(8, round), 64);
      const rate = (t.length - 1) / ((t.at(-1)! - t[0]!) / 1000);
      rates.get(name)!.push(rate);
      console.error(`${name} round ${round}: ${rate.toFixed(2)} tok/s`);
    }
  }
  console.log(`\n## ${QWEN3_06B.label} 4-bit decode (1 slot, 64 tokens, rounds alternating in one process)\n`);
  console.log('| checkout | tok/s per round | median |');
  console.log('|---|---|---:|');
  for (const [name, r] of rates) console.log(`| ${name} | ${r.map((x) => x.toFixed(2)).join(', ')} | ${[...r].sort((a, b) => a - b)[1]!.toFixed(2)} |`);
  for (const [, engine] of engines) await engine.close();
}
