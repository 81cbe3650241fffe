// --kv-unified through the real server and engine on stories260k: the slots share one KV
// pool, so a single request may be longer than ctx-size / parallel (refused with 400
// without the flag), /slots and /health report the whole context; when concurrent
// requests fill the pool, a queued prompt waits for room and a decoding request that
// finds none ends with finish reason length, never an error.
import { describe, expect, it } from 'vitest';
import { useStartLive } from './helpers/live-server.js';
import { storiesCases } from './helpers/stories-expected.js';

const STORY = storiesCases[0]!.expected_token_ids;
const prompt = (from: number, n: number) => [1, ...STORY.slice(from, from + n)];

const start = useStartLive();

async function serve(kvUnified: boolean, extra: { cachePrompt?: boolean; parallel?: number } = {}): Promise<string> {
  const live = await start({ model: 'models/stories260k', engine: { contextSize: 256, parallel: extra.parallel ?? 4, kvUnified, cachePrompt: extra.cachePrompt } });
  return live.url;
}

interface Native {
  content: string;
  tokens_predicted: number;
  tokens_evaluated: number;
  stop_type: string;
}

async function complete(url: string, body: Record<string, unknown>): Promise<{ status: number; body: Native }> {
  const res = await fetch(`${url}/completion`, { method: 'POST', body: JSON.stringify({ temperature: 0, ...body }) });
  return { status: res.status, body: (await res.json()) as Native };
}

describe('--kv-unified', () => {
  it('serves one request longer than ctx-size / parallel, which the per-slot split refuses', async () => {
    const long = prompt(0, 149); // 150 tokens: more than 256 / 4
    const split = await serve(false);
    const refused = await complete(split, { prompt: long, n_predict: 40 });
    expect(refused.status).toBe(400);
    const health = async (url: string) => ((await (await fetch(`${url}/health`)).json()) as { context_size: number }).context_size;
    expect(await health(split)).toBe(64);

    const unified = await serve(true);
    expect(await health(unified)).toBe(256);
    const slots = (await (await fetch(`${unified}/slots`)).json()) as Array<{ context_size: number }>;
    expect(slots.map((s) => s.context_size)).toEqual([256, 256, 256, 256]);
    const served = await complete(unified, { prompt: long, n_predict: 40 });
    expect(served.status).toBe(200);
    expect(served.body).toMatchObject({ tokens_evaluated: 150, tokens_predicted: 40, stop_type: 'limit' });
    expect(served.body.content.length).toBeGreaterThan(0);
    // Choices of one prompt fork from its prefill in the shared pool, each what seed + i gets alone.
    const sampled = { prompt: prompt(0, 40), n_predict: 20, temperature: 1, top_k: 0, top_p: 1, min_p: 0 };
    const choices = await fetch(`${unified}/completion`, { method: 'POST', body: JSON.stringify({ ...sampled, n_cmpl: 2, seed: 3 }) });
    const results = (await choices.json()) as Native[];
    expect(results.map((r) => r.tokens_predicted)).toEqual([20, 20]);
    for (const [i, r] of results.entries()) expect((await complete(unified, { ...sampled, seed: 3 + i })).body.content).toBe(r.content);
    // The context is the whole pool: prompt and generation together stop at 256.
    const toTheEnd = await complete(unified, { prompt: long, n_predict: 500 });
    expect(toTheEnd.body).toMatchObject({ tokens_predicted: 256 - 150, stop_type: 'limit' });
  });

  it('ends a request the full pool has no room for with length, and serves the rest', async () => {
    // No prompt cache: the pool is exactly the 256 tokens of --ctx-size.
    const url = await serve(true, { cachePrompt: false, parallel: 2 });
    const [a, b] = await Promise.all([
      complete(url, { prompt: prompt(0, 99), n_predict: 120 }),
      complete(url, { prompt: prompt(40, 99), n_predict: 120 }),
    ]);
    expect([a.status, b.status]).toEqual([200, 200]);
    const predicted = [a.body.tokens_predicted, b.body.tokens_predicted].sort((x, y) => x - y);
    // Together they wanted 440 positions of 256: one was cut short when the pool ran out,
    // the other then had the room to finish.
    expect(predicted[1]).toBe(120);
    expect(predicted[0]).toBeLessThan(120);
    // It was cut when the two held the pool between them, each to within a block.
    expect(2 * (100 + predicted[0]!)).toBeLessThanOrEqual(256 + 2 * 16);
    for (const r of [a, b]) expect(r.body.stop_type).toBe('limit');
    // The pool is whole again.
    const after = await complete(url, { prompt: prompt(0, 99), n_predict: 150 });
    expect(after.body.tokens_predicted).toBe(150);
  });
});
