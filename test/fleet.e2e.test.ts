// Replicas as a fleet on this machine: three mlxcel-server processes on stories260k behind
// HAProxy (round-robin, health-checked on GET /ready, a request refused with 503 or whose
// connection failed retried on another replica) sharing a redis-server store, and one
// replica with a SQLite store. Stored responses chain across replicas and restarts, a
// rolling restart under load loses nothing, a Redis outage fails only the store-backed
// routes, and a killed replica fails only its own requests.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from './helpers/free-port.js';
import { accepts, startRedis, type RedisServer } from './helpers/redis-server.js';
import { startServerProcess, type ServerProcess } from './helpers/server-process.js';
import { waitFor } from './helpers/server-load.js';

const MODEL = 'models/stories260k';
/** Streaming clients during the rolling restart. */
const ROLL_CLIENTS = 8;
const GREEDY = { temperature: 0, max_tokens: 16 };

interface Replica {
  name: string;
  port: number;
  url: string;
  process: ServerProcess;
}

let dir: string;
let redis: RedisServer;
let replicas: Replica[];
let haproxy: ChildProcess;
let fleetUrl: string;
let fleet: OpenAI;
/** The replica with a SQLite store, started beside the fleet. */
let lone: { port: number; args: string[]; process: ServerProcess };

const replicaArgs = () => ['-m', MODEL, '--store', redis.url, '--shutdown-grace-secs', '10'];

async function startReplica(port: number, args: string[]): Promise<ServerProcess> {
  return startServerProcess([...args, '--port', String(port)]);
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'fleet-'));
  redis = await startRedis();
  const ports = [await freePort(), await freePort(), await freePort()];
  const lonePort = await freePort();
  const loneArgs = ['-m', MODEL, '--store', `sqlite:${join(dir, 'responses.db')}`];
  const [loneProcess, ...processes] = await Promise.all([lonePort, ...ports].map((port, i) => startReplica(port, i === 0 ? loneArgs : replicaArgs())));
  lone = { port: lonePort, args: loneArgs, process: loneProcess! };
  replicas = ports.map((port, i) => ({ name: `r${i}`, port, url: `http://127.0.0.1:${port}`, process: processes[i]! }));
  const port = await freePort();
  fleetUrl = `http://127.0.0.1:${port}`;
  const config = join(dir, 'haproxy.cfg');
  writeFileSync(
    config,
    [
      'defaults',
      '  mode http',
      '  timeout connect 500ms',
      '  timeout client 60s',
      '  timeout server 60s',
      '  timeout check 500ms',
      '  retries 6',
      '  option redispatch 1',
      '  retry-on conn-failure empty-response 503',
      'frontend fleet',
      `  bind 127.0.0.1:${port}`,
      '  default_backend replicas',
      'backend replicas',
      '  balance roundrobin',
      '  option httpchk GET /ready',
      '  http-check expect status 200',
      '  http-response set-header X-Replica %[srv_name]',
      '  default-server inter 100ms fastinter 100ms downinter 100ms fall 1 rise 1',
      ...replicas.map((r) => `  server ${r.name} 127.0.0.1:${r.port} check`),
      '',
    ].join('\n'),
  );
  haproxy = spawn('haproxy', ['-db', '-f', config], { stdio: 'ignore' });
  await waitFor(() => accepts(port), 10_000, 'haproxy listening');
  await waitFor(async () => (await fetch(`${fleetUrl}/ready`)).status === 200, 10_000, 'a replica up behind haproxy');
  fleet = new OpenAI({ baseURL: `${fleetUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
});

afterAll(async () => {
  haproxy?.kill('SIGKILL');
  await Promise.all([...(replicas ?? []), ...(lone ? [lone] : [])].map((r) => r.process.stop()));
  await redis?.remove();
  rmSync(dir, { recursive: true, force: true });
});

/** A turn of a chained conversation: the response and the replica HAProxy sent it to. */
async function turn(client: OpenAI, input: string, previous: string | undefined) {
  const { data, response } = await client.responses
    .create({ model: 'm', input, previous_response_id: previous, max_output_tokens: 4, temperature: 0 })
    .withResponse();
  // Four tokens end most turns on the length bound.
  expect(['completed', 'incomplete']).toContain(data.status);
  expect(data.previous_response_id ?? undefined).toBe(previous);
  return { data, replica: response.headers.get('x-replica') };
}

/** Ten turns chained by previous_response_id; each turn's prompt holds all the earlier ones. */
async function converse(client: OpenAI, turns: number, previous?: string, inputTokens = 0) {
  const served: Array<string | null> = [];
  let last = previous;
  for (let i = 0; i < turns; i++) {
    const { data, replica } = await turn(client, `Tell me about day ${i}.`, last);
    expect(data.usage!.input_tokens).toBeGreaterThan(inputTokens);
    inputTokens = data.usage!.input_tokens;
    served.push(replica);
    last = data.id;
  }
  return { served, last: last!, inputTokens };
}

interface StreamResult {
  status: number;
  content: string;
  finish: string | null;
  done: boolean;
  error?: string;
}

/** A greedy streamed chat completion over raw HTTP, read to its end (or failure). */
async function streamChat(url: string, prompt: string, maxTokens = GREEDY.max_tokens): Promise<StreamResult> {
  try {
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: prompt }], ...GREEDY, max_tokens: maxTokens, stream: true }),
    });
    if (res.status !== 200) return { status: res.status, content: '', finish: null, done: false, error: await res.text() };
    const events = (await res.text()).split('\n\n').filter((b) => b.startsWith('data: ')).map((b) => b.slice(6));
    const chunks = events.filter((e) => e !== '[DONE]').map((e) => JSON.parse(e) as { choices: Array<{ delta: { content?: string }; finish_reason: string | null }> });
    return {
      status: 200,
      content: chunks.map((c) => c.choices[0]?.delta.content ?? '').join(''),
      finish: chunks.at(-1)?.choices[0]?.finish_reason ?? null,
      done: events.at(-1) === '[DONE]',
    };
  } catch (err) {
    return { status: 0, content: '', finish: null, done: false, error: String(err) };
  }
}

describe('a fleet of three replicas sharing Redis behind HAProxy', () => {
  it('chains a 10-turn Responses conversation by previous_response_id across replicas; any replica reads and deletes it', async () => {
    const { served, last } = await converse(fleet, 10);
    expect(new Set(served)).toEqual(new Set(['r0', 'r1', 'r2']));
    for (let i = 1; i < served.length; i++) expect(served[i]).not.toBe(served[i - 1]);
    const reads = await Promise.all(replicas.map((r) => fetch(`${r.url}/v1/responses/${last}`).then((res) => res.json() as Promise<{ id: string; status: string }>)));
    expect(new Set(reads.map((r) => r.id))).toEqual(new Set([last]));
    expect(['completed', 'incomplete']).toContain(reads[0]!.status);
    expect(new Set(reads.map((r) => r.status)).size).toBe(1);
    const deleted = await fetch(`${replicas[0]!.url}/v1/responses/${last}`, { method: 'DELETE' });
    expect(await deleted.json()).toEqual({ id: last, object: 'response', deleted: true });
    expect((await fetch(`${replicas[2]!.url}/v1/responses/${last}`)).status).toBe(404);
  });

  it('cancels a generation running on another replica', async () => {
    const [owner, other, third] = replicas as [Replica, Replica, Replica];
    const res = await fetch(`${owner.url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', input: 'Once upon a time', max_output_tokens: 480, temperature: 0, stream: true }),
    });
    const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
    let text = '';
    while (!/"response\.output_text\.delta"/.test(text)) text += (await reader.read()).value ?? '';
    const id = /"id":"(resp_[0-9a-f]+)"/.exec(text)![1]!;
    const cancel = await fetch(`${other.url}/v1/responses/${id}/cancel`, { method: 'POST' });
    expect(((await cancel.json()) as { status: string }).status).toBe('cancelled');
    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) text += chunk.value;
    expect(text).toMatch(/event: response\.incomplete\n/);
    expect(text).not.toMatch(/event: response\.completed\n/);
    const stored = (await (await fetch(`${third.url}/v1/responses/${id}`)).json()) as { status: string };
    expect(stored.status).toBe('cancelled');
  });

  it('answers 503 on the store-backed routes only while Redis is down, and recovers when it is back', async () => {
    const { last } = await converse(fleet, 1);
    // A stream admitted (and stored in_progress) before the outage cannot store its end: its
    // last event says so.
    const streaming = await fetch(`${replicas[0]!.url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', input: 'Once upon a time', max_output_tokens: 200, temperature: 0, stream: true }),
    });
    const reader = streaming.body!.pipeThrough(new TextDecoderStream()).getReader();
    let text = '';
    while (!/"response\.output_text\.delta"/.test(text)) text += (await reader.read()).value ?? '';
    await redis.stop();
    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) text += chunk.value;
    const events = text.split('\n\n').filter(Boolean).map((block) => block.split('\n')[0]);
    expect(events.at(-1)).toBe('event: error');
    expect(text).toMatch(/"code":"store_unavailable"/);

    const post = (body: object) => fetch(`${fleetUrl}/v1/responses`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'm', max_output_tokens: 2, ...body }) });
    for (const res of [await post({ input: 'Hi' }), await post({ input: 'Hi', previous_response_id: last }), await fetch(`${fleetUrl}/v1/responses/${last}`)]) {
      expect(res.status).toBe(503);
      const { error } = (await res.json()) as { error: { type: string; message: string } };
      expect(error.type).toBe('store_unavailable');
      expect(error.message).toMatch(/^The response store \(redis:\/\/127\.0\.0\.1:\d+\) cannot be reached/);
    }
    // What needs no store keeps serving, and every replica stays ready.
    expect((await post({ input: 'Hi', store: false })).status).toBe(200);
    expect((await fleet.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2 })).choices).toHaveLength(1);
    for (const r of replicas) expect((await fetch(`${r.url}/ready`)).status).toBe(200);

    await redis.start();
    await waitFor(async () => (await fetch(`${fleetUrl}/v1/responses/${last}`)).status === 200, 5000, 'the store back');
    const { served } = await converse(fleet, 3, last);
    expect(served).toHaveLength(3);
  });

  it(`rolls every replica (SIGTERM, restart) under ${ROLL_CLIENTS} streaming clients: no failed or truncated request, the idle server's greedy output`, async () => {
    const prompts = ['Once upon a time', 'Lily', 'Tom had a ball', 'The sun', 'A little dog', 'Sam was sad', 'One day', 'The cat'].slice(0, ROLL_CLIENTS);
    const idle = new Map<string, string>();
    for (const prompt of prompts) {
      const result = await streamChat(replicas[0]!.url, prompt);
      expect(result.done).toBe(true);
      idle.set(prompt, result.content);
    }
    let rolling = true;
    const results: Array<StreamResult & { prompt: string }> = [];
    const clients = prompts.map(async (prompt) => {
      while (rolling) results.push({ prompt, ...(await streamChat(fleetUrl, prompt)) });
    });
    for (const replica of replicas) {
      await waitFor(() => results.length >= 4, 10_000, 'requests flowing');
      await replica.process.stop();
      expect(replica.process.exited()).toBe('0');
      replica.process = await startReplica(replica.port, replicaArgs());
      await waitFor(async () => (await fetch(`${replica.url}/ready`)).status === 200, 10_000, `${replica.name} ready`);
    }
    rolling = false;
    await Promise.all(clients);
    const failed = results.filter((r) => r.status !== 200 || !r.done || r.finish === null);
    expect(failed).toEqual([]);
    for (const r of results) expect(r.content, r.prompt).toBe(idle.get(r.prompt));
    expect(results.length).toBeGreaterThan(3 * ROLL_CLIENTS);
  });

  it('SIGKILL of a replica fails its own in-flight requests and no other; what it stored reads back whole', async () => {
    const [victim, survivor] = replicas as [Replica, Replica, Replica];
    const long = (url: string) => streamChat(url, 'Once upon a time', 400);
    const response = await fetch(`${victim.url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', input: 'Lily', max_output_tokens: 400, stream: true }),
    });
    const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
    let text = '';
    while (!/"response\.in_progress"/.test(text)) text += (await reader.read()).value ?? '';
    const id = /"id":"(resp_[0-9a-f]+)"/.exec(text)![1]!;
    const doomed = [long(victim.url), long(victim.url)];
    const spared = [long(survivor.url), long(survivor.url)];
    await waitFor(async () => (await fetch(`${victim.url}/slots`).then((r) => r.json() as Promise<Array<{ state: string }>>)).filter((s) => s.state === 'decoding').length === 3, 10_000, 'victim busy');
    victim.process.child.kill('SIGKILL');
    for (const result of await Promise.all(doomed)) expect(result.done).toBe(false);
    const readRest = async () => {
      for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) text += chunk.value;
    };
    await expect(readRest()).rejects.toThrow();
    expect(text).not.toMatch(/event: response\.completed/);
    for (const result of await Promise.all(spared)) {
      expect([result.status, result.done]).toEqual([200, true]);
      expect(['length', 'stop']).toContain(result.finish);
    }
    // Registered whole when admitted; the killed replica never wrote more.
    const stored = (await (await fetch(`${survivor.url}/v1/responses/${id}`)).json()) as { id: string; status: string; output: unknown[] };
    expect([stored.id, stored.status, stored.output]).toEqual([id, 'in_progress', []]);
  });

  it('a second SIGTERM exits at once, without waiting for the requests in flight', async () => {
    const replica = replicas[2]!;
    const stream = streamChat(replica.url, 'Once upon a time', 480);
    await waitFor(async () => (await fetch(`${replica.url}/slots`).then((r) => r.json() as Promise<Array<{ state: string }>>)).some((s) => s.state === 'decoding'), 10_000, 'decoding');
    replica.process.child.kill('SIGTERM');
    await waitFor(() => /SIGTERM: draining/.test(replica.process.output()), 5000, 'draining');
    replica.process.child.kill('SIGTERM');
    await waitFor(() => replica.process.exited() !== undefined, 2000, 'exited');
    expect(replica.process.exited()).toBe('1');
    expect((await stream).done).toBe(false);
  });
});

describe('one replica with a SQLite store', () => {
  it('keeps a Responses conversation across a restart (SIGINT, exit 0, start): 10 turns, 5 before and 5 after', async () => {
    const client = () => new OpenAI({ baseURL: `${lone.process.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const first = await converse(client(), 5);
    // SIGINT drains as SIGTERM does.
    lone.process.child.kill('SIGINT');
    await waitFor(() => lone.process.exited() !== undefined, 10_000, 'exited after SIGINT');
    expect(lone.process.exited()).toBe('0');
    expect(lone.process.output()).toMatch(/SIGINT: draining/);
    lone.process = await startReplica(lone.port, lone.args);
    const second = await converse(client(), 5, first.last, first.inputTokens);
    expect((await client().responses.retrieve(first.last)).id).toBe(first.last);
    expect(second.last).toMatch(/^resp_/);
  });
});
