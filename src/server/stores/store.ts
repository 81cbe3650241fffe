// Where the Responses API keeps what outlives a request: stored responses, string-form
// conversations, and the cancel requests one replica leaves for another. One interface,
// three backends chosen by --store: memory (the default: this process only, lost on exit),
// sqlite:PATH (survives restarts; replicas on one host may share the file) and
// redis://HOST:PORT (shared by replicas anywhere). Every backend holds the same caps and
// TTLs (--responses-store-*, --conversation-store-*), writes each value whole in one
// transaction, and answers 503 (StoreUnavailableError's ApiError) when it cannot be reached,
// so only the routes that need it fail.
import { ApiError } from '../errors.js';
import { BoundedStore } from './bounded-store.js';

export interface StoreLimits {
  /** Entries kept at most; 0 disables the store (nothing is kept, lookups miss). */
  maxEntries: number;
  /** Seconds an entry lives after its last write; 0 = entries do not expire. */
  ttlSecs: number;
}

/** One namespace of a backend: JSON values under string keys, capped and expiring. */
export interface KeyValueStore<V> {
  readonly limits: StoreLimits;
  get(key: string): Promise<V | undefined>;
  /** Writes `value` whole and refreshes its TTL; the least recently written entries over the cap go. */
  set(key: string, value: V): Promise<void>;
  /** Whether there was a live entry to delete. */
  delete(key: string): Promise<boolean>;
}

export interface StoreBackend {
  /** What --store named (without credentials), for messages. */
  readonly description: string;
  /** Whether other processes read and write the same entries. */
  readonly shared: boolean;
  namespace<V>(name: string, limits: StoreLimits): KeyValueStore<V>;
  close(): Promise<void>;
}

/** --store's value, parsed. */
export type StoreSpec = { kind: 'memory' } | { kind: 'sqlite'; path: string } | { kind: 'redis'; url: string };

export const STORE_HELP = 'memory | sqlite:PATH | redis://[:PASSWORD@]HOST[:PORT][/DB]';

/** Undefined when `text` is no store spec. */
export function parseStoreSpec(text: string): StoreSpec | undefined {
  if (text === 'memory') return { kind: 'memory' };
  if (text.startsWith('sqlite:') && text.length > 'sqlite:'.length) return { kind: 'sqlite', path: text.slice('sqlite:'.length) };
  if (/^rediss?:\/\/./.test(text)) return { kind: 'redis', url: text };
  return undefined;
}

/** The 503 of a store that cannot be reached, naming it and the cause. */
export function storeUnavailable(description: string, cause: unknown): ApiError {
  const reason = cause instanceof Error ? cause.message : String(cause);
  return new ApiError(503, 'store_unavailable', `The response store (${description}) cannot be reached: ${reason}. Routes that do not read or write stored responses keep serving.`);
}

/** This process's maps; values are kept as they are (a live response object included). */
export class MemoryBackend implements StoreBackend {
  readonly description = 'memory';
  readonly shared = false;

  namespace<V>(_name: string, limits: StoreLimits): KeyValueStore<V> {
    const map = new BoundedStore<V>(limits);
    return {
      limits,
      get: async (key) => map.get(key),
      set: async (key, value) => map.set(key, value),
      delete: async (key) => map.delete(key),
    };
  }

  async close(): Promise<void> {}
}

export async function openStoreBackend(spec: StoreSpec): Promise<StoreBackend> {
  switch (spec.kind) {
    case 'memory':
      return new MemoryBackend();
    case 'sqlite':
      return new (await import('./sqlite-store.js')).SqliteBackend(spec.path);
    case 'redis':
      return new (await import('./redis-store.js')).RedisBackend(spec.url);
  }
}
