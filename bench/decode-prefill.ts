// Decode/prefill bench: our engine and llama.cpp side by side, in one run, on the
// Qwen3-0.6B shape (hidden 1024, 28 layers, 16/8 heads, head_dim 128, intermediate 3072,
// vocab 151936, tied embeddings) with random weights, or another of bench-model.ts's shapes
// (BENCH_SHAPE=gemma3-1b, phi4-mini, qwen3-30b-a3b, nemotron-nano-9b, lfm2-1.2b).
//   ours:      mlx-lm 4-bit group 64 (bench/bench-model.ts), loadEngine + engine.generate,
//              one slot, --ctx-size 1024, OpenGL ES backend (llvmpipe on a GPU-less machine;
//              BENCH_BACKEND=vulkan on a GPU machine)
//   llama.cpp: Q4_0 GGUF (bench/gguf-q4_0.ts) through node-llama-cpp's prebuilt CPU build,
//              context 1024, BENCH_THREADS threads (default 2), flash attention on
// Run: npx tsx bench/decode-prefill.ts (or npm run bench). Markdown goes to stdout, progress
// to stderr. Takes ~5-10 minutes on the 2-core bench machine.
//
// Each side runs in its own child process so that its peak RSS is its own:
//   1. ours, first start with an empty Mesa shader cache (MESA_SHADER_CACHE_DIR = a fresh
//      temp dir): load time only (plus the first request after it);
//   2. ours, second start on that now-warm cache: load time, then every measurement;
//   3. ours, per-kernel breakdown of a decode step (bench/kernel-breakdown.ts);
//   4. llama.cpp: load time, then every measurement.
// Measurements (all greedy, on synthetic prompts of ordinary token ids, prompt cache off;
// each side serves one warm-up request after loading, which is not counted):
//   - TTFT of a 16-token prompt: submission to first token, median of 3;
//   - decode: 128 tokens after the first one of an 8-token prompt; tok/s = 128 / (time from
//     first to last token). Weight bytes/s = that times the bytes one decode token reads
//     (every linear layer's packed weights, scales and biases plus the tied LM head, from the
//     checkpoint's safetensors header; for llama.cpp the Q4_0 matrices);
//   - prefill: TTFT of a 512-token prompt (one forward pass on both sides: batch 512);
//     tok/s = 512 / TTFT. Ours once, llama.cpp median of 3. A 64-token prompt is timed
//     first; if 512 tokens extrapolate past BENCH_PREFILL_BUDGET_S (300 s), ours measures
//     the largest of 256/128 that fits instead and the table says so;
//   - peak host RSS while serving: the kernel's high-water mark (VmHWM) reset after load
//     (/proc/self/clear_refs), and the lifetime VmHWM including the load;
//   - load to ready: loadEngine() / getLlama + loadModel + createContext, in-process time.
//
// Settings (environment): BENCH_MODEL_DIR (default <tmp>/mlxcel-bench/qwen3-0.6b-4bit),
// BENCH_GGUF (<tmp>/mlxcel-bench/qwen3-0.6b-q4_0.gguf), BENCH_PREFILL (512), BENCH_DECODE
// (128), BENCH_TTFT_PROMPT (16), BENCH_THREADS (2), BENCH_PREFILL_BUDGET_S (300),
// BENCH_JSON (also write the raw results there), BENCH_BACKEND (opengles; ours only),
// BENCH_TIMEOUT_SCALE (1: each side's time limit times this, for a big shape or a busy machine),
// BENCH_SHAPE (qwen3-0.6b), BENCH_LAYERS (the shape's; fewer for a big shape on a slow
// machine), BENCH_SKIP (roles to leave out, comma-separated: ours-cold, kernels; without
// ours-cold, ours compiles the shaders in its load and warm-up request, which are not timed
// as measurements). The default paths name the shape (and the layer count where changed).
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { readSafetensorsHeader } from '../src/models/safetensors.js';
import { BENCH_SHAPES, writeBenchModel, type BenchShape } from './bench-model.js';
import { q4_0DecodeBytes, writeBenchGgufQ4_0 } from './gguf-q4_0.js';
import type { Backend } from '../src/runtime/gpu.js';
import { breakdownMarkdown, kernelBreakdown, syntheticPrompt, type KernelBreakdown } from './kernel-breakdown.js';

const env = process.env;
const PREFILL = Number(env.BENCH_PREFILL ?? 512);
const DECODE = Number(env.BENCH_DECODE ?? 128);
const TTFT_PROMPT = Number(env.BENCH_TTFT_PROMPT ?? 16);
const THREADS = Number(env.BENCH_THREADS ?? 2);
const BACKEND = (env.BENCH_BACKEND ?? 'opengles') as Backend;
const PREFILL_BUDGET_MS = Number(env.BENCH_PREFILL_BUDGET_S ?? 300) * 1000;
const TIMEOUT_SCALE = Number(env.BENCH_TIMEOUT_SCALE ?? 1);
const DECODE_PROMPT = 8;
const PROBE = 64;
const CONTEXT = 1024;
const SHAPE: BenchShape = benchShape(env.BENCH_SHAPE ?? 'qwen3-0.6b', env.BENCH_LAYERS);
const STEM = `${SHAPE.name}${SHAPE.layers === BENCH_SHAPES[SHAPE.name]!.layers ? '' : `-${SHAPE.layers}l`}`;
const MODEL_DIR = env.BENCH_MODEL_DIR ?? join(tmpdir(), 'mlxcel-bench', `${STEM}-4bit`);
const GGUF = env.BENCH_GGUF ?? join(tmpdir(), 'mlxcel-bench', `${STEM}-q4_0.gguf`);
const SKIP = new Set((env.BENCH_SKIP ?? '').split(',').filter(Boolean));
const RESULT_TAG = '@@BENCH_RESULT@@ ';
const MiB = 2 ** 20;

const log = (msg: string) => console.error(`[bench] ${msg}`);

function benchShape(name: string, layers: string | undefined): BenchShape {
  const s = BENCH_SHAPES[name];
  if (!s) throw new Error(`BENCH_SHAPE ${name}: one of ${Object.keys(BENCH_SHAPES).join(', ')}`);
  if (layers === undefined) return s;
  const n = Number(layers);
  if (!Number.isInteger(n) || n < 1 || n > s.layers) throw new Error(`BENCH_LAYERS ${layers}: 1..${s.layers}`);
  return { ...s, layers: n };
}
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

// ---------------------------------------------------------------------------------------------
// Memory

function statusKiB(field: string): number | undefined {
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync('/proc/self/status', 'utf8'));
  return m ? Number(m[1]) : undefined;
}

/** Resets VmHWM to the current RSS (Linux >= 4.0); false where not allowed. */
function resetPeakRss(): boolean {
  try {
    writeFileSync('/proc/self/clear_refs', '5');
    return true;
  } catch {
    return false;
  }
}

/** Samples RSS every 20 ms as a cross-check of VmHWM (misses spikes while JS is blocked). */
class RssSampler {
  peak = 0;
  private timer?: NodeJS.Timeout;
  start(): void {
    this.peak = process.memoryUsage.rss();
    this.timer = setInterval(() => { this.peak = Math.max(this.peak, process.memoryUsage.rss()); }, 20);
  }
  stop(): number {
    clearInterval(this.timer);
    return Math.max(this.peak, process.memoryUsage.rss());
  }
}

interface Memory {
  /** VmHWM from process start through load and warm-up. */
  peakWithLoadMiB?: number;
  /** VmHWM after a reset once ready: the peak while serving. */
  peakServingMiB?: number;
  /** Sampled peak of process.memoryUsage().rss while serving. */
  sampledPeakMiB: number;
  readyMiB: number;
  resetWorked: boolean;
}

// ---------------------------------------------------------------------------------------------
// Child side: one engine per process

interface Timed {
  ttftMs: number;
  /** Submission-relative time of each token. */
  times: number[];
  tokens: number[];
}

interface SideResult {
  side: 'ours' | 'llama.cpp';
  loadMs: number;
  warmupMs: number;
  ttft16Ms?: number[];
  decode?: { tokens: number; ms: number; tokS: number; distinctTokens: number; stoppedEarly: boolean };
  probe?: { tokens: number; ms: number };
  prefill?: { tokens: number; ms: number[]; truncated?: string };
  memory?: Memory;
  adapter?: string;
  info?: Record<string, unknown>;
}

type Generate = (prompt: number[], maxTokens: number) => Promise<Timed>;

/** The measurement sequence both sides share, after loading and one warm-up request. */
async function measure(r: SideResult, generate: Generate, prefillRuns: number): Promise<void> {
  const sampler = new RssSampler();
  const resetWorked = resetPeakRss();
  const readyMiB = process.memoryUsage.rss() / MiB;
  sampler.start();

  r.ttft16Ms = [];
  for (let i = 0; i < 3; i++) r.ttft16Ms.push((await generate(syntheticPrompt(TTFT_PROMPT, 11 + i), 1)).ttftMs);
  log(`${r.side}: TTFT ${TTFT_PROMPT}-token prompt ${r.ttft16Ms.map((x) => x.toFixed(0)).join(', ')} ms`);

  const d = await generate(syntheticPrompt(DECODE_PROMPT, 5), DECODE + 1);
  const n = d.times.length - 1;
  const ms = d.times[d.times.length - 1] - d.times[0];
  r.decode = { tokens: n, ms, tokS: (n * 1000) / ms, distinctTokens: new Set(d.tokens).size, stoppedEarly: n < DECODE };
  log(`${r.side}: decode ${n} tokens in ${ms.toFixed(0)} ms = ${r.decode.tokS.toFixed(2)} tok/s`);

  const probe = await generate(syntheticPrompt(PROBE, 3), 1);
  r.probe = { tokens: PROBE, ms: probe.ttftMs };
  log(`${r.side}: prefill ${PROBE} tokens ${probe.ttftMs.toFixed(0)} ms`);

  // Prefill time grows a little faster than linearly (attention): allow 10% on top.
  const estimate = (n: number) => probe.ttftMs * (n / PROBE) * 1.1;
  let size = PREFILL;
  let truncated: string | undefined;
  if (estimate(PREFILL) > PREFILL_BUDGET_MS) {
    size = [256, 128].find((s) => s < PREFILL && estimate(s) <= PREFILL_BUDGET_MS) ?? PROBE;
    truncated = `${PREFILL} tokens extrapolated to ${(estimate(PREFILL) / 1000).toFixed(0)} s (> ${PREFILL_BUDGET_MS / 1000} s budget): measured ${size}`;
    log(`${r.side}: ${truncated}`);
  }
  const prefillMs: number[] = [];
  for (let i = 0; i < prefillRuns; i++) {
    if (size === PROBE && truncated) { prefillMs.push(probe.ttftMs); break; }
    prefillMs.push((await generate(syntheticPrompt(size, 21 + i), 1)).ttftMs);
    log(`${r.side}: prefill ${size} tokens ${prefillMs[prefillMs.length - 1].toFixed(0)} ms`);
  }
  r.prefill = { tokens: size, ms: prefillMs, truncated };

  const hwm = statusKiB('VmHWM');
  r.memory = {
    ...r.memory,
    peakServingMiB: resetWorked && hwm !== undefined ? hwm / 1024 : undefined,
    sampledPeakMiB: sampler.stop() / MiB,
    readyMiB,
    resetWorked,
  };
}

async function childOurs(loadOnly: boolean): Promise<SideResult> {
  const { loadEngine } = await import('../src/engine/load.js');
  const t0 = performance.now();
  const engine = await loadEngine({ modelDir: MODEL_DIR, parallel: 1, contextSize: CONTEXT, backend: BACKEND });
  const loadMs = performance.now() - t0;
  log(`ours${loadOnly ? ' (cold shader cache)' : ''}: loaded in ${loadMs.toFixed(0)} ms on ${engine.adapterDescription}`);
  const generate: Generate = async (promptTokens, maxTokens) => {
    const t = performance.now();
    const out: Timed = { ttftMs: NaN, times: [], tokens: [] };
    for await (const ev of engine.generate({ promptTokens, maxTokens, sampling: { temperature: 0, topK: 0, topP: 1 }, cachePrompt: false })) {
      if (ev.type !== 'token') continue;
      const now = performance.now() - t;
      if (out.times.length === 0) out.ttftMs = now;
      out.times.push(now);
      out.tokens.push(ev.id);
    }
    return out;
  };
  const w = performance.now();
  await generate(syntheticPrompt(DECODE_PROMPT, 99), 2);
  const r: SideResult = { side: 'ours', loadMs, warmupMs: performance.now() - w, adapter: engine.adapterDescription };
  r.memory = { peakWithLoadMiB: (statusKiB('VmHWM') ?? NaN) / 1024, sampledPeakMiB: NaN, readyMiB: process.memoryUsage.rss() / MiB, resetWorked: false };
  if (!loadOnly) await measure(r, generate, 1);
  await engine.close();
  return r;
}

async function childLlama(): Promise<SideResult> {
  const { getLlama, LlamaLogLevel } = await import('node-llama-cpp');
  const t0 = performance.now();
  const llama = await getLlama({ gpu: false, build: 'never', usePrebuiltBinaries: true, logLevel: LlamaLogLevel.error, progressLogs: false });
  const model = await llama.loadModel({ modelPath: GGUF, gpuLayers: 0 });
  const context = await model.createContext({ contextSize: CONTEXT, threads: THREADS, flashAttention: true });
  const loadMs = performance.now() - t0;
  const sequence = context.getSequence();
  log(`llama.cpp: loaded in ${loadMs.toFixed(0)} ms (${THREADS} threads, flash attention ${context.flashAttention})`);
  const generate: Generate = async (prompt, maxTokens) => {
    await sequence.clearHistory();
    const t = performance.now();
    const out: Timed = { ttftMs: NaN, times: [], tokens: [] };
    // yieldEogToken: generation never stops early on a random model's end token.
    for await (const token of sequence.evaluate(prompt as Parameters<typeof sequence.evaluate>[0], { temperature: 0, yieldEogToken: true })) {
      const now = performance.now() - t;
      if (out.times.length === 0) out.ttftMs = now;
      out.times.push(now);
      out.tokens.push(token);
      if (out.times.length >= maxTokens) break;
    }
    return out;
  };
  const w = performance.now();
  await generate(syntheticPrompt(DECODE_PROMPT, 99), 2);
  const release = llama.llamaCppRelease;
  const r: SideResult = {
    side: 'llama.cpp',
    loadMs,
    warmupMs: performance.now() - w,
    info: {
      llamaCpp: `${release.repo} ${release.release}, node-llama-cpp ${(JSON.parse(readFileSync(join(ROOT, 'node_modules/node-llama-cpp/package.json'), 'utf8')) as { version: string }).version} ${llama.buildType}`,
      threads: context.currentThreads,
      flashAttention: context.flashAttention,
      batchSize: context.batchSize,
      systemInfo: llama.systemInfo,
    },
  };
  r.memory = { peakWithLoadMiB: (statusKiB('VmHWM') ?? NaN) / 1024, sampledPeakMiB: NaN, readyMiB: process.memoryUsage.rss() / MiB, resetWorked: false };
  await measure(r, generate, 3);
  await context.dispose();
  await model.dispose();
  return r;
}

async function childMain(role: string): Promise<void> {
  process.env.EGL_PLATFORM ??= 'surfaceless';
  let result: unknown;
  if (role === 'ours-cold') result = await childOurs(true);
  else if (role === 'ours') result = await childOurs(false);
  else if (role === 'llama') result = await childLlama();
  else if (role === 'kernels') result = await kernelBreakdown(MODEL_DIR, { backend: BACKEND, log: (m) => log(`kernels: ${m}`) });
  else throw new Error(`unknown role ${role}`);
  const cpu = process.cpuUsage();
  process.stdout.write(`${RESULT_TAG}${JSON.stringify({ result, cpuMs: (cpu.user + cpu.system) / 1000 })}\n`);
  process.exit(0);
}

// ---------------------------------------------------------------------------------------------
// Parent: runs the children, prints the tables

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');

/** Busy CPU time of the whole machine so far (ms), from /proc/stat (USER_HZ = 100). */
function machineBusyMs(): number {
  const f = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1, 9).map(Number);
  const [user, nice, system, , , irq, softirq, steal] = f;
  return (user + nice + system + irq + softirq + steal) * 10;
}

interface ChildRun<T> {
  result?: T;
  error?: string;
  wallMs: number;
  /** Average cores used by other processes while the child ran (machine busy time minus the child's). */
  foreignCores?: number;
}

function runChild<T>(role: string, extraEnv: Record<string, string>, timeoutMs: number): Promise<ChildRun<T>> {
  const t = performance.now();
  const busy0 = machineBusyMs();
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), role], {
      cwd: ROOT,
      env: { ...process.env, EGL_PLATFORM: 'surfaceless', ...extraEnv },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    let out = '';
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (s: string) => { out += s; });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const wallMs = performance.now() - t;
      const line = out.split('\n').find((l) => l.startsWith(RESULT_TAG));
      for (const l of out.split('\n')) if (l && !l.startsWith(RESULT_TAG)) console.error(`[${role}] ${l}`);
      if (line) {
        const { result, cpuMs } = JSON.parse(line.slice(RESULT_TAG.length)) as { result: T; cpuMs: number };
        resolve({ result, wallMs, foreignCores: Math.max(0, machineBusyMs() - busy0 - cpuMs) / wallMs });
      } else {
        resolve({ error: `${role} child exited with ${signal ?? `code ${code}`} and no result${signal === 'SIGKILL' ? ` (timeout ${timeoutMs / 1000} s)` : ''}`, wallMs });
      }
    });
  });
}

/**
 * Bytes one decode token reads: every quantized matrix (packed weight + scales + biases), the
 * tied embedding once as the LM head; of stacked experts (switch_mlp), the chosen topK's
 * share. `all`: the same with every expert read.
 */
function decodeWeightBytes(dir: string): { bytes: number; all: number; matrices: number } {
  const h = readSafetensorsHeader(join(dir, 'model.safetensors'));
  const share = SHAPE.moe ? SHAPE.moe.topK / SHAPE.moe.experts : 1;
  let bytes = 0;
  let all = 0;
  let matrices = 0;
  for (const name of Object.keys(h.tensors)) {
    if (!name.endsWith('.scales')) continue;
    const prefix = name.slice(0, -'.scales'.length);
    matrices++;
    for (const part of ['weight', 'scales', 'biases']) {
      const p = h.tensors[`${prefix}.${part}`];
      if (!p) throw new Error(`${prefix}.${part} missing`);
      const n = p.data_offsets[1] - p.data_offsets[0];
      all += n;
      bytes += prefix.includes('.switch_mlp.') ? n * share : n;
    }
  }
  return { bytes, all, matrices };
}

/** Our KV allocation for --parallel 1 --ctx-size 1024, mirroring src/engine/load.ts: f32 K and V in 16-token blocks; the prompt cache gets as many blocks again. */
function oursKvBytes(): { slot: number; promptCache: number } {
  const s = SHAPE;
  const blockBytes = s.layers * 2 * 16 * s.kvHeads * s.headDim * 4;
  const slot = Math.ceil(CONTEXT / 16) * blockBytes;
  return { slot, promptCache: slot };
}

const f = (x: number | undefined, d = 1) => (x === undefined || !Number.isFinite(x) ? 'n/a' : x.toFixed(d));
const ratio = (a: number | undefined, b: number | undefined, d = 2) => (a === undefined || b === undefined || !Number.isFinite(a / b) ? 'n/a' : `${(a / b).toFixed(d)}x`);
const mark = (ok: boolean | undefined) => (ok === undefined ? '' : ok ? 'yes' : 'no');

async function parentMain(): Promise<void> {
  const started = performance.now();
  const load0 = loadavg();
  log(`writing/reusing checkpoints: ${MODEL_DIR}, ${GGUF}`);
  const t = performance.now();
  writeBenchModel(MODEL_DIR, SHAPE);
  writeBenchGgufQ4_0(GGUF, SHAPE);
  log(`checkpoints ready in ${((performance.now() - t) / 1000).toFixed(1)} s`);

  const shaderCache = mkdtempSync(join(tmpdir(), 'mlxcel-bench-mesa-cache-'));
  const mesa = { MESA_SHADER_CACHE_DIR: shaderCache };
  const loads: Record<string, number[]> = {};
  const foreign: Record<string, number> = {};
  const step = async <T>(role: string, extraEnv: Record<string, string>, timeoutMs: number): Promise<ChildRun<T>> => {
    if (SKIP.has(role)) return { wallMs: 0 };
    log(`--- ${role} (load average ${loadavg().map((x) => x.toFixed(2)).join(' ')})`);
    const r = await runChild<T>(role, extraEnv, timeoutMs * TIMEOUT_SCALE);
    loads[role] = loadavg();
    if (r.foreignCores !== undefined) foreign[role] = r.foreignCores;
    if (r.error) log(r.error);
    log(`${role}: ${(r.wallMs / 1000).toFixed(1)} s wall`);
    return r;
  };
  let cold, ours, kernels, llama;
  try {
    cold = await step<SideResult>('ours-cold', mesa, 180_000);
    ours = await step<SideResult>('ours', mesa, 480_000);
    kernels = await step<KernelBreakdown>('kernels', mesa, 180_000);
    llama = await step<SideResult>('llama', {}, 180_000);
  } finally {
    rmSync(shaderCache, { recursive: true, force: true });
  }
  const O = ours.result;
  const L = llama.result;
  const K = kernels.result;
  const C = cold.result;

  const wb = decodeWeightBytes(MODEL_DIR);
  const llamaBytes = q4_0DecodeBytes(SHAPE);
  const disk = statSync(join(MODEL_DIR, 'model.safetensors')).size;
  const ggufSize = statSync(GGUF).size;
  const kv = oursKvBytes();
  const llamaKv = SHAPE.layers * 2 * CONTEXT * SHAPE.kvHeads * SHAPE.headDim * 2; // f16
  const rssLimit = (1.5 * (disk + kv.slot + kv.promptCache)) / MiB;
  const cpuModel = /^model name\s*:\s*(.*)$/m.exec(readFileSync('/proc/cpuinfo', 'utf8'))?.[1] ?? cpus()[0]?.model ?? 'unknown';
  const prefillTokS = (r?: SideResult) => (r?.prefill ? (r.prefill.tokens * 1000) / median(r.prefill.ms) : undefined);
  const ttft = (r?: SideResult) => (r?.ttft16Ms ? median(r.ttft16Ms) : undefined);
  const probeTokS = (r?: SideResult) => (r?.probe ? (r.probe.tokens * 1000) / r.probe.ms : undefined);
  const gbs = (tokS: number | undefined, bytes: number) => (tokS === undefined ? undefined : (tokS * bytes) / 1e9);
  const oPrefillLabel = O?.prefill?.truncated ? ` (ours measured ${O.prefill.tokens} tokens: see notes)` : '';
  const stepVsSum = K?.stepVsSum;
  const engineStepMs = O?.decode ? O.decode.ms / O.decode.tokens : undefined;

  const rows: string[][] = [
    [`Decode tok/s (${DECODE} tokens after an 8-token prompt)`, f(O?.decode?.tokS, 2), f(L?.decode?.tokS, 1), ratio(O?.decode?.tokS, L?.decode?.tokS), '>= 0.3x', mark(O?.decode && L?.decode ? O.decode.tokS / L.decode.tokS >= 0.3 : undefined)],
    [`Decode weight GB/s (ours ${f(wb.bytes / MiB, 1)} MiB/token, Q4_0 ${f(llamaBytes / MiB, 1)} MiB/token)`, f(gbs(O?.decode?.tokS, wb.bytes), 2), f(gbs(L?.decode?.tokS, llamaBytes), 2), ratio(gbs(O?.decode?.tokS, wb.bytes), gbs(L?.decode?.tokS, llamaBytes)), 'reported', ''],
    ...(SHAPE.moe ? [[`Decode GB/s were every expert read (ours ${f(wb.all / MiB, 1)} MiB/token): past what the machine moves, so decode reads the chosen experts only`, f(gbs(O?.decode?.tokS, wb.all), 2), '', '', 'reported', '']] : []),
    [`Prefill tok/s (${PREFILL}-token prompt, ${PREFILL} / TTFT)${oPrefillLabel}`, f(prefillTokS(O), 1), f(prefillTokS(L), 1), ratio(prefillTokS(O), prefillTokS(L), 3), '>= 0.1x', mark(O?.prefill && L?.prefill ? prefillTokS(O)! / prefillTokS(L)! >= 0.1 : undefined)],
    [`Prefill TTFT, ${PREFILL}-token prompt (s)`, f(O?.prefill ? median(O.prefill.ms) / 1000 : undefined, 2), f(L?.prefill ? median(L.prefill.ms) / 1000 : undefined, 3), ratio(O?.prefill ? median(O.prefill.ms) : undefined, L?.prefill ? median(L.prefill.ms) : undefined, 1), '', ''],
    [`Prefill tok/s (${PROBE}-token prompt)`, f(probeTokS(O), 1), f(probeTokS(L), 1), ratio(probeTokS(O), probeTokS(L), 3), '', ''],
    [`TTFT, ${TTFT_PROMPT}-token prompt (ms, median of 3)`, f(ttft(O), 0), f(ttft(L), 0), ratio(ttft(O), ttft(L), 1), '< 3x', mark(ttft(O) !== undefined && ttft(L) !== undefined ? ttft(O)! / ttft(L)! < 3 : undefined)],
    [`Peak RSS while serving (MiB, VmHWM reset after load)`, f(O?.memory?.peakServingMiB, 0), f(L?.memory?.peakServingMiB, 0), ratio(O?.memory?.peakServingMiB, L?.memory?.peakServingMiB), `< ${f(rssLimit, 0)} MiB`, mark(O?.memory?.peakServingMiB !== undefined ? O.memory.peakServingMiB < rssLimit : undefined)],
    [`Peak RSS incl. load (MiB, lifetime VmHWM)`, f(O?.memory?.peakWithLoadMiB, 0), f(L?.memory?.peakWithLoadMiB, 0), ratio(O?.memory?.peakWithLoadMiB, L?.memory?.peakWithLoadMiB), '', ''],
    [`Load to ready, warm shader cache (s)`, f(O ? O.loadMs / 1000 : undefined, 2), f(L ? L.loadMs / 1000 : undefined, 2), ratio(O?.loadMs, L?.loadMs, 1), '< 3 s', mark(O ? O.loadMs < 3000 : undefined)],
    [`Load to ready, cold shader cache (s)`, f(C ? C.loadMs / 1000 : undefined, 2), '—', ratio(C?.loadMs, L?.loadMs, 1), 'reported', ''],
    // llvmpipe compiles shaders when first dispatched, so the cold cache shows here too.
    [`Load + first request (8-token prompt, 2 tokens), warm / cold (s)`, `${f(O ? (O.loadMs + O.warmupMs) / 1000 : undefined, 2)} / ${f(C ? (C.loadMs + C.warmupMs) / 1000 : undefined, 2)}`, f(L ? (L.loadMs + L.warmupMs) / 1000 : undefined, 2), ratio(O ? O.loadMs + O.warmupMs : undefined, L ? L.loadMs + L.warmupMs : undefined, 1), '', ''],
    [`Decode step vs sum of isolated kernels (kernel run: median of per-round ratios)`, K ? `${K.roundRatios.map((r) => f(r, 2)).join(', ')} = ${f(stepVsSum, 2)}x (${f(K.stepMedianMs, 0)} / ${f(K.sumIsolatedMs, 0)} ms overall)` : 'n/a', '—', '', 'within 15%', mark(stepVsSum !== undefined ? Math.abs(stepVsSum - 1) <= 0.15 : undefined)],
    [`The same, each kernel's layers swept instead of one dispatch repeated`, K ? `${K.sweptRoundRatios.map((r) => f(r, 2)).join(', ')} = ${f(K.stepVsSweptSum, 2)}x (${f(K.stepMedianMs, 0)} / ${f(K.sumSweptMs, 0)} ms overall)` : 'n/a', '—', '', '', ''],
    [`Decode step in the decode run vs that sum`, K && engineStepMs !== undefined ? `${f(engineStepMs, 0)} / ${f(K.sumIsolatedMs, 0)} ms = ${f(engineStepMs / K.sumIsolatedMs, 2)}x` : 'n/a', '—', '', '', ''],
  ];

  const md: string[] = [];
  md.push(`### Decode/prefill bench: ours vs llama.cpp (${new Date().toISOString().slice(0, 10)})`);
  md.push('');
  md.push(`Machine: ${cpus().length} cores, ${cpuModel}, ${f(totalmem() / 2 ** 30, 0)} GiB RAM; adapter: ${O?.adapter ?? C?.adapter ?? K?.adapter ?? 'n/a'}; ` +
    `llama.cpp ${String(L?.info?.llamaCpp ?? 'n/a')}, CPU, ${String(L?.info?.threads ?? THREADS)} threads, flash attention ${String(L?.info?.flashAttention ?? 'n/a')}, f16 KV.`);
  const settings = ['BENCH_SHAPE', 'BENCH_LAYERS', 'BENCH_SKIP'].filter((k) => env[k]).map((k) => `${k}=${env[k]} `).join('');
  md.push(`Command: \`${settings}npx tsx bench/decode-prefill.ts\` (npm run bench). Model: ${SHAPE.label} shape${SHAPE.layers === BENCH_SHAPES[SHAPE.name]!.layers ? '' : ` with ${SHAPE.layers} of its ${BENCH_SHAPES[SHAPE.name]!.layers} layers`}, random weights; ours mlx-lm 4-bit g64 (${f(disk / MiB, 0)} MiB), llama.cpp Q4_0 (${f(ggufSize / MiB, 0)} MiB); context 1024, one sequence, greedy.`);
  md.push('');
  md.push('| metric | ours | llama.cpp | ratio (ours/llama.cpp) | issue 3 target | met |');
  md.push('|---|---:|---:|---:|---|---|');
  for (const r of rows) md.push(`| ${r.join(' | ')} |`);
  md.push('');
  if (K) {
    md.push(`Per-kernel breakdown of our decode step (CPU wall time of each dispatch replayed alone, and of each kernel's layers swept alone; ${K.dispatchesActive} of ${K.dispatchesRecorded} recorded dispatches run in the decode shape):`);
    md.push('');
    md.push(breakdownMarkdown(K));
    md.push('');
  }
  md.push('Notes:');
  const notes: string[] = [];
  if (O?.decode) notes.push(`ours decoded ${O.decode.tokens} tokens (${O.decode.distinctTokens} distinct)${O.decode.stoppedEarly ? ', stopped early on an end-of-generation token' : ''}; engine step from the decode run ${f(engineStepMs, 0)} ms/token.`);
  if (L?.decode) notes.push(`llama.cpp decoded ${L.decode.tokens} tokens (${L.decode.distinctTokens} distinct); prefill ${PREFILL} median of ${L.prefill?.ms.length ?? 0}: ${L.prefill?.ms.map((x) => x.toFixed(0)).join(', ')} ms.`);
  if (O?.prefill?.truncated) notes.push(`ours prefill: ${O.prefill.truncated}.`);
  notes.push(`RSS target: 1.5 x (checkpoint ${f(disk / MiB, 0)} MiB + our KV ${f((kv.slot + kv.promptCache) / MiB, 0)} MiB = f32 slot ${f(kv.slot / MiB, 0)} + prompt-cache pool ${f(kv.promptCache / MiB, 0)}); llama.cpp's f16 KV for 1024 tokens is ${f(llamaKv / MiB, 0)} MiB.`);
  if (O?.memory) notes.push(`ours RSS: ${f(O.memory.readyMiB, 0)} MiB when ready, sampled serving peak ${f(O.memory.sampledPeakMiB, 0)} MiB${O.memory.resetWorked ? '' : ' (VmHWM reset not allowed here)'}; llama.cpp: ${f(L?.memory?.readyMiB, 0)} MiB ready, sampled peak ${f(L?.memory?.sampledPeakMiB, 0)} MiB (weights mmapped).`);
  if (C || O) notes.push(`first request after load (8-token prompt, 2 tokens): cold start ${f(C?.warmupMs, 0)} ms, warm start ${f(O?.warmupMs, 0)} ms, llama.cpp ${f(L?.warmupMs, 0)} ms.`);
  if (K) {
    const lc = (x: KernelBreakdown['logitsAfterDecode']) => `${x.nonFinite} non-finite, range [${f(x.min, 2)}, ${f(x.max, 2)}], std ${f(x.std, 2)}`;
    notes.push(`our logits (kernel run): after prefill ${lc(K.logitsAfterPrefill)}; after decode ${lc(K.logitsAfterDecode)}.`);
  }
  for (const [role, r] of [['ours-cold', cold], ['ours', ours], ['kernels', kernels], ['llama', llama]] as const) if (r.error) notes.push(`**${role} failed**: ${r.error}`);
  const fs = Object.entries(foreign);
  notes.push(`CPU used by other processes while each child ran (average cores of ${cpus().length}): ${fs.map(([k, v]) => `${k} ${v.toFixed(2)}`).join(', ')}.`);
  const busiest = Math.max(0, ...fs.map(([, v]) => v));
  if (busiest > 0.25) notes.push(`**the machine was shared** (up to ${busiest.toFixed(2)} cores busy with other processes while measuring): the affected figures are noisy; llama.cpp's spinning threads suffer most.`);
  notes.push(`load average: ${load0.map((x) => x.toFixed(2)).join(' ')} at start; after each child: ${Object.entries(loads).map(([k, v]) => `${k} ${v[0].toFixed(2)}`).join(', ')}. Total ${((performance.now() - started) / 1000).toFixed(0)} s.`);
  for (const n of notes) md.push(`- ${n}`);
  const text = md.join('\n');
  console.log(text);
  if (env.BENCH_JSON) writeFileSync(env.BENCH_JSON, JSON.stringify({ ours: O, oursCold: C, kernels: K, llama: L, weightBytesPerToken: wb, q4_0BytesPerToken: llamaBytes, markdown: text }, null, 2));
}

const role = process.argv[2];
if (role) await childMain(role);
else {
  await parentMain();
  process.exit(0);
}
