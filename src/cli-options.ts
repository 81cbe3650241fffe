// Command-line options in llama-server's spelling, each also settable through its
// environment variable (the flag wins when both are given). Pure, so it is unit-tested.
import { parseArgs } from 'node:util';
import type { Backend } from './runtime/gpu.js';

export const BACKENDS = ['auto', 'metal', 'vulkan', 'd3d12', 'opengles', 'swiftshader'] as const satisfies readonly Backend[];

export interface ServeOptions {
  modelDir: string;
  host: string;
  port: number;
  /** Total KV tokens shared by the slots; undefined: the engine's default. */
  ctxSize?: number;
  parallel?: number;
  batchSize?: number;
  maxQueue?: number;
  apiKey?: string;
  alias?: string;
  backend: (typeof BACKENDS)[number];
}

export type CliCommand = { kind: 'help' } | { kind: 'serve'; options: ServeOptions };

export class CliError extends Error {}

interface Flag {
  name: string;
  short?: string;
  /** Environment variables read when the flag is absent, first match wins. */
  env: string[];
  value: string;
  help: string;
}

const FLAGS: Flag[] = [
  { name: 'model', short: 'm', env: ['LLAMA_ARG_MODEL'], value: 'DIR', help: 'model directory in Hugging Face layout (default: the bundled stories260k)' },
  { name: 'host', env: ['LLAMA_ARG_HOST'], value: 'HOST', help: 'address to listen on (default: 127.0.0.1)' },
  { name: 'port', env: ['LLAMA_ARG_PORT'], value: 'PORT', help: 'port to listen on, 0 for any free port (default: 8080)' },
  { name: 'ctx-size', short: 'c', env: ['LLAMA_ARG_CTX_SIZE'], value: 'N', help: 'context tokens shared by all slots, 0 for the model default (default: 0)' },
  { name: 'parallel', short: 'np', env: ['LLAMA_ARG_N_PARALLEL'], value: 'N', help: 'sequences decoded together (slots) (default: 4)' },
  { name: 'batch-size', short: 'b', env: ['LLAMA_ARG_BATCH'], value: 'N', help: 'tokens per forward pass, the prefill chunk (default: 512)' },
  { name: 'max-queue', env: ['LLAMA_ARG_MAX_QUEUE'], value: 'N', help: 'requests that may wait for a slot before 503 (default: 64)' },
  // LLAMA_API_KEY is llama-server's own name for this one.
  { name: 'api-key', env: ['LLAMA_ARG_API_KEY', 'LLAMA_API_KEY'], value: 'KEY', help: 'require this key in "Authorization: Bearer KEY" (default: none)' },
  { name: 'alias', env: ['LLAMA_ARG_ALIAS'], value: 'NAME', help: 'model id shown in responses (default: the model directory name)' },
  { name: 'backend', env: ['LLAMA_ARG_BACKEND'], value: 'NAME', help: `GPU backend: ${BACKENDS.join('|')} (default: auto)` },
];

export const HELP_TEXT = [
  'Usage: mlxcel-server [options]',
  '',
  'Serves an LLM over the OpenAI and llama-server HTTP APIs.',
  '',
  'Options:',
  ...FLAGS.map((f) => {
    const names = `${f.short ? `-${f.short}, ` : '    '}--${f.name} ${f.value}`;
    return `  ${names.padEnd(26)}${f.help}\n  ${''.padEnd(26)}(env: ${f.env.join(', ')})`;
  }),
  `  ${'-h, --help'.padEnd(26)}show this help`,
  '',
].join('\n');

export function parseCli(argv: string[], env: Readonly<Record<string, string | undefined>>, defaultModelDir: string): CliCommand {
  let values: Record<string, string | boolean | undefined>;
  try {
    // parseArgs takes one-letter short options only; llama-server has "-np".
    const longShorts = new Map(FLAGS.filter((f) => f.short && f.short.length > 1).map((f) => [`-${f.short}`, `--${f.name}`]));
    const args = argv.map((a) => longShorts.get(a) ?? a);
    const options = Object.fromEntries(
      FLAGS.map((f) => [f.name, { type: 'string' as const, ...(f.short?.length === 1 ? { short: f.short } : {}) }]),
    );
    ({ values } = parseArgs({ args, options: { ...options, help: { type: 'boolean', short: 'h' } }, strict: true }));
  } catch (err) {
    throw new CliError((err as Error).message);
  }
  if (values.help) return { kind: 'help' };

  const get = (name: string): string | undefined => {
    const flag = FLAGS.find((f) => f.name === name)!;
    const fromArgs = values[name];
    if (typeof fromArgs === 'string') return fromArgs;
    return flag.env.map((e) => env[e]).find((v) => v !== undefined && v !== '');
  };

  const ctxSize = integer('ctx-size', get('ctx-size') ?? '0', 0);
  const optionalInteger = (name: string, min: number) => {
    const text = get(name);
    return text === undefined ? undefined : integer(name, text, min);
  };
  const backend = get('backend') ?? 'auto';
  if (!(BACKENDS as readonly string[]).includes(backend)) {
    throw new CliError(`--backend must be one of ${BACKENDS.join(', ')}, got "${backend}"`);
  }
  return {
    kind: 'serve',
    options: {
      modelDir: get('model') ?? defaultModelDir,
      host: get('host') ?? '127.0.0.1',
      port: integer('port', get('port') ?? '8080', 0, 65535),
      ctxSize: ctxSize === 0 ? undefined : ctxSize,
      parallel: optionalInteger('parallel', 1),
      batchSize: optionalInteger('batch-size', 1),
      maxQueue: optionalInteger('max-queue', 0),
      apiKey: get('api-key'),
      alias: get('alias'),
      backend: backend as ServeOptions['backend'],
    },
  };
}

function integer(name: string, text: string, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const value = /^\d+$/.test(text) ? Number(text) : NaN;
  if (!(value >= min && value <= max)) throw new CliError(`--${name} must be an integer from ${min} to ${max}, got "${text}"`);
  return value;
}
