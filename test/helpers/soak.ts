// A soak for the live server: concurrent streaming and non-streaming clients over every
// generation route, a share of them aborting at a random moment, then the checks that
// nothing was left behind: every slot idle, the queue empty, the greedy reference output
// unchanged, and the resident set grown by no more than the caller's bound.
import { rng } from './rng.js';
import type { ServerProcess } from './server-process.js';

export interface SoakOptions {
  clients: number;
  /** Requests in all, shared among the clients. */
  rounds: number;
  seed: number;
  /** Share of requests the client aborts mid-way. */
  abortShare?: number;
}

export interface SoakReport {
  requests: number;
  aborted: number;
  statuses: Record<string, number>;
  slotsIdle: boolean;
  queueEmpty: boolean;
  greedyUnchanged: boolean;
  rssBeforeMiB: number;
  rssAfterMiB: number;
  seconds: number;
}

const user = (content: string) => ({ role: 'user', content });

/** A generation request on one of the routes, `maxTokens` long. */
function requestFor(r: () => number, maxTokens: number): { path: string; body: unknown } {
  const stream = r() < 0.7;
  const prompt = ['Once upon a time', 'The cat', 'Lily and Ben went to the park', 'One day'][Math.floor(r() * 4)]!;
  switch (Math.floor(r() * 5)) {
    case 0: return { path: '/v1/chat/completions', body: { messages: [user(prompt)], max_tokens: maxTokens, stream } };
    case 1: return { path: '/v1/completions', body: { prompt, max_tokens: maxTokens, stream } };
    case 2: return { path: '/completion', body: { prompt, n_predict: maxTokens, stream } };
    case 3: return { path: '/v1/responses', body: { input: prompt, max_output_tokens: maxTokens, stream } };
    default: return { path: '/v1/messages', body: { model: 'm', messages: [user(prompt)], max_tokens: maxTokens, stream } };
  }
}

async function greedy(url: string): Promise<string> {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 48, temperature: 0, cache_prompt: false }),
  });
  return ((await res.json()) as { choices: Array<{ text: string }> }).choices[0]!.text;
}

export async function soak(server: ServerProcess, options: SoakOptions): Promise<SoakReport> {
  const { url } = server;
  const r = rng(options.seed);
  const reference = await greedy(url);
  const rssBefore = server.rssBytes();
  const statuses: Record<string, number> = {};
  let aborted = 0;
  let next = 0;
  const started = Date.now();
  const client = async () => {
    while (next < options.rounds) {
      next++;
      const { path, body } = requestFor(r, 8 + Math.floor(r() * 56));
      const controller = new AbortController();
      const abortAfter = r() < (options.abortShare ?? 0.3) ? 20 + r() * 600 : undefined;
      const timer = abortAfter === undefined ? undefined : setTimeout(() => controller.abort(), abortAfter);
      try {
        const res = await fetch(`${url}${path}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(body),
          signal: AbortSignal.any([controller.signal, AbortSignal.timeout(120_000)]),
        });
        await res.arrayBuffer();
        statuses[res.status] = (statuses[res.status] ?? 0) + 1;
      } catch (err) {
        if (!controller.signal.aborted) throw err;
        aborted++;
      } finally {
        clearTimeout(timer);
      }
    }
  };
  await Promise.all(Array.from({ length: options.clients }, client));
  const seconds = (Date.now() - started) / 1000;

  // Aborted requests leave at the engine's next step: give them a bounded moment.
  let slotsIdle = false;
  let queueEmpty = false;
  for (let i = 0; i < 100 && !(slotsIdle && queueEmpty); i++) {
    const slots = (await (await fetch(`${url}/slots`)).json()) as Array<{ state: string }>;
    const health = (await (await fetch(`${url}/health`)).json()) as { batch: { queue_depth: number } };
    slotsIdle = slots.every((s) => s.state === 'idle');
    queueEmpty = health.batch.queue_depth === 0;
    if (!(slotsIdle && queueEmpty)) await new Promise((res) => setTimeout(res, 100));
  }
  const greedyUnchanged = (await greedy(url)) === reference;
  const mib = (bytes: number) => Math.round(bytes / 2 ** 20);
  return {
    requests: options.rounds,
    aborted,
    statuses,
    slotsIdle,
    queueEmpty,
    greedyUnchanged,
    rssBeforeMiB: mib(rssBefore),
    rssAfterMiB: mib(server.rssBytes()),
    seconds,
  };
}
