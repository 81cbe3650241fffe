// Starts listening right away, before the model has loaded, so /health can report progress.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Engine } from '../engine/engine.js';
import { createApp, createAppState, createMetricsApp, type AppOptions } from './app.js';

export interface ServerOptions extends AppOptions {
  host: string;
  /** 0 picks a free port; `url` tells which. */
  port: number;
  /** Also serve GET /metrics on this port of the same host (0: any free one). */
  metricsPort?: number;
}

export interface RunningServer {
  server: Server;
  url: string;
  /** The --metrics-port listener's address, when there is one. */
  metricsUrl?: string;
  /** Stops listening and drops open connections; the engine is the caller's to close. */
  close(): Promise<void>;
  /** Refuses new work and waits up to `graceMs` for the admitted requests (../lifecycle.ts); whether all finished in time. */
  drain(graceMs: number): Promise<boolean>;
}

export async function startServer(engine: Engine | Promise<Engine>, options: ServerOptions): Promise<RunningServer> {
  const state = createAppState(engine, options);
  const server = createServer(createApp(engine, options, state));
  const url = await listen(server, options.port, options.host);
  let metricsServer: Server | undefined;
  let metricsUrl: string | undefined;
  if (options.metricsPort !== undefined) {
    metricsServer = createServer(createMetricsApp(state, options));
    try {
      metricsUrl = await listen(metricsServer, options.metricsPort, options.host);
    } catch (err) {
      await closeServer(server);
      throw err;
    }
  }
  return {
    server,
    url,
    metricsUrl,
    close: async () => {
      await Promise.all([closeServer(server), metricsServer && closeServer(metricsServer)]);
    },
    drain: (graceMs) => state.lifecycle.drain(graceMs),
  };
}

async function listen(server: Server, port: number, hostname: string): Promise<string> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, hostname, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { address, family, port: bound } = server.address() as AddressInfo;
  const host = family === 'IPv6' ? `[${address}]` : address;
  return `http://${host}:${bound}`;
}

function closeServer(server: Server): Promise<void> {
  return new Promise<void>((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections();
  });
}
