// The mlxcel-server command: parse options, listen at once, then load the model (the
// server answers 503 "loading model" meanwhile).
import { fileURLToPath } from 'node:url';
import { CliError, HELP_TEXT, parseCli } from './cli-options.js';
import type { Engine } from './engine/engine.js';
import { loadEngine } from './engine/load.js';
import { startServer } from './server/server.js';

/** The model shipped in the package, found from dist/ or src/ alike. */
const BUNDLED_MODEL_DIR = fileURLToPath(new URL('../models/stories260k', import.meta.url));

export async function main(argv: string[], env: NodeJS.ProcessEnv): Promise<void> {
  let command;
  try {
    command = parseCli(argv, env, BUNDLED_MODEL_DIR);
  } catch (err) {
    if (!(err instanceof CliError)) throw err;
    console.error(`mlxcel-server: ${err.message}\nRun mlxcel-server --help for the options.`);
    process.exitCode = 2;
    return;
  }
  if (command.kind === 'help') {
    process.stdout.write(HELP_TEXT);
    return;
  }

  const { options } = command;
  // Listen first: opening the GPU blocks the event loop for a while, and clients
  // should meanwhile get 503 "loading model" rather than a refused connection.
  let startLoading!: (engine: Promise<Engine>) => void;
  const loading = new Promise<Engine>((resolve) => (startLoading = resolve));
  const server = await startServer(loading, options);
  console.log(`mlxcel-server: listening on ${server.url}`);
  if (server.metricsUrl) console.log(`mlxcel-server: metrics on ${server.metricsUrl}/metrics`);
  startLoading(
    loadEngine({
      modelDir: options.modelDir,
      alias: options.alias,
      contextSize: options.ctxSize,
      parallel: options.parallel,
      batchSize: options.batchSize,
      maxQueue: options.maxQueue,
      backend: options.backend,
      cachePrompt: options.cachePrompt,
      cacheCapacityBytes: options.cacheCapacityBytes,
      cacheMaxEntries: options.cacheMaxEntries,
      cacheTtlSecs: options.cacheTtlSecs,
      warmup: options.warmup,
    }),
  );

  let engine: Engine;
  try {
    engine = await loading;
  } catch (err) {
    console.error(`mlxcel-server: could not load the model from ${options.modelDir}:`, err);
    await server.close();
    process.exitCode = 1;
    return;
  }
  console.log(`mlxcel-server: adapter ${engine.adapterDescription}`);
  console.log(`mlxcel-server: model ${engine.info.id} (${options.modelDir}), context ${engine.info.contextSize} tokens`);

  const shutdown = async () => {
    await server.close();
    await engine.close();
    process.exit(0);
  };
  process.once('SIGINT', shutdown);
  process.once('SIGTERM', shutdown);
}
