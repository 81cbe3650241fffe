// Time to ready and time to first token of the real server binary, from an empty and from
// a warm Mesa shader cache, for the Qwen3-0.6B-shaped 4-bit bench checkpoint and the
// embedded stories260k. Each start is a fresh process: `node bin/mlxcel-server.js` (build
// first: npm run build). Ready = the first GET /health answering 200 (polled every 20 ms);
// first token = the first streamed completion chunk of a 4-token prompt after that.
//
// Run: npm run build && npx tsx bench/cold-start.ts   (BENCH_RUNS: cold/warm pairs, default 1)
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { writeBenchModel } from './bench-model.js';

const RUNS = Number(process.env.BENCH_RUNS ?? 1);
const repo = fileURLToPath(new URL('..', import.meta.url));
const PORT = 18_300 + (process.pid % 500);

interface Start { readyMs: number; firstTokenMs: number }

async function start(model: string | undefined, cacheDir: string): Promise<Start> {
  const args = ['bin/mlxcel-server.js', '--port', String(PORT), ...(model ? ['--model', model] : [])];
  const t0 = performance.now();
  const child = spawn(process.execPath, args, { cwd: repo, env: { ...process.env, MESA_SHADER_CACHE_DIR: cacheDir }, stdio: 'ignore' });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  const url = `http://127.0.0.1:${PORT}`;
  try {
    let readyMs = NaN;
    for (const deadline = Date.now() + 600_000; Date.now() < deadline; ) {
      const status = await fetch(`${url}/health`).then((r) => r.status, () => 0);
      if (status === 200) { readyMs = performance.now() - t0; break; }
      await new Promise((r) => setTimeout(r, 20));
    }
    if (Number.isNaN(readyMs)) throw new Error('not ready within 600 s');
    const t1 = performance.now();
    const res = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 4, temperature: 0, stream: true }),
    });
    const reader = res.body!.getReader();
    let firstTokenMs = NaN;
    let text = '';
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += Buffer.from(value).toString();
      if (Number.isNaN(firstTokenMs) && /"text":"[^"]/.test(text)) firstTokenMs = performance.now() - t1;
    }
    return { readyMs, firstTokenMs };
  } finally {
    child.kill('SIGTERM');
    await exited;
  }
}

const models: Array<[string, string | undefined]> = [
  ['Qwen3-0.6B shape, q4 g64', writeBenchModel(join(tmpdir(), 'mlxcel-bench-qwen3-0.6b-q4'))],
  ['stories260k (embedded default)', undefined],
];
const rows: string[] = [];
for (const [name, model] of models) {
  for (let run = 0; run < RUNS; run++) {
    const cache = mkdtempSync(join(tmpdir(), 'mlxcel-shader-cache-'));
    const cold = await start(model, cache);
    const warm = await start(model, cache);
    rmSync(cache, { recursive: true, force: true });
    const s = (ms: number) => (ms / 1000).toFixed(2);
    rows.push(`| ${name} | ${s(cold.readyMs)} | ${s(cold.firstTokenMs)} | ${s(warm.readyMs)} | ${s(warm.firstTokenMs)} |`);
    console.error(rows.at(-1));
  }
}
console.log('| model | cold: ready (s) | cold: first token after ready (s) | warm: ready (s) | warm: first token after ready (s) |');
console.log('|---|---:|---:|---:|---:|');
for (const r of rows) console.log(r);
