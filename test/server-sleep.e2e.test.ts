// --sleep-idle-seconds through the real server and engine on stories260k: after the idle
// spell the engine closes and destroys its GPU device (/props.is_sleeping turns true) while
// /health, /slots and the cache stats keep answering (and /ready says it sleeps, and the
// model server gauges read an empty KV pool of the same shape); the next requests wait while the
// model loads again and then give the same greedy output as before the sleep, through the
// openai client too, with the counters carried across.
import { describe, expect, it } from 'vitest';
import type { PromptCacheStats } from '../src/engine/prompt-cache.js';
import { useLive } from './helpers/live-server.js';
import { waitFor } from './helpers/server-load.js';
import { storiesCase } from './helpers/stories-expected.js';

const onceUponATime = storiesCase('Once upon a time');
const lines: string[] = [];
const live = useLive({ model: 'models/stories260k', engine: { parallel: 2, sleepIdleSeconds: 1, log: (line) => lines.push(line) } });

const get = async <T>(path: string): Promise<{ status: number; body: T }> => {
  const res = await fetch(`${live.url}${path}`);
  return { status: res.status, body: (await res.json()) as T };
};
const sleeping = async () => (await get<{ is_sleeping: boolean }>('/props')).body.is_sleeping;

describe('--sleep-idle-seconds', () => {
  it('sleeps when idle, keeps the status routes up, and wakes for the next requests', async () => {
    const client = live.openai;
    const ask = () => client.completions.create({ model: 'm', prompt: onceUponATime.prompt, max_tokens: 32, temperature: 0 });
    const before = await ask();
    expect(onceUponATime.expected_text.startsWith(before.choices[0]!.text)).toBe(true);
    expect(await sleeping()).toBe(false);
    expect(await get('/ready')).toEqual({ status: 200, body: { status: 'ready' } });
    const pool = live.engine.stats().kv!;

    await waitFor(sleeping, 10_000, 'the engine to sleep');
    expect(await get('/ready')).toEqual({ status: 503, body: { status: 'sleeping' } });
    expect(await get('/live')).toEqual({ status: 200, body: { status: 'alive' } });
    expect(live.engine.stats().kv).toEqual({ blockSize: pool.blockSize, blocks: pool.blocks, usedBlocks: 0, slotBlocks: [0, 0] });
    expect(lines.some((l) => l.startsWith('sleeping after 1 s idle'))).toBe(true);
    const health = await get<{ status: string; observability: { sequences_completed: number } }>('/health');
    expect(health.status).toBe(200);
    expect(health.body.status).toBe('ok');
    expect(health.body.observability.sequences_completed).toBe(1);
    const slots = await get<Array<{ state: string }>>('/slots');
    expect(slots.body.map((s) => s.state)).toEqual(['idle', 'idle']);
    const cache = await get<PromptCacheStats>('/v1/cache/stats');
    expect(cache.body).toMatchObject({ enabled: true, entries: 0, lookups: 1 });

    // Requests arriving together all wait for the one reload; streamed and not, same text.
    const stream = async () => {
      let text = '';
      for await (const chunk of await client.completions.create({ model: 'm', prompt: onceUponATime.prompt, max_tokens: 32, temperature: 0, stream: true })) {
        text += chunk.choices[0]?.text ?? '';
      }
      return text;
    };
    const after = await Promise.all([ask(), ask(), stream()]);
    expect(after.map((r) => (typeof r === 'string' ? r : r.choices[0]!.text))).toEqual([before.choices[0]!.text, before.choices[0]!.text, before.choices[0]!.text]);
    expect(lines.filter((l) => l.startsWith('awake again'))).toHaveLength(1);
    expect(await sleeping()).toBe(false);
    expect((await get('/ready')).status).toBe(200);
    expect((await get<{ observability: { sequences_completed: number } }>('/health')).body.observability.sequences_completed).toBe(4);
    expect((await get<PromptCacheStats>('/v1/cache/stats')).body.lookups).toBe(4);

    // And to sleep again once idle.
    await waitFor(sleeping, 10_000, 'the engine to sleep again');
  });
});
