// Memory of the KV cache: the server binary's peak RSS serving the Qwen3-0.6B-shaped 4-bit
// bench checkpoint at its defaults (4 slots, 8192 tokens of context plus an equal
// prompt-cache pool) and at 4 x 8192 (--ctx-size 32768 --parallel 4), each after four
// concurrent 16-token completions, beside llama.cpp (node-llama-cpp's prebuilt CPU build,
// Q4_0, flash attention on) with an f16 KV cache of 4 sequences in the same 32768 tokens;
// and the KV bytes per token of each cache type.
//   ours: `node <repo>/bin/mlxcel-server.js` (build first: npm run build), a warm Mesa
//         shader cache (one start before the measured ones), VmHWM of the server process
//         once the completions have answered; GET /props memory where the server has it.
//   llama.cpp: a child process that loads the GGUF, creates the context and generates 16
//         tokens on each of the 4 sequences at once, then reports its VmHWM.
// Run: npm run build && npx tsx bench/kv-memory.ts   (BENCH_REPO: the root of another
// checkout, built, whose server to measure instead; BENCH_SKIP=llama leaves llama.cpp out)
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { kvTokenBytes } from '../src/models/model.js';
import { BENCH_SHAPES, writeBenchModel } from './bench-model.js';
import { writeBenchGgufQ4_0 } from './gguf-q4_0.js';

const MiB = 2 ** 20;
const repo = process.env.BENCH_REPO ?? fileURLToPath(new URL('..', import.meta.url));
const PORT = 18_800 + (process.pid % 500);
const RESULT_TAG = 'KV_MEMORY_RESULT ';

function statusKiB(pid: number | 'self', field: string): number {
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) : NaN;
}

interface ServerRun { peakMiB: number; memory?: Record<string, number> }

async function serve(model: string, args: string[], cacheDir: string): Promise<ServerRun> {
  const child = spawn(process.execPath, [join(repo, 'bin/mlxcel-server.js'), '--port', String(PORT), '--model', model, ...args], {
    cwd: repo,
    env: { ...process.env, MESA_SHADER_CACHE_DIR: cacheDir },
    stdio: 'ignore',
  });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  const url = `http://127.0.0.1:${PORT}`;
  try {
    for (const deadline = Date.now() + 900_000; ; ) {
      if ((await fetch(`${url}/health`).then((r) => r.status, () => 0)) === 200) break;
      if (Date.now() > deadline || child.exitCode !== null) throw new Error(`the server did not start (${args.join(' ')})`);
      await new Promise((r) => setTimeout(r, 100));
    }
    const complete = () => fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ prompt: 'Once upon a time there was', max_tokens: 16, temperature: 0 }),
    }).then((r) => r.json());
    await Promise.all([complete(), complete(), complete(), complete()]);
    const props = (await (await fetch(`${url}/props`)).json()) as { memory?: Record<string, number> };
    return { peakMiB: statusKiB(child.pid!, 'VmHWM') / 1024, memory: props.memory };
  } finally {
    child.kill('SIGTERM');
    await exited;
  }
}

/** node-llama-cpp's contextSize is per sequence. */
async function childLlama(gguf: string, contextSize: number): Promise<number> {
  const { getLlama, LlamaLogLevel } = await import('node-llama-cpp');
  const llama = await getLlama({ gpu: false, build: 'never', usePrebuiltBinaries: true, logLevel: LlamaLogLevel.error, progressLogs: false });
  const model = await llama.loadModel({ modelPath: gguf, gpuLayers: 0 });
  const context = await model.createContext({
    contextSize, sequences: 4, threads: 2, flashAttention: true, experimentalKvCacheKeyType: 'F16', experimentalKvCacheValueType: 'F16',
  });
  const prompt = model.tokenize('Once upon a time there was');
  await Promise.all(Array.from({ length: 4 }, async () => {
    const sequence = context.getSequence();
    let n = 0;
    for await (const _ of sequence.evaluate(prompt, { temperature: 0, yieldEogToken: true })) if (++n >= 16) break;
  }));
  return statusKiB('self', 'VmHWM') / 1024;
}

function runLlama(gguf: string, contextSize: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), 'llama', gguf, String(contextSize)], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (s: string) => (out += s));
    child.on('close', () => {
      const line = out.split('\n').find((l) => l.startsWith(RESULT_TAG));
      if (line) resolve(Number(line.slice(RESULT_TAG.length)));
      else reject(new Error(`llama.cpp child: ${out}`));
    });
  });
}

if (process.argv[2] === 'llama') {
  const peak = await childLlama(process.argv[3]!, Number(process.argv[4]));
  process.stdout.write(`${RESULT_TAG}${peak}\n`);
  process.exit(0);
}

const shape = BENCH_SHAPES['qwen3-0.6b'];
const model = writeBenchModel(join(tmpdir(), 'mlxcel-bench-qwen3-0.6b-q4'));
const cacheDir = mkdtempSync(join(tmpdir(), 'mlxcel-kv-memory-shaders-'));
console.error(`warming the shader cache (${repo})`);
await serve(model, ['--ctx-size', '2048'], cacheDir);
const rows: string[] = [];
const mib = (b?: number) => (b === undefined ? '' : (b / MiB).toFixed(0));
for (const [name, args] of [['defaults', []], ['4 x 8192 (--ctx-size 32768 --parallel 4)', ['--ctx-size', '32768', '--parallel', '4']]] as const) {
  console.error(`ours: ${name}`);
  const run = await serve(model, [...args], cacheDir).catch((e: Error) => ({ peakMiB: NaN, memory: undefined, error: e.message }));
  const m = run.memory;
  rows.push(`| ours, ${name} | ${run.peakMiB.toFixed(0)} | ${mib(m?.kv_cache_bytes)} | ${mib(m?.kv_cache_max_bytes)} | ${mib(m?.weights_bytes)} | ${mib(m?.other_bytes)} |`);
  console.error(rows.at(-1));
}
if (!(process.env.BENCH_SKIP ?? '').includes('llama')) {
  const gguf = join(tmpdir(), 'mlxcel-bench-qwen3-0.6b-q4_0.gguf');
  writeBenchGgufQ4_0(gguf);
  console.error('llama.cpp: 4 x 8192, f16 KV');
  rows.push(`| llama.cpp, 4 x 8192, f16 KV | ${(await runLlama(gguf, 8192)).toFixed(0)} | | | | |`);
  console.error(rows.at(-1));
}
const perToken = (k: 'f32' | 'f16') => kvTokenBytes({ kvHeads: shape.kvHeads, headDim: shape.headDim }, { k, v: k }, Array<number>(shape.layers).fill(0));
console.log(`KV bytes per token: f32 ${perToken('f32')}, f16 ${perToken('f16')}\n`);
console.log('| server | peak RSS (MiB) | KV allocated (MiB) | KV max (MiB) | weights (MiB) | other GPU (MiB) |');
console.log('|---|---:|---:|---:|---:|---:|');
for (const row of rows) console.log(row);
