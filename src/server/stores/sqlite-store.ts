// --store sqlite:PATH: one table of JSON values in a SQLite file (better-sqlite3), so stored
// responses survive a restart; WAL mode lets several processes on one host share the file.
// Write order is the rowid (a rewrite is a new row), which the cap evicts by; expiry is a
// wall-clock deadline, since the entries outlive the process.
import Database from 'better-sqlite3';
import { storeUnavailable, type KeyValueStore, type StoreBackend, type StoreLimits } from './store.js';

export class SqliteBackend implements StoreBackend {
  readonly description: string;
  readonly shared = true;
  private readonly db: Database.Database;

  /** Opens (creating) the file; throws when it cannot be opened, so a bad path fails at startup. */
  constructor(path: string) {
    this.description = `sqlite:${path}`;
    this.db = new Database(path, { timeout: 5000 });
    this.db.pragma('journal_mode = WAL');
    this.db.exec(`CREATE TABLE IF NOT EXISTS entries (
      ns TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, expires INTEGER,
      PRIMARY KEY (ns, key))`);
  }

  namespace<V>(ns: string, limits: StoreLimits): KeyValueStore<V> {
    const db = this.db;
    const select = db.prepare<[string, string, number], { value: string }>(
      'SELECT value FROM entries WHERE ns = ? AND key = ? AND (expires IS NULL OR expires > ?)',
    );
    const sweep = db.prepare<[string, number]>('DELETE FROM entries WHERE ns = ? AND expires <= ?');
    const upsert = db.prepare<[string, string, string, number | null]>('INSERT OR REPLACE INTO entries (ns, key, value, expires) VALUES (?, ?, ?, ?)');
    const evict = db.prepare<[string, string, number]>(
      'DELETE FROM entries WHERE ns = ? AND rowid IN (SELECT rowid FROM entries WHERE ns = ? ORDER BY rowid DESC LIMIT -1 OFFSET ?)',
    );
    const remove = db.prepare<[string, string, number]>('DELETE FROM entries WHERE ns = ? AND key = ? AND (expires IS NULL OR expires > ?)');
    const write = db.transaction((key: string, value: string, now: number) => {
      sweep.run(ns, now);
      upsert.run(ns, key, value, limits.ttlSecs > 0 ? now + limits.ttlSecs * 1000 : null);
      evict.run(ns, ns, limits.maxEntries);
    });
    const guard = <T>(run: () => T): Promise<T> => {
      try {
        return Promise.resolve(run());
      } catch (err) {
        return Promise.reject(storeUnavailable(this.description, err));
      }
    };
    return {
      limits,
      get: (key) =>
        guard(() => {
          const row = select.get(ns, key, Date.now());
          return row && (JSON.parse(row.value) as V);
        }),
      set: (key, value) => guard(() => void write(key, JSON.stringify(value), Date.now())),
      delete: (key) => guard(() => remove.run(ns, key, Date.now()).changes > 0),
    };
  }

  async close(): Promise<void> {
    this.db.close();
  }
}
