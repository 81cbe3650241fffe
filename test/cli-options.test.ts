import { describe, expect, it } from 'vitest';
import { CliError, HELP_TEXT, parseCli } from '../src/cli-options.js';

const DEFAULT_MODEL = '/pkg/models/stories260k';
const parse = (argv: string[], env: Record<string, string> = {}) => parseCli(argv, env, DEFAULT_MODEL);

describe('parseCli', () => {
  it('has llama-server defaults and the bundled model', () => {
    expect(parse([])).toEqual({
      kind: 'serve',
      options: { modelDir: DEFAULT_MODEL, host: '127.0.0.1', port: 8080, backend: 'auto' },
    });
  });

  it('reads every flag, long and short', () => {
    const argv = ['-m', '/m', '--host', '0.0.0.0', '--port', '0', '-c', '2048', '--api-key', 'k', '--alias', 'a', '--backend', 'vulkan'];
    expect(parse([...argv, '-np', '2', '-b', '64', '--max-queue', '0'])).toEqual({
      kind: 'serve',
      options: {
        modelDir: '/m',
        host: '0.0.0.0',
        port: 0,
        ctxSize: 2048,
        apiKey: 'k',
        alias: 'a',
        backend: 'vulkan',
        parallel: 2,
        batchSize: 64,
        maxQueue: 0,
      },
    });
    expect(parse(['--parallel', '3', '--batch-size', '128'])).toMatchObject({ options: { parallel: 3, batchSize: 128 } });
    expect(parse(['--model=/x', '--ctx-size=64'])).toMatchObject({ options: { modelDir: '/x', ctxSize: 64 } });
  });

  it('reads LLAMA_ARG_* variables, and a flag wins over its variable', () => {
    const env = {
      LLAMA_ARG_MODEL: '/env-model',
      LLAMA_ARG_HOST: '::1',
      LLAMA_ARG_PORT: '9000',
      LLAMA_ARG_CTX_SIZE: '128',
      LLAMA_ARG_API_KEY: 'secret',
      LLAMA_ARG_ALIAS: 'tiny',
      LLAMA_ARG_BACKEND: 'opengles',
      LLAMA_ARG_N_PARALLEL: '1',
      LLAMA_ARG_BATCH: '32',
      LLAMA_ARG_MAX_QUEUE: '8',
    };
    expect(parse([], env)).toEqual({
      kind: 'serve',
      options: {
        modelDir: '/env-model',
        host: '::1',
        port: 9000,
        ctxSize: 128,
        apiKey: 'secret',
        alias: 'tiny',
        backend: 'opengles',
        parallel: 1,
        batchSize: 32,
        maxQueue: 8,
      },
    });
    expect(parse(['--port', '1234'], env)).toMatchObject({ options: { port: 1234 } });
    expect(parse([], { LLAMA_API_KEY: 'llama-name' })).toMatchObject({ options: { apiKey: 'llama-name' } });
  });

  it('treats ctx-size 0 as the model default', () => {
    expect(parse(['-c', '0'])).toMatchObject({ options: { ctxSize: undefined } });
  });

  it('rejects bad values and unknown flags with a CliError', () => {
    expect(() => parse(['--port', '70000'])).toThrow(CliError);
    expect(() => parse(['--port', 'x'])).toThrow(/--port must be an integer/);
    expect(() => parse(['-c', '-5'])).toThrow(CliError);
    expect(() => parse(['--backend', 'cuda'])).toThrow(/--backend must be one of/);
    expect(() => parse(['--nope'])).toThrow(CliError);
    expect(() => parse(['--port'])).toThrow(CliError);
    expect(() => parse(['-np', '0'])).toThrow(/--parallel must be an integer from 1/);
  });

  it('answers --help and lists every option with its variable', () => {
    expect(parse(['--help'])).toEqual({ kind: 'help' });
    expect(parse(['-h'])).toEqual({ kind: 'help' });
    const names = ['--model', '-m,', '--host', '--port', '--ctx-size', '-c,', '--api-key', '--alias', '--backend', '-np,', '--parallel', '-b,', '--batch-size', '--max-queue'];
    for (const text of [...names, 'LLAMA_ARG_CTX_SIZE', 'LLAMA_ARG_N_PARALLEL', 'swiftshader']) {
      expect(HELP_TEXT).toContain(text);
    }
  });
});
