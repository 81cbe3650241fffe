// An in-memory map with a size cap and a time-to-live: the memory store backend's
// (./store.ts). Bounding both dimensions keeps a long-running process from growing without
// limit.
import type { StoreLimits } from './store.js';

interface Entry<V> {
  value: V;
  /** performance.now() deadline; Infinity without a TTL. */
  expires: number;
}

export class BoundedStore<V> {
  // A Map iterates in insertion order, and set() re-inserts, so the first key is always
  // the least recently written one: eviction takes it.
  private readonly entries = new Map<string, Entry<V>>();

  constructor(
    readonly limits: StoreLimits,
    /** Injectable clock (milliseconds) for tests. */
    private readonly now: () => number = () => performance.now(),
  ) {}

  get enabled(): boolean {
    return this.limits.maxEntries > 0;
  }

  get size(): number {
    this.sweep();
    return this.entries.size;
  }

  get(key: string): V | undefined {
    const entry = this.entries.get(key);
    if (!entry) return undefined;
    if (entry.expires <= this.now()) {
      this.entries.delete(key);
      return undefined;
    }
    return entry.value;
  }

  has(key: string): boolean {
    return this.get(key) !== undefined;
  }

  /** Writes (and refreshes the TTL of) `key`, evicting the oldest entries over the cap. */
  set(key: string, value: V): void {
    if (!this.enabled) return;
    const ttl = this.limits.ttlSecs;
    this.entries.delete(key);
    this.entries.set(key, { value, expires: ttl > 0 ? this.now() + ttl * 1000 : Infinity });
    this.sweep();
    while (this.entries.size > this.limits.maxEntries) {
      const oldest = this.entries.keys().next().value as string;
      this.entries.delete(oldest);
    }
  }

  delete(key: string): boolean {
    return this.get(key) !== undefined && this.entries.delete(key);
  }

  /** Drops expired entries; write order is not expiry order once TTLs are refreshed. */
  private sweep(): void {
    if (this.limits.ttlSecs <= 0) return;
    const now = this.now();
    for (const [key, entry] of this.entries) if (entry.expires <= now) this.entries.delete(key);
  }
}
