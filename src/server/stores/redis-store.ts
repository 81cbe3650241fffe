// --store redis://…: entries as Redis strings under mlxcel:entry:<namespace>:<key> with their
// TTL (PX), and per namespace a sorted set of keys by write time (mlxcel:index:<namespace>)
// that the cap evicts from. A
// write is one Lua script, so the value, its index entry and the evictions land together or
// not at all. While Redis cannot be reached, commands fail at once (no offline queue) and
// the routes that need the store answer 503; ioredis reconnects in the background.
import { Redis } from 'ioredis';
import { storeUnavailable, type KeyValueStore, type StoreBackend, type StoreLimits } from './store.js';

/** KEYS: the entry, the namespace's index. ARGV: value, now (ms), TTL (ms, 0 = none), cap. */
const WRITE = `
local ttl = tonumber(ARGV[3])
if ttl > 0 then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', tonumber(ARGV[2]) - ttl)
else
  redis.call('SET', KEYS[1], ARGV[1])
end
redis.call('ZADD', KEYS[2], ARGV[2], KEYS[1])
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[4])
if over > 0 then
  -- ZPOPMIN answers member, score, member, score, ...
  for i, member in ipairs(redis.call('ZPOPMIN', KEYS[2], over)) do
    if i % 2 == 1 then redis.call('DEL', member) end
  end
end
`;

/** KEYS: the entry, the namespace's index. */
const REMOVE = `
redis.call('ZREM', KEYS[2], KEYS[1])
return redis.call('DEL', KEYS[1])
`;

const PREFIX = 'mlxcel';

export class RedisBackend implements StoreBackend {
  readonly description: string;
  readonly shared = true;
  private readonly redis: Redis;

  constructor(url: string) {
    const parsed = new URL(url);
    parsed.password = parsed.password && '***';
    this.description = parsed.toString();
    this.redis = new Redis(url, {
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      commandTimeout: 2000,
      // Reconnect within a second of Redis coming back.
      retryStrategy: (times) => Math.min(times * 100, 1000),
    });
    // Failures are reported per request; the client keeps reconnecting.
    this.redis.on('error', () => {});
  }

  namespace<V>(ns: string, limits: StoreLimits): KeyValueStore<V> {
    const index = `${PREFIX}:index:${ns}`;
    const entry = (key: string) => `${PREFIX}:entry:${ns}:${key}`;
    const guard = async <T>(run: () => Promise<T>): Promise<T> => {
      try {
        return await run();
      } catch (err) {
        throw storeUnavailable(this.description, err);
      }
    };
    return {
      limits,
      get: (key) =>
        guard(async () => {
          const text = await this.redis.get(entry(key));
          return text === null ? undefined : (JSON.parse(text) as V);
        }),
      set: (key, value) =>
        guard(async () => {
          await this.redis.eval(WRITE, 2, entry(key), index, JSON.stringify(value), Date.now(), limits.ttlSecs * 1000, limits.maxEntries);
        }),
      delete: (key) => guard(async () => (await this.redis.eval(REMOVE, 2, entry(key), index)) === 1),
    };
  }

  async close(): Promise<void> {
    this.redis.disconnect();
  }
}
