// A model named by its Hub repo, through the real command: `-hf` downloads it from a local
// stand-in Hub into a fresh HF_HOME while /health answers 503 with the download's progress,
// the server then reproduces stories260k's expected output, and a second start with the
// stand-in gone and HF_HUB_OFFLINE=1 serves the same from the cache. A repo the Hub does
// not have ends the command with one line and a non-zero exit.
import { spawn, type ChildProcess } from 'node:child_process';
import { lstatSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HubStandIn, storiesRepo } from './helpers/hub-stand-in.js';
import { Endpoint } from './helpers/live-server.js';
import { waitFor } from './helpers/server-load.js';
import { storiesCase } from './helpers/stories-expected.js';

const ROOT = join(import.meta.dirname, '..');
/** bin/mlxcel-server.js, on the sources rather than dist/. */
const ENTRY = "import { main } from './src/cli.ts'; await main(process.argv.slice(1), process.env);";
const REPO = storiesRepo('test-org/stories260k');
const onceUponATime = storiesCase('Once upon a time');

interface Running {
  child: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
}

function startCli(args: string[], env: Record<string, string>): Running {
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', ENTRY, '--', '--host', '127.0.0.1', '--port', '0', '--no-warmup', ...args], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.setEncoding('utf8').on('data', (t: string) => (output += t));
  child.stderr!.setEncoding('utf8').on('data', (t: string) => (output += t));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, output: () => output, exited };
}

async function stop(run: Running): Promise<void> {
  if (run.child.exitCode !== null) return;
  run.child.kill('SIGTERM');
  const killer = setTimeout(() => run.child.kill('SIGKILL'), 10_000);
  await run.exited;
  clearTimeout(killer);
}

/** Waits (bounded) until the server has loaded; returns its address. */
async function loaded(run: Running): Promise<string> {
  await waitFor(() => /loaded in|could not load/.test(run.output()) || run.child.exitCode !== null, 120_000, 'the server loaded');
  expect(run.output()).toMatch(/loaded in/);
  return /listening on (http:\S+)/.exec(run.output())![1]!;
}

async function complete(url: string): Promise<string> {
  const res = await new Endpoint(url).openai.completions.create({ model: REPO.id, prompt: onceUponATime.prompt, max_tokens: onceUponATime.max_tokens, temperature: 0 });
  return res.choices[0]!.text;
}

let home: string;
let hub: HubStandIn;

beforeAll(async () => {
  home = mkdtempSync(join(tmpdir(), 'mlxcel-hf-home-'));
  hub = await HubStandIn.start([REPO]);
});

afterAll(async () => {
  await hub?.stop();
  rmSync(home, { recursive: true, force: true });
});

describe('a model from the Hub, through the command', () => {
  it('downloads with -hf while /health reports progress, then serves the expected output; offline, it serves the same from the cache', async () => {
    const env = { HF_HOME: home, HF_ENDPOINT: hub.url, HF_HUB_OFFLINE: '', HF_HUB_CACHE: '', HF_TOKEN: '' };
    hub.faults.push({ path: 'model.safetensors', kind: 'hold', times: 1 });
    const first = startCli(['-hf', REPO.id], env);
    try {
      await waitFor(() => hub.holding === 1 || first.child.exitCode !== null, 60_000, 'the weights transfer began');
      const url = /listening on (http:\S+)/.exec(first.output())![1]!;
      const health = await fetch(`${url}/health`);
      expect(health.status).toBe(503);
      expect(await health.json()).toEqual({
        status: 'loading model',
        error: { code: 503, message: 'Loading model', type: 'unavailable_error' },
        progress: { stage: 'download', repo: REPO.id, files_done: expect.any(Number), files_total: 5, bytes_done: expect.any(Number), bytes_total: expect.any(Number) },
      });
      hub.release();
      await loaded(first);
      expect(await complete(url)).toBe(onceUponATime.expected_text);
      const models = (await (await fetch(`${url}/v1/models`)).json()) as { data: { id: string }[] };
      expect(models.data.map((m) => m.id)).toEqual([REPO.id]);
    } finally {
      await stop(first);
    }
    const output = first.output();
    expect(output).toMatch(/^mlxcel-server: downloading test-org\/stories260k \(commit [0-9a-f]{7}\) from http:\/\/127\.0\.0\.1:\d+: 5 files, /m);
    expect(output).toMatch(/^mlxcel-server: downloaded 1\.0\d MB in \d+s$/m);
    expect(output).toMatch(/^mlxcel-server: model test-org\/stories260k \(llama, f32, [\d.]+ MiB\) from \S+\/hub\/models--test-org--stories260k\/snapshots\/[0-9a-f]{40}$/m);
    // Not a terminal: plain lines, no carriage returns or escape sequences.
    expect(output).not.toMatch(/[\r\x1b]/);
    const repoDir = join(home, 'hub', 'models--test-org--stories260k');
    expect(readFileSync(join(repoDir, 'refs', 'main'), 'utf8')).toBe(REPO.commit);
    expect(lstatSync(join(repoDir, 'snapshots', REPO.commit, 'model.safetensors')).isSymbolicLink()).toBe(true);

    await hub.stop();
    const second = startCli(['-hf', REPO.id], { ...env, HF_HUB_OFFLINE: '1' });
    try {
      const url = await loaded(second);
      expect(await complete(url)).toBe(onceUponATime.expected_text);
      expect(second.output()).toMatch(/^mlxcel-server: test-org\/stories260k: commit [0-9a-f]{7} from the cache \(HF_HUB_OFFLINE\), /m);
    } finally {
      await stop(second);
    }
  });

  it('exits non-zero with one line for a repo the Hub does not have', async () => {
    const standIn = await HubStandIn.start([REPO]);
    try {
      const run = startCli(['--model', 'test-org/no-such-model'], { HF_HOME: home, HF_ENDPOINT: standIn.url, HF_HUB_OFFLINE: '', HF_HUB_CACHE: '', HF_TOKEN: '' });
      expect(await Promise.race([run.exited, new Promise((r) => setTimeout(() => r('timeout'), 60_000))])).toBe(1);
      const errors = run.output().split('\n').filter((l) => l.startsWith('mlxcel-server: ') && !/listening on/.test(l));
      expect(errors).toEqual([
        `mlxcel-server: model test-org/no-such-model not found on ${standIn.url} (HTTP 401); if it is private, set HF_TOKEN (or --hf-token) to a token that can read it`,
      ]);
    } finally {
      await standIn.stop();
    }
  });
});
