// Starts listening right away, before the model has loaded, so /health can report progress.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Engine } from '../engine/engine.js';
import { createApp, type AppOptions } from './app.js';

export interface ServerOptions extends AppOptions {
  host: string;
  /** 0 picks a free port; `url` tells which. */
  port: number;
}

export interface RunningServer {
  server: Server;
  url: string;
  /** Stops listening and drops open connections; the engine is the caller's to close. */
  close(): Promise<void>;
}

export async function startServer(engine: Engine | Promise<Engine>, options: ServerOptions): Promise<RunningServer> {
  const server = createServer(createApp(engine, options));
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { address, family, port } = server.address() as AddressInfo;
  const host = family === 'IPv6' ? `[${address}]` : address;
  return {
    server,
    url: `http://${host}:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
