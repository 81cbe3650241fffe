// What mlxcel-server prints while it starts: one line per fact and none of Dawn's own
// warnings, unless --verbose. The server runs as a child process on stories260k, its stdout
// and stderr on one pipe (a FIFO: Node's child pipes are socket pairs, and on a socket the
// server cannot hold Dawn's lines back; src/runtime/native-stderr.ts).
import { execFileSync, spawn } from 'node:child_process';
import { closeSync, constants, mkdirSync, mkdtempSync, openSync, rmSync, writeFileSync } from 'node:fs';
import { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadEmbedder } from '../src/engine/embedder.js';
import { loadEngine } from '../src/engine/load.js';
import { UnsupportedModelKindError } from '../src/models/model-kinds.js';
import { makeEncoderCheckpoint } from './helpers/encoder-checkpoint.js';
import { waitFor } from './helpers/server-load.js';

const ROOT = join(import.meta.dirname, '..');
/** bin/mlxcel-server.js, on the sources rather than dist/. */
const ENTRY = "import { main } from './src/cli.ts'; await main(process.argv.slice(1), process.env);";
const DAWN_NOISE = /BackendVk|artificially reduced|Couldn't load Vulkan/;

/**
 * Starts the server with `args` on 127.0.0.1 and a free port, waits (bounded) until it has
 * loaded, checks that it answers at the address it printed, stops it, and returns all it printed.
 */
async function startupOutput(args: string[]): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'mlxcel-startup-'));
  const fifo = join(dir, 'output');
  execFileSync('mkfifo', [fifo]);
  const readFd = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
  const writeFd = openSync(fifo, constants.O_WRONLY);
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', ENTRY, '--', '--host', '127.0.0.1', '--port', '0', ...args], {
    cwd: ROOT,
    stdio: ['ignore', writeFd, writeFd],
  });
  closeSync(writeFd);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const pipe = new Socket({ fd: readFd, readable: true, writable: false });
  let output = '';
  pipe.setEncoding('utf8');
  pipe.on('data', (text: string) => (output += text));
  try {
    await waitFor(() => /loaded in|could not load/.test(output) || child.exitCode !== null, 60_000, 'the server loaded');
    const url = /listening on (http:\S+)/.exec(output)?.[1];
    expect(url, output).toBeDefined();
    expect((await fetch(`${url}/health`)).status).toBe(200);
  } finally {
    child.kill('SIGTERM');
    const killer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(killer);
    pipe.destroy();
    rmSync(dir, { recursive: true, force: true });
  }
  return output;
}

/** Runs the server with `args` until it exits (bounded): its exit code and all it printed. */
async function exitOutput(args: string[], env: NodeJS.ProcessEnv = process.env): Promise<{ code: number | null; output: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', ENTRY, '--', '--host', '127.0.0.1', '--port', '0', ...args], {
    cwd: ROOT,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.setEncoding('utf8').on('data', (text: string) => (output += text));
  child.stderr.setEncoding('utf8').on('data', (text: string) => (output += text));
  const killer = setTimeout(() => child.kill('SIGKILL'), 60_000);
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  clearTimeout(killer);
  return { code, output };
}

describe.skipIf(process.platform !== 'linux')('startup output', () => {
  it('is one line per fact, without Dawn\'s internal warnings', async () => {
    const output = await startupOutput([]);
    expect(output).not.toMatch(DAWN_NOISE);
    // A load that takes over 5 s also logs progress lines ("loading: ..."): not facts.
    const facts = output.split('\n').filter((line) => line.startsWith('mlxcel-server: ') && !line.startsWith('mlxcel-server: loading: '));
    expect(facts, output).toHaveLength(5);
    const [listening, adapter, model, context, loaded] = facts;
    expect(listening).toMatch(/^mlxcel-server: listening on http:\/\/127\.0\.0\.1:\d+$/);
    expect(adapter).toMatch(/^mlxcel-server: adapter .+ via \w+/);
    expect(model).toMatch(/^mlxcel-server: model stories260k \(llama, f32\) from \S*models\/stories260k$/);
    expect(context).toMatch(/^mlxcel-server: context \d+ tokens per slot, 4 slots$/);
    expect(loaded).toMatch(/^mlxcel-server: loaded in \d+\.\d s$/);
  });

  it('names a reranker as a reranker, and an embedding model by its pooling', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'mlxcel-startup-models-'));
    try {
      makeEncoderCheckpoint({ arch: 'xlm-roberta', hidden: 64, layers: 2, heads: 4, intermediate: 128, seed: 41, classifier: true }, join(dir, 'xlmr-reranker'));
      makeEncoderCheckpoint({ arch: 'bert', hidden: 64, layers: 2, heads: 4, intermediate: 128, seed: 31, pooling: 'mean' }, join(dir, 'bert-embed'));
      const output = await startupOutput(['-m', join(dir, 'xlmr-reranker'), '--reranking', '--embedding-model', join(dir, 'bert-embed'), '--batch-size', '64']);
      expect(output).toMatch(/^mlxcel-server: reranker xlmr-reranker \(xlm-roberta, f32, sequence classifier, query and document up to 64 tokens\) from \S+xlmr-reranker$/m);
      expect(output).toMatch(/^mlxcel-server: embedding model bert-embed \(bert, f32, mean pooling, 64 dims, inputs up to 64 tokens\) from \S+bert-embed$/m);
      expect(output).not.toMatch(/rank pooling/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('exits with status 1 and one line for the reference\'s image and audio models, which do not load yet', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'mlxcel-startup-kinds-'));
    try {
      const served = 'this server serves text generation, embeddings and reranking';
      const audio = 'audio models (a Whisper or Kokoro checkpoint served with -m) are not supported yet';
      const whisper = join(dir, 'whisper-base');
      mkdirSync(whisper);
      writeFileSync(join(whisper, 'config.json'), JSON.stringify({ model_type: 'whisper', d_model: 512, encoder_layers: 6 }));
      const kokoro = join(dir, 'kokoro-82m');
      mkdirSync(kokoro);
      writeFileSync(join(kokoro, 'config.json'), JSON.stringify({ istftnet: { upsample_rates: [10, 6] }, vocab: {} }));
      const [image, speech] = await Promise.all([exitOutput(['--image-model', 'black-forest-labs/FLUX.1-schnell']), exitOutput(['-m', whisper])]);
      expect(image.code, image.output).toBe(1);
      expect(image.output).toBe(`mlxcel-server: image generation models (--image-model, MLXCEL_IMAGE_MODEL) are not supported yet; ${served}\n`);
      expect(speech.code, speech.output).toBe(1);
      const lines = speech.output.trimEnd().split('\n');
      expect(lines, speech.output).toHaveLength(2);
      expect(lines[0]).toMatch(/^mlxcel-server: listening on http:/);
      expect(lines[1]).toBe(`mlxcel-server: ${whisper} is a Whisper speech-to-text checkpoint: ${audio}; ${served}`);
      // Kokoro, and either kind as an embedding model, are refused by the same check at load.
      await expect(loadEngine({ modelDir: kokoro })).rejects.toThrow(`${kokoro} is a Kokoro text-to-speech checkpoint: ${audio}; ${served}`);
      await expect(loadEmbedder({ modelDir: whisper })).rejects.toThrow(UnsupportedModelKindError);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('brings Dawn\'s own warnings back with --verbose', async () => {
    const output = await startupOutput(['--verbose']);
    expect(output).toMatch(/^Warning: maxDynamic\w+ artificially reduced from \d+ to 16/m);
    expect(output).toMatch(/^mlxcel-server: loaded in /m);
  });
});
