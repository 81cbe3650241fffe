// Continuous batching through the real server and engine on stories260k: concurrent
// clients get batch-independent outputs, the prefill queue honours X-Priority, a full
// queue answers 503 before any SSE header, and a client that leaves frees its slot.
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import type { Engine } from '../src/engine/engine.js';
import { useLive } from './helpers/live-server.js';
import { countState, getSlots, holdSlot, waitFor } from './helpers/server-load.js';
import { storiesCases } from './helpers/stories-expected.js';

const MODEL = 'models/stories260k';

const wide = useLive({ model: MODEL, engine: { parallel: 8, maxQueue: 16 } }); // 8 slots: batching
const narrow = useLive({ model: MODEL, engine: { parallel: 1, maxQueue: 3 } }); // 1 slot, 3 queue places: saturation

/** Resolves once the engine has nothing running or queued. */
const idle = (engine: Engine) =>
  waitFor(() => engine.stats().activeSequences === 0 && engine.stats().queueDepth === 0, 10_000, 'engine idle');

async function streamCompletion(client: OpenAI, request: OpenAI.CompletionCreateParamsStreaming): Promise<string> {
  let text = '';
  for await (const chunk of await client.completions.create(request)) text += chunk.choices[0]?.text ?? '';
  return text;
}

async function streamChat(client: OpenAI, request: OpenAI.ChatCompletionCreateParamsStreaming): Promise<string> {
  let text = '';
  for await (const chunk of await client.chat.completions.create(request)) text += chunk.choices[0]?.delta.content ?? '';
  return text;
}

describe('batch independence', () => {
  it('six concurrent streaming clients get what each gets alone', async () => {
    const { openai: client, engine } = wide;
    // Each expected.json prompt twice: once through completions (greedy, its own
    // max_tokens), once through chat (whose template renders "<s>" + prompt) with a
    // seeded sampled request, so batching must not disturb the RNG streams either.
    const requests = storiesCases.flatMap((c) => [
      () => streamCompletion(client, { model: 'm', prompt: c.prompt, max_tokens: c.max_tokens, temperature: 0, stream: true }),
      () =>
        streamChat(client, {
          model: 'm',
          messages: [{ role: 'user', content: c.prompt || 'Once' }],
          max_tokens: 48,
          temperature: 0.9,
          seed: 1234,
          stream: true,
        }),
    ]);
    const alone: string[] = [];
    for (const run of requests) alone.push(await run());
    // Greedy runs alone reproduce expected.json, so "alone" is the right reference.
    storiesCases.forEach((c, i) => expect(alone[2 * i]).toBe(c.expected_text));

    let maxActive = 0;
    const sampler = setInterval(() => (maxActive = Math.max(maxActive, engine.stats().activeSequences)), 2);
    const together = await Promise.all(requests.map((run) => run()));
    clearInterval(sampler);
    expect(together).toEqual(alone);
    // They really ran side by side, in shared forward passes.
    expect(maxActive).toBeGreaterThanOrEqual(3);
    await idle(engine);
  });
});

describe('saturated server (1 slot, queue of 3)', () => {
  it('runs queued requests high, then normal, then low, whatever their arrival order', async () => {
    const { openai: client, engine } = narrow;
    const server = narrow;
    const holder = holdSlot(server.url, { priority: 'low' });
    await waitFor(async () => countState(await getSlots(server.url), 'decoding') === 1, 10_000, 'holder decoding');

    const finished: string[] = [];
    const queued: Array<Promise<unknown>> = [];
    for (const [i, priority] of ['low', 'normal', 'high'].entries()) {
      queued.push(
        client.completions
          .create({ model: 'm', prompt: 'Lily wanted to', max_tokens: 4, temperature: 0 }, { headers: { 'X-Priority': priority } })
          .then(() => finished.push(priority)),
      );
      // One at a time, so low really arrives first and high last.
      await waitFor(async () => countState(await getSlots(server.url), 'queued') === i + 1, 10_000, `${i + 1} queued`);
    }
    // All three waited together behind the holder, which is still running.
    expect((await getSlots(server.url)).map((s) => s.state)).toEqual(['decoding', 'queued', 'queued', 'queued']);
    holder.abort();
    await Promise.all(queued);
    expect(finished).toEqual(['high', 'normal', 'low']);
    await idle(engine);
  });

  it('answers 503 server_busy when the queue is full, before any SSE header, and leaks no slot', async () => {
    const { openai: client, engine } = narrow;
    const server = narrow;
    const holder = holdSlot(server.url);
    await waitFor(() => engine.stats().activeSequences === 1, 10_000, 'holder running');
    const waiting = [0, 1, 2].map(() => holdSlot(server.url, { maxTokens: 2, stream: false }));
    await waitFor(() => engine.stats().queueDepth === 3, 10_000, 'queue full');

    // Streaming: the refusal is a plain JSON 503, not an event stream.
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'Hi' }], stream: true }),
    });
    expect(res.status).toBe(503);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(await res.json()).toEqual({
      error: { message: expect.stringMatching(/busy/), type: 'server_busy', code: null },
    });
    // The same through the official client, streaming and not, and on the other routes.
    const streamed = await client.chat.completions
      .create({ model: 'm', messages: [{ role: 'user', content: 'Hi' }], stream: true })
      .catch((e: unknown) => e);
    expect(streamed).toBeInstanceOf(OpenAI.APIError);
    expect(streamed).toMatchObject({ status: 503, type: 'server_busy' });
    const plain = await client.completions.create({ model: 'm', prompt: 'Hi', max_tokens: 2 }).catch((e: unknown) => e);
    expect(plain).toMatchObject({ status: 503, type: 'server_busy' });
    const native = await fetch(`${server.url}/completion`, { method: 'POST', body: JSON.stringify({ prompt: 'Hi', stream: true }) });
    expect(native.status).toBe(503);
    expect(((await native.json()) as { error: { type: string } }).error.type).toBe('server_busy');
    expect(engine.stats()).toMatchObject({ activeSequences: 1, queueDepth: 3 });

    holder.abort();
    for (const w of waiting) expect(await w.done).toEqual({ status: 200, aborted: false });
    await idle(engine);
    // Every slot came back: the server serves again at full capacity.
    expect((await getSlots(server.url)).map((s) => s.state)).toEqual(['idle']);
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
    const after = await client.completions.create({ model: 'm', prompt: 'Lily wanted to', max_tokens: 8, temperature: 0 });
    expect(after.usage?.completion_tokens).toBe(8);
    expect(storiesCases.find((c) => c.prompt === 'Lily wanted to')!.expected_text.startsWith(after.choices[0]!.text)).toBe(true);
  });

  it('rejects an unknown X-Priority with 400 before queueing anything', async () => {
    const { openai: client, engine } = narrow;
    const server = narrow;
    const started = engine.stats().counters.sequences_started;
    const err = await client.chat.completions
      .create({ model: 'm', messages: [{ role: 'user', content: 'Hi' }], stream: true }, { headers: { 'X-Priority': 'urgent' } })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect(err).toMatchObject({ status: 400, type: 'invalid_request_error' });
    expect((err as Error).message).toMatch(/X-Priority must be one of: high, normal, low/);
    const res = await fetch(`${server.url}/completion`, { method: 'POST', headers: { 'X-Priority': 'urgent' }, body: '{"prompt":"Hi"}' });
    expect(res.status).toBe(400);
    expect(engine.stats().counters.sequences_started).toBe(started);
  });

  it('reports "no slot available" on /health while the slot is busy, then ok', async () => {
    const { engine } = narrow;
    const server = narrow;
    const holder = holdSlot(server.url);
    await waitFor(() => engine.stats().activeSequences === 1, 10_000, 'holder running');
    const busy = await fetch(`${server.url}/health`);
    expect(busy.status).toBe(503);
    expect(await busy.json()).toMatchObject({
      status: 'no slot available',
      model: 'stories260k',
      batch: { active_sequences: 1, queue_depth: 0, max_batch_size: 1 },
      context_size: 512,
    });
    holder.abort();
    await waitFor(async () => (await fetch(`${server.url}/health`)).status === 200, 10_000, '/health ok');
  });

  it.each([
    ['streaming', true],
    ['non-streaming', false],
  ])('a %s client that disconnects frees its slot (seen on /slots and /health)', async (_kind, stream) => {
    const { engine } = narrow;
    const server = narrow;
    const completed = engine.stats().counters.sequences_completed;
    const holder = holdSlot(server.url, { stream });
    await waitFor(async () => countState(await getSlots(server.url), 'decoding') === 1, 10_000, 'decoding');
    expect((await fetch(`${server.url}/health`)).status).toBe(503);
    holder.abort();
    expect(await holder.done).toEqual({ status: 0, aborted: true });
    await waitFor(async () => (await getSlots(server.url)).every((s) => s.state === 'idle'), 5_000, 'slot freed');
    const health = await fetch(`${server.url}/health`);
    expect(health.status).toBe(200);
    expect(await health.json()).toMatchObject({ status: 'ok', batch: { active_sequences: 0, queue_depth: 0 } });
    // Freed by the disconnect, not by running to its end.
    expect(engine.stats().counters.sequences_completed).toBe(completed);
  });
});
