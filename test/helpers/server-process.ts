// The real server as a child process (the CLI on the sources, as bin/mlxcel-server.js runs
// it on dist/), for tests and benches that must see it crash, stall or grow: started on
// 127.0.0.1 and a free port, its output kept, its RSS read from /proc.
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { waitFor } from './server-load.js';

const ROOT = join(import.meta.dirname, '../..');
const ENTRY = "import { main } from './src/cli.ts'; await main(process.argv.slice(1), process.env);";

export interface ServerProcess {
  url: string;
  child: ChildProcess;
  /** Everything it printed so far, stdout and stderr. */
  output(): string;
  /** Set once it exited: its code or signal. */
  exited(): string | undefined;
  /** Resident set size in bytes (Linux). */
  rssBytes(): number;
  stop(): Promise<void>;
}

export async function startServerProcess(args: string[], env: NodeJS.ProcessEnv = process.env): Promise<ServerProcess> {
  // llvmpipe's thread pool at the server's own default, as a user's server runs: the suite's
  // LP_NUM_THREADS (vitest.config.ts) is for the test workers' engines, and on the calling
  // thread a dispatch would hold the server's event loop.
  const { LP_NUM_THREADS: _suiteThreads, ...serverEnv } = env;
  const child = spawn(process.execPath, [...(process.env.SERVER_NODE_FLAGS ? process.env.SERVER_NODE_FLAGS.split(' ') : []), '--import', 'tsx', '--input-type=module', '-e', ENTRY, '--', '--host', '127.0.0.1', '--port', '0', ...args], {
    cwd: ROOT,
    env: serverEnv,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  let exit: string | undefined;
  child.stdout!.setEncoding('utf8').on('data', (text: string) => (output += text));
  child.stderr!.setEncoding('utf8').on('data', (text: string) => (output += text));
  const done = new Promise<void>((resolve) =>
    child.once('exit', (code, signal) => {
      exit = signal ?? String(code);
      resolve();
    }),
  );
  const stop = async () => {
    if (exit === undefined) child.kill('SIGTERM');
    const killer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    await done;
    clearTimeout(killer);
  };
  try {
    await waitFor(() => /loaded in/.test(output) || exit !== undefined, 120_000, 'the server loaded');
  } catch (err) {
    await stop();
    throw new Error(`the server did not start: ${String(err)}\n${output}`);
  }
  const url = /listening on (http:\S+)/.exec(output)?.[1];
  if (exit !== undefined || !url) throw new Error(`the server exited while starting:\n${output}`);
  return {
    url,
    child,
    output: () => output,
    exited: () => exit,
    rssBytes: () => {
      const status = readFileSync(`/proc/${child.pid}/status`, 'utf8');
      return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) * 1024;
    },
    stop,
  };
}
