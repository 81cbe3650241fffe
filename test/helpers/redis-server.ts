// A throwaway redis-server (Debian's package) on a free local port, its data in an
// append-only file of a temp directory (synced on every write), for the store backend tests:
// stopped and started again on the same port, it comes back with what it held.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './free-port.js';
import { waitFor } from './server-load.js';

export interface RedisServer {
  url: string;
  port: number;
  start(): Promise<void>;
  /** Kills it (SIGKILL: nothing more is written); start() brings it back. */
  stop(): Promise<void>;
  /** Stops it and removes its data. */
  remove(): Promise<void>;
}

export async function startRedis(): Promise<RedisServer> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'redis-'));
  let child: ChildProcess | undefined;
  const redis: RedisServer = {
    url: `redis://127.0.0.1:${port}`,
    port,
    async start() {
      child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'yes', '--appendfsync', 'always'], { stdio: 'ignore' });
      await waitFor(() => accepts(port), 10_000, `redis-server on port ${port}`);
    },
    async stop() {
      const c = child;
      child = undefined;
      if (!c || c.exitCode !== null) return;
      const exited = new Promise((resolve) => c.once('exit', resolve));
      c.kill('SIGKILL');
      await exited;
    },
    async remove() {
      await redis.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  await redis.start();
  return redis;
}

/** Whether something listens on the local port. */
export function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ port, host: '127.0.0.1' });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}
