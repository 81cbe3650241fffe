// What mlxcel-server prints while it starts: one line per fact and none of Dawn's own
// warnings, unless --verbose. The server runs as a child process on stories260k (and once on
// a tiny Whisper checkpoint: an audio-only server), its stdout
// and stderr on one pipe (a FIFO: Node's child pipes are socket pairs, and on a socket the
// server cannot hold Dawn's lines back; src/runtime/native-stderr.ts). The startup refusals
// of model kinds that do not load yet run main() in this process.
import { execFileSync, spawn } from 'node:child_process';
import { closeSync, constants, mkdirSync, mkdtempSync, openSync, rmSync, writeFileSync } from 'node:fs';
import { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { main } from '../src/cli.js';
import { waitFor } from './helpers/server-load.js';
import { makeWhisperCheckpoint } from './helpers/whisper-checkpoint.js';

const ROOT = join(import.meta.dirname, '..');
/** bin/mlxcel-server.js, on the sources rather than dist/. */
const ENTRY = "import { main } from './src/cli.ts'; await main(process.argv.slice(1), process.env);";
const DAWN_NOISE = /BackendVk|VulkanError|vkCreateInstance|artificially reduced|Couldn't load Vulkan/;

/**
 * Starts the server with `args` on 127.0.0.1 and a free port, waits (bounded) until it has
 * loaded, checks that it answers at the address it printed, stops it, and returns all it printed.
 */
/**
 * The lines stating a fact about the server: not the progress lines a load over 5 s logs
 * ("loading: ..."), nor the line the test's SIGTERM brings ("SIGTERM: draining, ...").
 */
function startupFacts(output: string): string[] {
  return output
    .split('\n')
    .filter((line) => line.startsWith('mlxcel-server: ') && !line.startsWith('mlxcel-server: loading: ') && !line.startsWith('mlxcel-server: SIGTERM: '));
}

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

describe.skipIf(process.platform !== 'linux')('startup output', () => {
  it('is one line per fact, without Dawn\'s internal warnings', async () => {
    const output = await startupOutput([]);
    expect(output).not.toMatch(DAWN_NOISE);
    const facts = startupFacts(output);
    expect(facts, output).toHaveLength(7);
    const [listening, adapter, model, context, budget, memory, loaded] = facts;
    expect(listening).toMatch(/^mlxcel-server: listening on http:\/\/127\.0\.0\.1:\d+$/);
    expect(adapter).toMatch(/^mlxcel-server: adapter .+ via \w+/);
    expect(model).toMatch(/^mlxcel-server: model stories260k \(llama, f32, [\d.]+ MiB\) from \S*models\/stories260k$/);
    expect(context).toMatch(/^mlxcel-server: context \d+ tokens per slot, 4 slots$/);
    expect(budget).toMatch(/^mlxcel-server: request memory budget [\d.]+ [KMGT]?i?B \(.+\), [\d.]+ [KMGT]?i?B of it for requests$/);
    expect(memory).toMatch(/^mlxcel-server: GPU memory: weights \d+ B \([\d.]+ MiB\), KV cache \d+ B \([\d.]+ MiB\) of at most \d+ B \([\d.]+ MiB\) \(K f16, V f16\), other \d+ B \([\d.]+ MiB\)$/);
    expect(loaded).toMatch(/^mlxcel-server: loaded in \d+\.\d s$/);
  });

  it('serves speech to text alone when -m is a Whisper checkpoint', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'mlxcel-startup-whisper-'));
    try {
      makeWhisperCheckpoint(dir, 2);
      const facts = startupFacts(await startupOutput(['-m', dir]));
      expect(facts).toHaveLength(4);
      expect(facts[2]).toBe(`mlxcel-server: speech-to-text model ${basename(dir)} (whisper, f32, 2+2 layers, 80 mel bins, 4 languages) from ${dir}`);
      expect(facts[3]).toMatch(/^mlxcel-server: loaded in \d+\.\d s$/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  // main() in this process, as bin/mlxcel-server.js runs it: its exit status is process.exitCode.
  it('exits with status 1 and one line for the reference\'s image and audio models, which do not load yet', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'mlxcel-startup-kinds-'));
    const lines: string[] = [];
    const log = vi.spyOn(console, 'log').mockImplementation((line: string) => void lines.push(line));
    const error = vi.spyOn(console, 'error').mockImplementation((line: string) => void lines.push(line));
    const run = async (args: string[], env: NodeJS.ProcessEnv = {}) => {
      lines.length = 0;
      process.exitCode = undefined;
      await main(['--host', '127.0.0.1', '--port', '0', ...args], env);
      const code = process.exitCode;
      process.exitCode = undefined;
      return { code, lines: [...lines] };
    };
    try {
      const served = 'this server serves text generation, embeddings, reranking, speech to text and text to speech';
      const image = `mlxcel-server: image generation models (--image-model, MLXCEL_IMAGE_MODEL) are not supported yet; ${served}`;
      expect(await run(['--image-model', 'black-forest-labs/FLUX.1-schnell'])).toEqual({ code: 1, lines: [image] });
      expect(await run([], { MLXCEL_IMAGE_MODEL: join(dir, 'flux') })).toEqual({ code: 1, lines: [image] });
      const whisper = join(dir, 'whisper-base');
      mkdirSync(whisper);
      writeFileSync(join(whisper, 'config.json'), JSON.stringify({ model_type: 'whisper', d_model: 512, encoder_layers: 6 }));
      const kokoro = join(dir, 'kokoro-82m');
      mkdirSync(kokoro);
      writeFileSync(join(kokoro, 'config.json'), JSON.stringify({ istftnet: { upsample_rates: [10, 6] }, vocab: {} }));
      // A Whisper or Kokoro checkpoint is no text model: refused where one is expected (--embeddings).
      const refusals = [
        [whisper, `${whisper} is a Whisper speech-to-text checkpoint, not a text model: serve it with -m alone (an audio-only server) or with --stt-model beside a chat model`],
        [kokoro, `${kokoro} is a Kokoro text-to-speech checkpoint, not a text model: serve it with -m alone (an audio-only server) or with --tts-model beside a chat model`],
      ];
      for (const [checkpoint, message] of refusals) {
        const { code, lines: printed } = await run(['-m', checkpoint!, '--embeddings']);
        expect(code, printed.join('\n')).toBe(1);
        expect(printed).toHaveLength(2);
        expect(printed[0]).toMatch(/^mlxcel-server: listening on http:/);
        expect(printed[1]).toBe(`mlxcel-server: ${message}`);
      }
    } finally {
      log.mockRestore();
      error.mockRestore();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('exits with status 2 and one line when --store names a SQLite file it cannot open', async () => {
    const lines: string[] = [];
    const error = vi.spyOn(console, 'error').mockImplementation((line: string) => void lines.push(line));
    try {
      process.exitCode = undefined;
      await main(['--host', '127.0.0.1', '--port', '0', '--store', `sqlite:${join(tmpdir(), 'mlxcel-no-such-dir', 'r.db')}`], {});
      expect(process.exitCode).toBe(2);
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(/^mlxcel-server: --store: .*director/);
    } finally {
      process.exitCode = undefined;
      error.mockRestore();
    }
  });

  it('brings Dawn\'s own warnings back with --verbose', async () => {
    const output = await startupOutput(['--verbose']);
    expect(output).toMatch(/^Warning: maxDynamic\w+ artificially reduced from \d+ to 16/m);
    expect(output).toMatch(/^mlxcel-server: loaded in /m);
  });
});
