// A fuzzer for the live server: valid bodies for every route, mutated (types, sizes,
// nesting, unicode, invalid UTF-8, truncated JSON, wrong content types), and raw-socket
// abuse (garbage, slow headers, slow bodies, short bodies, broken chunking, pipelining,
// disconnects mid-generation). Every answer is checked for its status (5xx only 501 for a
// documented route this server cannot serve, 503 for a full queue or a load, and the
// answers the REST reference documents for a route, such as /detokenize's 500), its
// envelope (Anthropic's on /v1/messages, OpenAI's elsewhere) and its time; a probe on its
// own thread calls GET /health every 100 ms throughout and records how long each answer took.
// Deterministic for a seed; bounded: every request has a deadline.
import { request as httpRequest } from 'node:http';
import { connect } from 'node:net';
import { Worker } from 'node:worker_threads';
import { rng } from './rng.js';

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

interface RouteCase {
  method: 'GET' | 'POST' | 'DELETE' | 'PUT' | 'PATCH';
  path: string;
  /** Valid bodies to mutate (POST routes). */
  bodies?: Json[];
  /** Answers of 500 and up the REST reference documents for this route, beside 501 and 503. */
  documented?: DocumentedAnswer[];
}

interface DocumentedAnswer {
  status: number;
  type: string;
  message: RegExp;
}

const user = (content: string) => ({ role: 'user', content });
const weatherTool = {
  type: 'function',
  function: { name: 'get_weather', description: 'Weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
};

/** Every route, with bodies that do a bounded amount of work (a few tokens). */
export const ROUTES: RouteCase[] = [
  {
    method: 'POST',
    path: '/v1/chat/completions',
    bodies: [
      { messages: [user('Hi')], max_tokens: 6, temperature: 0 },
      { messages: [user('Hi')], max_tokens: 6, stream: true, stream_options: { include_usage: true } },
      { messages: [{ role: 'system', content: 'Be brief' }, user('Hi')], max_tokens: 6, logprobs: true, top_logprobs: 2 },
      { messages: [user('Weather?')], max_tokens: 12, tools: [weatherTool], tool_choice: 'required' },
      { messages: [user('JSON')], max_tokens: 12, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { a: { type: 'integer' } } } } } },
      { messages: [user('Hi')], max_tokens: 6, stop: ['a', 'b'], seed: 3, top_k: 5, logit_bias: { '5': 2 } },
    ],
  },
  {
    method: 'POST',
    path: '/v1/completions',
    bodies: [
      { prompt: 'Once upon a time', max_tokens: 6, temperature: 0 },
      { prompt: 'Once upon a time', max_tokens: 6, stream: true, logprobs: 2 },
      { prompt: [1, 2, 3], max_tokens: 4, echo: false },
    ],
  },
  {
    method: 'POST',
    path: '/completion',
    bodies: [
      { prompt: 'Once upon a time', n_predict: 6 },
      { prompt: 'Once upon a time', n_predict: 6, stream: true, n_probs: 2 },
      { prompt: 'Once', n_predict: 6, logit_bias: [[5, false]], cache_prompt: false },
    ],
  },
  { method: 'POST', path: '/tokenize', bodies: [{ content: 'hello world' }, { content: 'hi', add_special: true }] },
  {
    method: 'POST',
    path: '/detokenize',
    bodies: [{ tokens: [1, 2, 3] }, { tokens: [1, 2, 4294967296] }, { tokens: [-1, 2] }],
    documented: [{ status: 500, type: 'server_error', message: /^token id -?\d+ is out of vocabulary range \(vocab_size \d+\)$/ }],
  },
  {
    method: 'POST',
    path: '/v1/responses',
    bodies: [
      { input: 'Hi', max_output_tokens: 6 },
      { input: [{ role: 'user', content: 'Hi' }], max_output_tokens: 6, stream: true, store: false },
      { input: 'Hi', instructions: 'Be brief', max_output_tokens: 6, tools: [{ type: 'function', name: 'f', parameters: { type: 'object' } }] },
    ],
  },
  { method: 'POST', path: '/v1/responses/input_tokens', bodies: [{ input: 'Hi there' }] },
  {
    method: 'POST',
    path: '/v1/responses/compact',
    bodies: [{ input: [user('first question'), { role: 'assistant', content: 'an answer' }, user('second')], max_output_tokens: 8 }],
  },
  { method: 'GET', path: '/v1/responses/resp_abc' },
  { method: 'GET', path: '/v1/responses/%ZZ' },
  { method: 'DELETE', path: '/v1/responses/resp_abc' },
  { method: 'POST', path: '/v1/responses/%E0%A4%A/cancel', bodies: [{}] },
  {
    method: 'POST',
    path: '/v1/messages',
    bodies: [
      { model: 'm', max_tokens: 6, messages: [user('Hi')] },
      { model: 'm', max_tokens: 6, messages: [user('Hi')], stream: true, system: 'Be brief' },
      { model: 'm', max_tokens: 12, messages: [user('Weather?')], tools: [{ name: 'get_weather', input_schema: { type: 'object' } }], tool_choice: { type: 'any' } },
    ],
  },
  { method: 'POST', path: '/v1/messages/count_tokens', bodies: [{ model: 'm', messages: [user('Hi')] }] },
  { method: 'GET', path: '/health' },
  { method: 'GET', path: '/v1/models' },
  { method: 'GET', path: '/models' },
  { method: 'GET', path: '/props' },
  { method: 'GET', path: '/slots' },
  { method: 'GET', path: '/v1/cache/stats' },
  { method: 'POST', path: '/v1/cache/reset', bodies: [{}] },
  { method: 'POST', path: '/v1/embeddings', bodies: [{ input: 'x' }] },
  { method: 'POST', path: '/v1/images/generations', bodies: [{ prompt: 'x' }] },
  { method: 'POST', path: '/infill', bodies: [{ input_prefix: 'a', input_suffix: 'b' }] },
  { method: 'PUT', path: '/v1/chat/completions', bodies: [{}] },
  { method: 'PATCH', path: '/nope' },
  { method: 'GET', path: '/v1/../../etc/passwd' },
];

/** What one attempt came to. */
export interface Outcome {
  label: string;
  /** performance.now() when it was sent. */
  started: number;
  status: number;
  ms: number;
  /** Why the answer breaks the contract, if it does. */
  problem?: 'hang' | 'undocumented-5xx' | 'bad-envelope';
  /** A 5xx the reference documents for the route (RouteCase.documented). */
  documented?: true;
  detail?: string;
}

const DOCUMENTED_5XX = new Set([501, 503]);

const isAnthropic = (path: string) => /^\/(v1\/)?messages/.test(path);

/** Whether an answer is one of the route's documented 5xx answers, in its OpenAI envelope. */
export function isDocumented(route: RouteCase, status: number, text: string): boolean {
  let error: { type?: unknown; message?: unknown } | undefined;
  try {
    error = (JSON.parse(text) as { error?: typeof error }).error;
  } catch {
    return false;
  }
  return (route.documented ?? []).some((d) => d.status === status && error?.type === d.type && typeof error.message === 'string' && d.message.test(error.message));
}

function checkEnvelope(path: string, status: number, contentType: string, text: string): string | undefined {
  if (status < 400) return undefined;
  // /health's 503 (all slots busy, or loading) is its own documented body.
  if (path === '/health' && status === 503 && /"status":/.test(text)) return undefined;
  if (!contentType.includes('application/json')) return `content-type ${contentType}`;
  let body: { type?: unknown; error?: { type?: unknown; message?: unknown } };
  try {
    body = JSON.parse(text);
  } catch {
    return 'error body is not JSON';
  }
  const err = body.error;
  if (typeof err !== 'object' || err === null || typeof err.message !== 'string' || typeof err.type !== 'string') return 'no error.message/error.type';
  if (isAnthropic(path) && body.type !== 'error') return 'Anthropic envelope lacks type: "error"';
  return undefined;
}

/** One HTTP exchange with a raw body; the whole response read (SSE included) within `deadlineMs`. */
function exchange(
  url: URL,
  method: string,
  path: string,
  body: Buffer | undefined,
  headers: Record<string, string>,
  deadlineMs: number,
): Promise<{ status: number; contentType: string; text: string } | 'hang'> {
  return new Promise((resolve) => {
    const req = httpRequest(
      { host: url.hostname, port: url.port, method, path, headers: { ...headers, ...(body ? { 'content-length': String(body.length) } : {}) } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          clearTimeout(timer);
          resolve({ status: res.statusCode ?? 0, contentType: String(res.headers['content-type'] ?? ''), text: Buffer.concat(chunks).toString('utf8') });
        });
        res.on('error', () => undefined);
      },
    );
    const timer = setTimeout(() => {
      req.destroy();
      resolve('hang');
    }, deadlineMs);
    req.on('error', (err) => {
      clearTimeout(timer);
      resolve({ status: 0, contentType: '', text: String(err) });
    });
    req.end(body);
  });
}

// --- mutations -------------------------------------------------------------------------

const UNICODE = ['é', '日本語', '👩‍👩‍👧', '\u0000', '\ud800', '\udfff', '\u202e', '\ufeff', '\n\r\t', '</s>', '<|im_end|>', '<tool_call>'];

function randomString(r: () => number, maxLen: number): string {
  const len = Math.floor(r() ** 3 * maxLen);
  const unit = UNICODE[Math.floor(r() * UNICODE.length)]! + String.fromCharCode(32 + Math.floor(r() * 95));
  return unit.repeat(Math.ceil(len / unit.length)).slice(0, len);
}

function nested(depth: number, array: boolean): string {
  return array ? '['.repeat(depth) + ']'.repeat(depth) : '{"a":'.repeat(depth) + '1' + '}'.repeat(depth);
}

function randomValue(r: () => number): Json {
  const pick = Math.floor(r() * 14);
  switch (pick) {
    case 0: return null;
    case 1: return r() < 0.5;
    case 2: return Math.floor(r() * 200) - 100;
    case 3: return [-1, 0, 1e308, -1e308, 2 ** 53 + 1, 0.5, 1e-300, 4294967296][Math.floor(r() * 8)]!;
    case 4: return randomString(r, 64);
    case 5: return randomString(r, 200_000);
    case 6: return [];
    case 7: return {};
    case 8: return Array.from({ length: Math.floor(r() * 5) }, () => randomValue(r));
    case 9: return { role: 'user', content: randomString(r, 32) };
    case 10: return [user(randomString(r, 16))];
    case 11: return 'x'.repeat(1 + Math.floor(r() * 4_000_000));
    case 12: return Array.from({ length: 1 + Math.floor(r() * 20_000) }, (_, i) => (i % 2 ? { role: 'assistant', content: 'ok' } : user('hi')));
    default: return [Math.floor(r() * 1e6), -5, 'text'];
  }
}

/** Paths to every key and index in a value. */
function paths(value: Json, prefix: Array<string | number> = []): Array<Array<string | number>> {
  if (value === null || typeof value !== 'object') return [];
  const entries: Array<[string | number, Json]> = Array.isArray(value) ? value.map((v, i) => [i, v]) : Object.entries(value);
  return entries.flatMap(([k, v]) => [[...prefix, k], ...paths(v, [...prefix, k])]);
}

function setPath(root: Json, path: Array<string | number>, value: Json | undefined): Json {
  const copy = structuredClone(root);
  let node = copy as Record<string | number, Json>;
  for (const key of path.slice(0, -1)) node = node[key] as Record<string | number, Json>;
  const last = path[path.length - 1]!;
  if (value === undefined) {
    if (Array.isArray(node)) node.splice(last as number, 1);
    else delete node[last];
  } else node[last] = value;
  return copy;
}

interface Attempt {
  label: string;
  body?: Buffer;
  headers: Record<string, string>;
}

/** One mutated request for a route. */
function mutate(r: () => number, route: RouteCase): Attempt {
  const json = { 'content-type': 'application/json' };
  const base = route.bodies?.[Math.floor(r() * route.bodies.length)];
  if (base === undefined) return { label: 'as is', headers: {} };
  const kind = Math.floor(r() * 12);
  const encode = (v: Json) => Buffer.from(JSON.stringify(v));
  const targets = paths(base);
  const target = targets[Math.floor(r() * targets.length)];
  switch (kind) {
    case 0: return { label: 'valid', body: encode(base), headers: json };
    case 1:
    case 2:
    case 3:
      if (!target) break;
      return { label: `set ${target.join('.')}`, body: encode(setPath(base, target, randomValue(r))), headers: json };
    case 4:
      if (!target) break;
      return { label: `delete ${target.join('.')}`, body: encode(setPath(base, target, undefined)), headers: json };
    case 5: return { label: 'unknown key', body: encode({ ...(base as object), [randomString(r, 12) || 'k']: randomValue(r) }), headers: json };
    case 6: return { label: 'another JSON value', body: encode(randomValue(r)), headers: json };
    case 7: {
      const text = JSON.stringify(base);
      return { label: 'truncated JSON', body: Buffer.from(text.slice(0, Math.floor(r() * text.length))), headers: json };
    }
    case 8: {
      const text = Buffer.from(JSON.stringify(base));
      const at = Math.floor(r() * text.length);
      const bad = Buffer.from([[0xff], [0xc3], [0xed, 0xa0, 0x80], [0xf4, 0x90, 0x80, 0x80], [0x80]][Math.floor(r() * 5)]!);
      return { label: 'invalid UTF-8', body: Buffer.concat([text.subarray(0, at), bad, text.subarray(at)]), headers: json };
    }
    case 9: {
      const type = ['text/plain', 'multipart/form-data; boundary=x', 'application/x-www-form-urlencoded', 'application/json; charset=latin1', ''][Math.floor(r() * 5)]!;
      return { label: `content-type "${type}"`, body: encode(base), headers: type ? { 'content-type': type } : {} };
    }
    case 10: {
      const depth = [100, 129, 5_000, 200_000][Math.floor(r() * 4)]!;
      return { label: `nested ${depth}`, body: Buffer.from(`{"messages":${nested(depth, r() < 0.5)},"prompt":${nested(depth, false)}}`), headers: json };
    }
    default: {
      // Large request text where the route reads it.
      const big = 'All work and no play. '.repeat(Math.floor(r() * 300_000));
      const heavy: Record<string, Json> = { ...(base as Record<string, Json>) };
      for (const key of ['prompt', 'content', 'input', 'instructions', 'system']) if (key in heavy) heavy[key] = big;
      if ('messages' in heavy) heavy.messages = [user(big)];
      if ('stop' in heavy || r() < 0.3) heavy.stop = [big.slice(0, 100_000)];
      return { label: `large text ${big.length}`, body: encode(heavy), headers: json };
    }
  }
  return { label: 'valid', body: encode(base), headers: json };
}

// --- raw sockets -----------------------------------------------------------------------

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Abuse over a raw socket; resolves when the exchange is over (the server's answer, if any, read). */
function rawAbuse(url: URL, r: () => number, deadlineMs: number): Promise<Outcome> {
  const kinds = ['garbage', 'slow headers', 'slow body', 'short body', 'bad chunking', 'pipelined', 'disconnect mid-stream', 'huge header'] as const;
  const kind = kinds[Math.floor(r() * kinds.length)]!;
  const started = performance.now();
  return new Promise((resolve) => {
    const socket = connect(Number(url.port), url.hostname);
    let received = '';
    let settled = false;
    const finish = (problem?: Outcome['problem']) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      const status = Number(/^HTTP\/1\.1 (\d+)/.exec(received)?.[1] ?? 0);
      const undocumented = status >= 500 && !DOCUMENTED_5XX.has(status);
      resolve({ label: `raw: ${kind}`, started, status, ms: performance.now() - started, ...(problem ? { problem } : undocumented ? { problem: 'undocumented-5xx', detail: received.slice(0, 300) } : {}) });
    };
    const timer = setTimeout(() => finish('hang'), deadlineMs);
    socket.on('data', (d) => (received += d.toString('latin1')));
    socket.on('close', () => finish());
    socket.on('error', () => finish());
    const body = JSON.stringify({ prompt: 'Once upon a time', max_tokens: 200, stream: true });
    const head = (length: number | string, extra = '') =>
      `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${typeof length === 'number' ? `Content-Length: ${length}` : length}\r\n${extra}\r\n`;
    socket.on('connect', async () => {
      switch (kind) {
        case 'garbage':
          socket.end(Buffer.from(Array.from({ length: 200 }, () => Math.floor(r() * 256))));
          break;
        case 'slow headers':
          for (const ch of 'GET /health HTTP/1.1\r\nHost: x\r\n') {
            if (settled) return;
            socket.write(ch);
            await sleep(60);
          }
          socket.end();
          break;
        case 'slow body':
          socket.write(head(body.length));
          for (const ch of body.slice(0, 30)) {
            if (settled) return;
            socket.write(ch);
            await sleep(100);
          }
          socket.end();
          break;
        case 'short body':
          socket.write(head(body.length + 100) + body);
          await sleep(500);
          socket.end();
          break;
        case 'bad chunking':
          socket.end(head('Transfer-Encoding: chunked') + 'zz\r\nnot a chunk\r\n0\r\n\r\n');
          break;
        case 'pipelined':
          socket.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n' + head(body.length) + body);
          await sleep(300);
          socket.end();
          break;
        case 'disconnect mid-stream':
          socket.write(head(body.length) + body);
          await sleep(50 + r() * 500);
          finish();
          break;
        case 'huge header':
          socket.end(`GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(100_000)}\r\n\r\n`);
          break;
      }
    });
  });
}

// --- the run ---------------------------------------------------------------------------

export interface HealthSamples {
  /** How long each call took, ms. */
  samples: number[];
  /** performance.now() (this thread's clock) when each call was sent. */
  sentAt: number[];
  failures: number;
}

// The probe's loop, on a thread of its own: what it times is the server's answer, not this
// thread's event loop, which the fuzzer holds while it builds each large body.
const PROBE_THREAD = `
const { parentPort, workerData } = require('node:worker_threads');
const { request } = require('node:http');
const { host, port, intervalMs, deadlineMs } = workerData;
const result = { samples: [], sentAt: [], failures: 0 };
let running = true;
parentPort.once('message', () => (running = false));
const get = () => new Promise((resolve) => {
  const req = request({ host, port, path: '/health' }, (res) => {
    res.resume();
    res.on('end', () => { clearTimeout(timer); resolve(res.statusCode); });
  });
  const timer = setTimeout(() => { req.destroy(); resolve(0); }, deadlineMs);
  req.on('error', () => { clearTimeout(timer); resolve(0); });
  req.end();
});
(async () => {
  while (running) {
    const started = performance.now();
    const status = await get();
    result.samples.push(performance.now() - started);
    result.sentAt.push(performance.timeOrigin + started);
    if (status !== 200 && status !== 503) result.failures++;
    await new Promise((r) => setTimeout(r, Math.max(0, intervalMs - (performance.now() - started))));
  }
  parentPort.postMessage(result);
})();
`;

/**
 * GET /health every `intervalMs` (the next one starts when the previous one answered), from
 * a worker thread; `stop` ends it and returns what it measured.
 */
export function probeHealth(base: string, intervalMs = 100): { stop(): Promise<HealthSamples> } {
  const url = new URL(base);
  const worker = new Worker(PROBE_THREAD, { eval: true, workerData: { host: url.hostname, port: url.port, intervalMs, deadlineMs: 10_000 } });
  const result = new Promise<HealthSamples>((resolve, reject) => {
    worker.once('message', (r: HealthSamples) => resolve({ ...r, sentAt: r.sentAt.map((t) => t - performance.timeOrigin) }));
    worker.once('error', reject);
  });
  return {
    async stop() {
      worker.postMessage('stop');
      const samples = await result;
      await worker.terminate();
      return samples;
    },
  };
}

export interface FuzzReport {
  requests: number;
  byStatus: Record<string, number>;
  problems: Outcome[];
  /** Answers that are a route's documented 5xx (RouteCase.documented). */
  documented5xx: number;
  slowest: Outcome[];
  /** Every attempt, for attributing slow probe answers (stallSuspects). */
  outcomes: Outcome[];
}

/** For each probe answer slower than `ms`: the attempts that were in flight while it waited. */
export function stallSuspects(probe: HealthSamples, outcomes: Outcome[], ms = 500): Array<{ waitedMs: number; inFlight: string[] }> {
  const out: Array<{ waitedMs: number; inFlight: string[] }> = [];
  probe.samples.forEach((waited, i) => {
    if (waited <= ms) return;
    const from = probe.sentAt[i]!;
    const inFlight = outcomes.filter((o) => o.started < from + waited && o.started + o.ms > from).map((o) => o.label);
    out.push({ waitedMs: Math.round(waited), inFlight });
  });
  return out;
}

export interface FuzzOptions {
  seed: number;
  requests: number;
  concurrency: number;
  /** A request that has not answered by then is a hang. */
  deadlineMs: number;
  /** Share of attempts that are raw-socket abuse. */
  rawShare?: number;
  onProgress?: (done: number) => void;
}

export async function fuzz(base: string, options: FuzzOptions): Promise<FuzzReport> {
  const url = new URL(base);
  const r = rng(options.seed);
  const outcomes: Outcome[] = [];
  let next = 0;
  const one = async (): Promise<Outcome> => {
    if (r() < (options.rawShare ?? 0.08)) return rawAbuse(url, r, options.deadlineMs);
    const route = ROUTES[Math.floor(r() * ROUTES.length)]!;
    const attempt = mutate(r, route);
    const label = `${route.method} ${route.path} (${attempt.label})`;
    const started = performance.now();
    const res = await exchange(url, route.method, route.path, attempt.body, attempt.headers, options.deadlineMs);
    const ms = performance.now() - started;
    if (res === 'hang') return { label, started, status: 0, ms, problem: 'hang' };
    const otherServerError = res.status >= 500 && !DOCUMENTED_5XX.has(res.status);
    const documented = otherServerError && isDocumented(route, res.status, res.text);
    if (otherServerError && !documented) return { label, started, status: res.status, ms, problem: 'undocumented-5xx', detail: res.text.slice(0, 300) };
    const envelope = checkEnvelope(route.path, res.status, res.contentType, res.text);
    if (envelope) return { label, started, status: res.status, ms, problem: 'bad-envelope', detail: `${envelope}: ${res.text.slice(0, 200)}` };
    return { label, started, status: res.status, ms, ...(documented ? { documented: true as const } : {}) };
  };
  const worker = async () => {
    while (next < options.requests) {
      next++;
      outcomes.push(await one());
      options.onProgress?.(outcomes.length);
    }
  };
  await Promise.all(Array.from({ length: options.concurrency }, worker));
  const byStatus: Record<string, number> = {};
  for (const o of outcomes) byStatus[o.status] = (byStatus[o.status] ?? 0) + 1;
  return {
    requests: outcomes.length,
    byStatus,
    problems: outcomes.filter((o) => o.problem),
    documented5xx: outcomes.filter((o) => o.documented).length,
    slowest: [...outcomes].sort((a, b) => b.ms - a.ms).slice(0, 5),
    outcomes,
  };
}

export function percentile(samples: number[], p: number): number {
  if (samples.length === 0) return 0;
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}
