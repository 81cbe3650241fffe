// The live-server fixture of the end-to-end tests: the real engine on a real model (a
// directory such as models/stories260k, or a random-weight checkpoint written to a temp
// dir), in-process servers on 127.0.0.1 over it, and what a test talks to them with: the
// official openai and @anthropic-ai/sdk clients, `post` (JSON in, status and parsed JSON
// out) and `postSse` (JSON in, the SSE `data:` payloads out).
//
// `useModel`, `useServer` and `useLive` register beforeAll/afterAll in the scope they are
// called in (the file, or a describe block) and return the fixture at once; its fields are
// there from beforeAll on. `serve` starts a server that the test closes itself, and
// `useStartLive` starts model-and-server pairs inside tests, closed in afterAll.
import Anthropic from '@anthropic-ai/sdk';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, expect } from 'vitest';
import { EmbeddingOnlyEngine, type JobWorker } from '../../src/engine/embedding-only-engine.js';
import type { Engine, EngineOptions } from '../../src/engine/engine.js';
import { loadEngine } from '../../src/engine/load.js';
import { startServer, type RunningServer, type ServerOptions } from '../../src/server/server.js';
import { makeRandomCheckpoint, type RandomCheckpointOptions } from './random-checkpoint.js';
import { readSse } from './sse.js';

/** A model directory, or the spec of a random-weight checkpoint written to a temp dir. */
type ModelSource = string | RandomCheckpointOptions;

/** A random-weight Qwen3 with the real Qwen3 tokenizer, small enough for an end-to-end test. */
export function tinyQwen3({ layers, seed }: { layers: number; seed: number }): RandomCheckpointOptions {
  return { arch: 'qwen3', tokenizer: 'qwen3', hidden: 64, layers, heads: 4, kvHeads: 2, headDim: 16, intermediate: 128, seed };
}

interface ModelSpec {
  model: ModelSource;
  /** loadEngine's options besides modelDir. */
  engine?: Omit<EngineOptions, 'modelDir'>;
  /** Runs on the model's directory before it loads (a random checkpoint's chat template override). */
  prepare?: (dir: string) => void;
}

/** Server options besides host and port, and headers every `post` of the server sends. */
interface ServeSpec {
  server?: Partial<ServerOptions>;
  headers?: Record<string, string>;
}

interface Posted<T> {
  status: number;
  body: T;
}

/** A server's address and what talks to it: the two SDK clients and raw JSON requests. */
export class Endpoint {
  readonly openai: OpenAI;
  readonly anthropic: Anthropic;

  constructor(readonly url: string, private readonly headers: Record<string, string> = {}) {
    this.openai = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
    this.anthropic = new Anthropic({ baseURL: url, apiKey: 'unused', maxRetries: 0 });
  }

  /** POSTs `body` (JSON-encoded unless already a string; none when undefined); the raw response. */
  request = (path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Response> =>
    fetch(this.url + path, {
      method: 'POST',
      headers: { ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...this.headers, ...headers },
      body: body === undefined || typeof body === 'string' ? body : JSON.stringify(body),
    });

  /** POSTs `body`; the status and the parsed JSON answer. */
  post = async <T = any>(path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Posted<T>> => {
    const res = await this.request(path, body, headers);
    return { status: res.status, body: (await res.json()) as T };
  };

  /** POSTs `body`, expects a 200 and reads the whole SSE answer: its `data:` payloads ('[DONE]' kept as a string). */
  postSse = async (path: string, body: unknown, headers: Record<string, string> = {}): Promise<any[]> => {
    const res = await this.request(path, body, headers);
    expect(res.status, path).toBe(200);
    return (await readSse(res)) as any[];
  };
}

interface LiveModel {
  engine: Engine;
  /** The model's directory (the temp dir of a random checkpoint). */
  dir: string;
  close(): Promise<void>;
}

async function openModel({ model, engine: options, prepare }: ModelSpec): Promise<LiveModel> {
  const temp = typeof model === 'string' ? undefined : mkdtempSync(join(tmpdir(), 'live-model-'));
  const dir = typeof model === 'string' ? model : temp!;
  try {
    if (typeof model !== 'string') makeRandomCheckpoint(model, dir);
    prepare?.(dir);
    const engine = await loadEngine({ ...options, modelDir: dir });
    return {
      engine,
      dir,
      close: async () => {
        await engine.close();
        if (temp) rmSync(temp, { recursive: true, force: true });
      },
    };
  } catch (err) {
    if (temp) rmSync(temp, { recursive: true, force: true });
    throw err;
  }
}

export interface LiveServer extends Endpoint {
  server: RunningServer;
  close(): Promise<void>;
}

/** Starts a server over `engine` (which stays the caller's to close; a promise serves while it loads). */
export async function serve(engine: Engine | Promise<Engine>, { server: options, headers }: ServeSpec = {}): Promise<LiveServer> {
  const server = await startServer(engine, { ...options, host: '127.0.0.1', port: 0 });
  return Object.assign(new Endpoint(server.url, headers), { server, close: () => server.close() });
}

/**
 * A server over an audio worker (a transcriber or a speaker) alone, as an audio-only `-m`
 * makes it: generation answers as `disabledBy` says, and the worker stays the caller's to
 * close. Client and server share this process's event loop, which the worker's GPU work holds
 * for seconds, so the keep-alive timer outlasts it: a 5 s one could close a socket the client
 * has just picked for its next request. Real clients run beside the server, not inside it.
 */
async function serveAudioWorker(worker: JobWorker & { adapterDescription: string }, disabledBy: string, options: Partial<ServerOptions>): Promise<LiveServer> {
  const live = await serve(new EmbeddingOnlyEngine(worker, disabledBy, worker.adapterDescription), { server: { ...options, generationDisabledBy: disabledBy } });
  live.server.server.keepAliveTimeout = 120_000;
  return live;
}

/** Asserts a fetch Response is an OpenAI error envelope with this status and a message matching `message`; returns the error. */
export async function expectErrorResponse(res: Response, status: number, message: RegExp): Promise<{ message: string; type: string }> {
  expect(res.status).toBe(status);
  const body = (await res.json()) as { error: { message: string; type: string } };
  expect(body.error.message).toMatch(message);
  return body.error;
}

/**
 * A worker with no queue, busy with `running` (one request past its timeout): the next
 * request, `next()`, is refused with 503, and `running` ends with a 504 timeout_error whose
 * message matches `timedOut`.
 */
export async function expectQueueFullThenTimeout(worker: { pending: number }, running: Promise<Response>, next: () => Promise<Response>, timedOut: RegExp): Promise<void> {
  for (let i = 0; worker.pending === 0 && i < 500; i++) await new Promise((r) => setTimeout(r, 20));
  expect(worker.pending).toBe(1);
  await expectErrorResponse(await next(), 503, /./);
  const error = await expectErrorResponse(await running, 504, timedOut);
  expect(error.type).toBe('timeout_error');
}

/** An audio worker and the audio-only server over it (serveAudioWorker). */
export interface ServedWorker<W> {
  worker: W;
  live: LiveServer;
}

/**
 * An audio worker loaded in beforeAll and served by serveAudioWorker; afterAll of the calling
 * scope closes the server, then the worker. `load` runs after the hooks registered before
 * this call (the checkpoint they write).
 */
export function useAudioWorker<W extends JobWorker & { adapterDescription: string; close(): Promise<void> }>(
  load: () => Promise<W>,
  disabledBy: string,
  options: (worker: NoInfer<W>) => Partial<ServerOptions>,
): ServedWorker<W> {
  return hooked('the audio worker', async () => {
    const worker = await load();
    try {
      const live = await serveAudioWorker(worker, disabledBy, options(worker));
      return {
        worker,
        live,
        close: async () => {
          await live.close();
          await worker.close();
        },
      };
    } catch (err) {
      await worker.close();
      throw err;
    }
  });
}

type Live = LiveServer & LiveModel;

/** A model and one server over it; `close` closes the server, the engine and the temp dir. */
async function startLive(spec: ModelSpec & ServeSpec): Promise<Live> {
  const model = await openModel(spec);
  try {
    const live = await serve(model.engine, spec);
    return Object.assign(live, {
      engine: model.engine,
      dir: model.dir,
      close: async () => {
        await live.server.close();
        await model.close();
      },
    });
  } catch (err) {
    await model.close();
    throw err;
  }
}

/** A stand-in for what beforeAll opens: each field read goes to the opened value. */
function hooked<T extends { close(): Promise<void> }>(what: string, open: () => Promise<T>): T {
  let value: T | undefined;
  beforeAll(async () => {
    value = await open();
  });
  afterAll(async () => {
    await value?.close();
    value = undefined;
  });
  return new Proxy({} as T, {
    get(_, key) {
      if (!value) throw new Error(`${what} is not open: read its fields inside a test or hook`);
      const field = Reflect.get(value, key, value);
      return typeof field === 'function' ? field.bind(value) : field;
    },
  });
}

/** `startLive` for tests that start their own servers; afterAll of the calling scope closes every one. */
export function useStartLive(): (spec: ModelSpec & ServeSpec) => Promise<Live> {
  const started: Live[] = [];
  afterAll(async () => {
    for (const live of started.splice(0)) await live.close();
  });
  return async (spec) => {
    const live = await startLive(spec);
    started.push(live);
    return live;
  };
}

/** The model, loaded in beforeAll and closed in afterAll of the calling scope. */
export function useModel(spec: ModelSpec): LiveModel {
  return hooked('the model', () => openModel(spec));
}

/** A server over a fixture's engine, started in beforeAll and closed in afterAll of the calling scope. */
export function useServer(model: { engine: Engine }, spec: ServeSpec = {}): LiveServer {
  return hooked('the server', () => serve(model.engine, spec));
}

/** A model and one server over it, opened in beforeAll and closed in afterAll of the calling scope. */
export function useLive(spec: ModelSpec & ServeSpec): Live {
  return hooked('the live server', () => startLive(spec));
}
