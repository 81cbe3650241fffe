// The long robustness runs, against the real server as a child process:
//   fuzz  N requests over every route (test/helpers/fuzz.ts) at concurrency 8, with a
//         GET /health probe every 100 ms from a thread of its own; reports crashes,
//         undocumented 5xx (and the documented ones, such as /detokenize's 500), hangs,
//         bad envelopes, and the probe's max and p99.
//   soak  concurrent streaming clients with random aborts (test/helpers/soak.ts); reports
//         idle slots, empty queue, unchanged greedy output and RSS growth.
//
//   npx tsx bench/robustness.ts fuzz [--requests 10000] [--seed 1] [--model DIR|qwen3]
//   npx tsx bench/robustness.ts soak [--clients 32] [--rounds 400] [--model DIR|qwen3]
// --model qwen3 serves a random-weight Qwen3 with the real Qwen3 tokenizer; the default is
// models/stories260k.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { fuzz, percentile, probeHealth, stallSuspects } from '../test/helpers/fuzz.js';
import { makeRandomCheckpoint } from '../test/helpers/random-checkpoint.js';
import { startServerProcess } from '../test/helpers/server-process.js';
import { soak } from '../test/helpers/soak.js';

const { positionals, values } = parseArgs({
  allowPositionals: true,
  options: {
    requests: { type: 'string', default: '10000' },
    seed: { type: 'string', default: '1' },
    clients: { type: 'string', default: '32' },
    rounds: { type: 'string', default: '400' },
    model: { type: 'string', default: 'models/stories260k' },
  },
});
const mode = positionals[0] ?? 'fuzz';

function randomQwen3(): string {
  const dir = mkdtempSync(join(tmpdir(), 'robustness-qwen3-'));
  makeRandomCheckpoint({ arch: 'qwen3', tokenizer: 'qwen3', hidden: 64, layers: 2, heads: 4, kvHeads: 2, headDim: 16, intermediate: 128, seed: 1 }, dir);
  return dir;
}
const modelDir = values.model === 'qwen3' ? randomQwen3() : values.model;
const server = await startServerProcess(['-m', modelDir, '-np', '4']);
console.log(`server ${server.url} on ${modelDir}`);
try {
  if (mode === 'fuzz') {
    const probe = probeHealth(server.url);
    const started = Date.now();
    const report = await fuzz(server.url, {
      seed: Number(values.seed),
      requests: Number(values.requests),
      concurrency: 8,
      deadlineMs: 120_000,
      onProgress: (n) => n % 500 === 0 && console.log(`${n} requests, ${((Date.now() - started) / 1000).toFixed(0)} s`),
    });
    const health = await probe.stop();
    const { outcomes, ...summary } = report;
    console.log(JSON.stringify({ ...summary, problems: report.problems.slice(0, 20) }, null, 1));
    for (const stall of stallSuspects(health, outcomes)) console.log(`/health waited ${stall.waitedMs} ms while in flight: ${stall.inFlight.join(' | ')}`);
    console.log(
      `fuzz: ${report.requests} requests in ${((Date.now() - started) / 1000).toFixed(0)} s; crashed: ${server.exited() ?? 'no'}; ` +
        `undocumented 5xx ${report.problems.filter((p) => p.problem === 'undocumented-5xx').length} ` +
        `(documented 5xx ${report.documented5xx}), ` +
        `hangs ${report.problems.filter((p) => p.problem === 'hang').length}, ` +
        `bad envelopes ${report.problems.filter((p) => p.problem === 'bad-envelope').length}; ` +
        `/health probe: ${health.samples.length} calls, max ${Math.max(...health.samples).toFixed(0)} ms, ` +
        `p99 ${percentile(health.samples, 99).toFixed(0)} ms, failures ${health.failures}`,
    );
  } else {
    const report = await soak(server, { clients: Number(values.clients), rounds: Number(values.rounds), seed: Number(values.seed) });
    console.log(JSON.stringify(report, null, 1));
  }
} finally {
  const tail = server.output().split('\n').filter((l) => /error|fail/i.test(l)).slice(-20);
  if (tail.length) console.log(`server log (errors):\n${tail.join('\n')}`);
  await server.stop();
}
