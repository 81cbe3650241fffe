// The store backends behind the Responses API (src/server/stores/): memory, SQLite and a
// real redis-server hold the same caps and TTLs, write values whole, SQLite keeps them
// across a reopen, and a Redis that cannot be reached answers 503 naming the store, then
// serves again once it is back.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiError } from '../src/server/errors.js';
import { MemoryBackend, openStoreBackend, parseStoreSpec, type StoreBackend } from '../src/server/stores/store.js';
import { startRedis, type RedisServer } from './helpers/redis-server.js';
import { waitFor } from './helpers/server-load.js';

let dir: string;
let redis: RedisServer;
const backends: Record<string, StoreBackend> = {};

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'mlxcel-stores-'));
  redis = await startRedis();
  backends.memory = new MemoryBackend();
  backends.sqlite = await openStoreBackend({ kind: 'sqlite', path: join(dir, 'store.db') });
  backends.redis = await openStoreBackend({ kind: 'redis', url: redis.url });
});

afterAll(async () => {
  for (const backend of Object.values(backends)) await backend.close();
  await redis?.remove();
  rmSync(dir, { recursive: true, force: true });
});

describe.each(['memory', 'sqlite', 'redis'])('the %s store', (name) => {
  it('evicts the least recently written entry over the cap, and deletes', async () => {
    const store = backends[name]!.namespace<{ n: number }>(`cap-${name}`, { maxEntries: 2, ttlSecs: 0 });
    await store.set('a', { n: 1 });
    await store.set('b', { n: 2 });
    await store.set('a', { n: 3 }); // rewritten: now the newest
    await store.set('c', { n: 4 });
    expect([await store.get('a'), await store.get('b'), await store.get('c')]).toEqual([{ n: 3 }, undefined, { n: 4 }]);
    expect(await store.delete('a')).toBe(true);
    expect(await store.delete('a')).toBe(false);
    expect(await store.get('a')).toBeUndefined();
  });

  it('expires entries a TTL after their last write, namespaces apart', async () => {
    const store = backends[name]!.namespace<string>(`ttl-${name}`, { maxEntries: 10, ttlSecs: 1 });
    const other = backends[name]!.namespace<string>(`other-${name}`, { maxEntries: 10, ttlSecs: 0 });
    await store.set('x', 'v');
    await other.set('x', 'kept');
    expect(await store.get('x')).toBe('v');
    await waitFor(async () => (await store.get('x')) === undefined, 3000, 'the entry expired');
    expect(await store.delete('x')).toBe(false);
    expect(await other.get('x')).toBe('kept');
  });
});

describe('--store', () => {
  it('parses memory, sqlite:PATH and redis:// URLs, and nothing else', () => {
    expect(parseStoreSpec('memory')).toEqual({ kind: 'memory' });
    expect(parseStoreSpec('sqlite:/var/lib/x.db')).toEqual({ kind: 'sqlite', path: '/var/lib/x.db' });
    expect(parseStoreSpec('redis://:pw@cache:6379/2')).toEqual({ kind: 'redis', url: 'redis://:pw@cache:6379/2' });
    for (const bad of ['sqlite:', 'postgres://x', 'redis:/x', '']) expect(parseStoreSpec(bad), bad).toBeUndefined();
  });

  it('SQLite keeps entries across a reopen of its file', async () => {
    const path = join(dir, 'reopen.db');
    const first = await openStoreBackend({ kind: 'sqlite', path });
    await first.namespace<number[]>('responses', { maxEntries: 5, ttlSecs: 60 }).set('resp_1', [1, 2]);
    await first.close();
    const second = await openStoreBackend({ kind: 'sqlite', path });
    expect(await second.namespace<number[]>('responses', { maxEntries: 5, ttlSecs: 60 }).get('resp_1')).toEqual([1, 2]);
    await second.close();
  });

  it('an unreachable Redis answers 503 naming the store (password hidden), and serves again once it is back', async () => {
    const backend = await openStoreBackend({ kind: 'redis', url: `redis://:secret@127.0.0.1:${redis.port}` });
    const store = backend.namespace<string>('outage', { maxEntries: 5, ttlSecs: 0 });
    await waitFor(async () => (await store.set('k', 'v').then(() => true, () => false)), 5000, 'connected');
    await redis.stop();
    const err = await store.get('k').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).status).toBe(503);
    expect((err as ApiError).message).toMatch(/^The response store \(redis:\/\/:\*\*\*@127\.0\.0\.1:\d+\) cannot be reached: /);
    expect((err as ApiError).message).not.toContain('secret');
    await redis.start();
    await waitFor(async () => (await store.set('k', 'w').then(() => true, () => false)), 5000, 'reconnected');
    expect(await store.get('k')).toBe('w');
    await backend.close();
  });
});
