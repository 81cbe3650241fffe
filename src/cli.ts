// The mlxcel-server command: parse options, listen at once, then fetch the model from the
// Hub if it names one, and load it (the server answers 503 "loading model" meanwhile).
import { readFileSync, realpathSync, statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Template } from '@huggingface/jinja';
import { CliError, DEFAULT_LOG_VERBOSITY, HELP_TEXT, LOG_LEVELS, parseCli } from './cli-options.js';
import type { Engine } from './engine/engine.js';
import { loadEmbedder, type Embedder } from './engine/embedder.js';
import { loadEngine } from './engine/load.js';
import { HubError } from './hub/errors.js';
import type { DownloadProgress } from './hub/progress.js';
import type { ModelArg } from './hub/resolve-model.js';
import { resolveModel } from './hub/resolve-model.js';
import { hubSettings } from './hub/settings.js';
import type { SnapshotOptions } from './hub/snapshot.js';
import { LoadDisplay } from './load-progress.js';
import { UnsupportedModelKindError } from './models/model-kinds.js';
import { AUDIO_ONLY, EmbeddingOnlyEngine, SPEECH_ONLY } from './engine/embedding-only-engine.js';
import { loadSpeaker, type Speaker } from './engine/speaker.js';
import { isKokoroCheckpoint } from './models/kokoro.js';
import { AUDIO_QUEUE_DEFAULTS } from './engine/job-queue.js';
import { isWhisperCheckpoint, loadTranscriber, type Transcriber } from './engine/transcriber.js';
import { DEFAULT_SHUTDOWN_GRACE_SECS } from './server/lifecycle.js';
import { startServer } from './server/server.js';
import { openStoreBackend, type StoreBackend } from './server/stores/store.js';

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
  if (command.kind === 'unsupported') {
    console.error(`mlxcel-server: ${command.message}`);
    process.exitCode = 1;
    return;
  }

  const { options } = command;
  if (options.slotSavePath !== undefined && !isDirectory(options.slotSavePath)) {
    console.error(`mlxcel-server: --slot-save-path ${options.slotSavePath} is not a directory`);
    process.exitCode = 2;
    return;
  }
  const mediaPath = options.media?.mediaPath;
  if (mediaPath !== undefined && !isDirectory(mediaPath)) {
    console.error(`mlxcel-server: --media-path ${mediaPath} is not a directory`);
    process.exitCode = 2;
    return;
  }
  // Resolved once: a listed directory created later is refused until a restart.
  const videoDirs = options.media?.videoDirs?.filter((dir) => {
    if (isDirectory(dir)) return true;
    console.error(`mlxcel-server: MLXCEL_VIDEO_DIR_ALLOWLIST: ${dir} is not a directory; local video paths under it are refused`);
    return false;
  }).map((dir) => realpathSync(dir));
  let chatTemplate = options.chatTemplate;
  if (options.chatTemplateFile !== undefined) {
    try {
      chatTemplate = readFileSync(options.chatTemplateFile, 'utf8');
    } catch (err) {
      console.error(`mlxcel-server: --chat-template-file: ${(err as Error).message}`);
      process.exitCode = 2;
      return;
    }
  }
  if (chatTemplate !== undefined) {
    try {
      new Template(chatTemplate);
    } catch (err) {
      console.error(`mlxcel-server: the chat template is not valid Jinja: ${(err as Error).message}`);
      process.exitCode = 2;
      return;
    }
  }
  let store: StoreBackend | undefined;
  try {
    store = options.storeSpec && (await openStoreBackend(options.storeSpec));
  } catch (err) {
    console.error(`mlxcel-server: --store: ${(err as Error).message}`);
    process.exitCode = 2;
    return;
  }
  const verbosity = options.logVerbosity ?? DEFAULT_LOG_VERBOSITY;
  // Progress goes where the startup facts go; a bar is taken off its line for each fact.
  const out = verbosity >= LOG_LEVELS.info ? process.stdout : { write: () => true };
  let download: DownloadProgress | undefined;
  const load = new LoadDisplay(out, 'mlxcel-server: ');
  const clearBars = () => {
    download?.clear();
    load.clear();
  };
  // One line per startup fact.
  const info = (line: string) => {
    clearBars();
    if (verbosity >= LOG_LEVELS.info) console.log(`mlxcel-server: ${line}`);
  };
  // Listen first: a download takes minutes and opening the GPU blocks the event loop for a
  // while, and clients should meanwhile get 503 "loading model" rather than a refused connection.
  let startLoading!: (engine: Promise<Engine>) => void;
  const loading = new Promise<Engine>((resolve) => (startLoading = resolve));
  // --embeddings / --reranking: the -m model is an embedder (or reranker), and the engine its
  // stand-in; --embedding-model / --reranker-model: a second model beside the chat model.
  const embedder = deferred<Embedder>();
  const reranker = deferred<Embedder>();
  const wantsEmbedder = options.embeddings === true || options.embeddingModel !== undefined;
  const wantsReranker = options.reranking === true || options.rerankerModel !== undefined;
  const onlyJob = options.embeddings ? '--embeddings' : options.reranking ? '--reranking' : undefined;
  // -m a Whisper checkpoint (known once it is resolved) makes an audio-only server; --stt-model
  // serves one beside the chat model.
  const transcriber = deferred<Transcriber | undefined>();
  // A local -m directory's kind is known now: a text model's server never lists speech to text, not even while loading.
  const local = options.model.kind === 'path-or-repo' && isDirectory(options.model.text) ? options.model.text : undefined;
  const mayTranscribe = options.sttModel !== undefined || local === undefined || isWhisperCheckpoint(local);
  // Likewise -m a Kokoro checkpoint, and --tts-model.
  const speaker = deferred<Speaker | undefined>();
  const maySpeak = options.ttsModel !== undefined || local === undefined || isKokoroCheckpoint(local);
  /** AUDIO_ONLY or SPEECH_ONLY once -m is known to be a Whisper or Kokoro checkpoint. */
  let audioOnly: string | undefined;
  const server = await startServer(loading, {
    embedder: wantsEmbedder ? embedder.promise : undefined,
    reranker: wantsReranker ? reranker.promise : undefined,
    transcriber: mayTranscribe ? transcriber.promise : undefined,
    speaker: maySpeak ? speaker.promise : undefined,
    generationDisabledBy: () => audioOnly ?? onlyJob,
    ...options,
    store,
    loadingProgress: () => download?.snapshot() ?? load.snapshot(),
    aliases: options.alias,
    chatTemplate,
    media: videoDirs ? { ...options.media, videoDirs } : options.media,
    // llama-server's rule: responses carry __verbose above the debug level (-v).
    verbose: verbosity > LOG_LEVELS.debug,
  });
  info(`listening on ${server.url}`);
  if (server.metricsUrl) info(`metrics on ${server.metricsUrl}/metrics`);
  const loadStart = performance.now();
  const hub = hubSettings(env, options.hfToken);
  const hubOutput: SnapshotOptions = {
    out,
    prefix: 'mlxcel-server: ',
    log: info,
    warn: (line) => {
      clearBars();
      console.error(`mlxcel-server: ${line}`);
    },
    onProgress: (progress) => (download = progress),
  };
  const model = resolveModel(options.model, hub, hubOutput);
  // The draft model resolves after the model, through the same hub settings and display.
  const draft = model.then(async () => options.draftModel && (await resolveModel(options.draftModel, hub, hubOutput, '--spec-draft-model')).dir);
  const loadSide = (dir: string, id: string | undefined, rank: boolean) => loadEmbedder({
    modelDir: dir,
    alias: id,
    batchSize: options.batchSize,
    maxQueue: options.maxQueue,
    pooling: rank ? 'rank' : options.pooling,
    backend: options.backend,
    log: info,
    quietDawn: verbosity < LOG_LEVELS.trace,
  });
  const second = (arg: ModelArg | undefined, into: Deferred<Embedder>, rank: boolean) => {
    if (!arg) return;
    const resolved = resolveModel(arg, hub, hubOutput, rank ? '--reranker-model' : '--embedding-model');
    into.resolve(resolved.then(({ dir, id }) => loadSide(dir, id, rank)));
  };
  const audioOptions = {
    maxQueue: options.audioQueueDepth ?? AUDIO_QUEUE_DEFAULTS.maxQueue,
    timeoutMs: (options.audioRequestTimeoutSecs ?? AUDIO_QUEUE_DEFAULTS.timeoutSecs) * 1000,
    backend: options.backend,
    log: info,
    quietDawn: verbosity < LOG_LEVELS.trace,
  };
  /**
   * An audio worker: the model of `flag` beside the chat model, or -m itself when it is a
   * checkpoint of the kind (not with --embeddings / --reranking). Resolves `into`; the
   * promise says whether -m is one (the server is then audio-only).
   */
  const audioWorker = <T>(arg: ModelArg | undefined, flag: string, kind: string, serves: string, isKind: (dir: string) => boolean, load: (dir: string, id: string | undefined) => Promise<T>, into: Deferred<T | undefined>) => {
    const isIt = model.then(({ dir }) => isKind(dir));
    into.resolve(arg
      ? resolveModel(arg, hub, hubOutput, flag).then(({ dir, id }) => load(dir, id))
      : Promise.all([model, isIt]).then(([{ dir, id }, yes]) => (yes && !onlyJob ? load(dir, options.alias?.[0] ?? id) : undefined)));
    return isIt.then((yes) => {
      if (yes && arg) throw new UnsupportedModelKindError(`-m is a ${kind} checkpoint and ${flag} names another: give one of them (-m alone serves ${serves} only; ${flag} serves it beside a chat model)`);
      return yes && !onlyJob;
    });
  };
  const whisperAlone = audioWorker(options.sttModel, '--stt-model', 'Whisper', 'speech to text', isWhisperCheckpoint, (dir, id) => loadTranscriber({ modelDir: dir, alias: id, ...audioOptions }), transcriber);
  const kokoroAlone = audioWorker(options.ttsModel, '--tts-model', 'Kokoro', 'text to speech', isKokoroCheckpoint, (dir, id) => loadSpeaker({ modelDir: dir, alias: id, ...audioOptions }), speaker);
  if (onlyJob) {
    const rank = onlyJob === '--reranking';
    const only = model.then(({ dir, id }) => loadSide(dir, options.alias?.[0] ?? id, rank));
    (rank ? reranker : embedder).resolve(only);
    second(rank ? options.embeddingModel : options.rerankerModel, rank ? embedder : reranker, !rank);
    startLoading(only.then((e) => new EmbeddingOnlyEngine(e, onlyJob, e.adapterDescription)));
  } else {
    second(options.embeddingModel, embedder, false);
    second(options.rerankerModel, reranker, true);
    startLoading(Promise.all([model, draft, whisperAlone, kokoroAlone]).then(async ([{ dir, id }, draftDir, alone, speechAlone]) => {
    if (alone) {
      const t = (await transcriber.promise)!;
      audioOnly = AUDIO_ONLY;
      return new EmbeddingOnlyEngine(t, AUDIO_ONLY, t.adapterDescription);
    }
    if (speechAlone) {
      const s = (await speaker.promise)!;
      audioOnly = SPEECH_ONLY;
      return new EmbeddingOnlyEngine(s, SPEECH_ONLY, s.adapterDescription);
    }
    return loadEngine({
      modelDir: dir,
      alias: options.alias?.[0] ?? id,
      contextSize: options.ctxSize,
      parallel: options.parallel,
      kvUnified: options.kvUnified,
      swaFull: options.swaFull,
      cacheTypeK: options.cacheTypeK,
      cacheTypeV: options.cacheTypeV,
      batchSize: options.batchSize,
      imageTokens: options.imageTokens,
      maxQueue: options.maxQueue,
      backend: options.backend,
      cachePrompt: options.cachePrompt,
      cacheCapacityBytes: options.cacheCapacityBytes,
      requestMemoryBudget: options.requestMemoryBudget,
      cacheMaxEntries: options.cacheMaxEntries,
      cacheTtlSecs: options.cacheTtlSecs,
      warmup: options.warmup,
      ...(options.speculative ? { speculative: { ...options.speculative, ...(draftDir ? { draftModel: draftDir } : {}) } } : {}),
      sleepIdleSeconds: options.sleepIdleSeconds,
      log: info,
      quietDawn: verbosity < LOG_LEVELS.trace,
      onLoadProgress: (progress) => load.update(progress),
    });
    }));
  }

  let engine: Engine;
  const sides: Array<Embedder | Transcriber | Speaker> = [];
  try {
    engine = await loading;
    if (wantsEmbedder) sides.push(await embedder.promise);
    if (wantsReranker) sides.push(await reranker.promise);
    const stt = await transcriber.promise;
    if (stt && !audioOnly) sides.push(stt);
    const tts = await speaker.promise;
    if (tts && !audioOnly) sides.push(tts);
  } catch (err) {
    clearBars();
    if (err instanceof HubError || err instanceof UnsupportedModelKindError) console.error(`mlxcel-server: ${err.message}`);
    else console.error(`mlxcel-server: could not load the model from ${(await model.catch(() => undefined))?.dir ?? 'its directory'}:`, err);
    await server.close();
    await store?.close();
    process.exitCode = 1;
    return;
  }
  info(`loaded in ${((performance.now() - loadStart) / 1000).toFixed(1)} s`);

  // The first SIGTERM or SIGINT drains (new work refused, admitted requests given the grace
  // period), then exits 0; a second one exits at once.
  const graceSecs = options.shutdownGraceSecs ?? DEFAULT_SHUTDOWN_GRACE_SECS;
  let stopping = false;
  const shutdown = async (signal: NodeJS.Signals) => {
    if (stopping) {
      console.error(`mlxcel-server: ${signal} again: exiting without waiting`);
      process.exit(1);
    }
    stopping = true;
    info(`${signal}: draining, up to ${graceSecs} s for the requests in flight`);
    const finished = await server.drain(graceSecs * 1000);
    if (!finished) console.error('mlxcel-server: the grace period ran out; the requests still running ended with an error');
    await server.close();
    await engine.close();
    // The engine of --embeddings / --reranking / an audio-only server closes its own model.
    for (const side of new Set(sides)) if (!onlyJob || side.info.id !== engine.info.id) await side.close();
    await store?.close();
    process.exit(0);
  };
  process.on('SIGINT', shutdown);
  process.on('SIGTERM', shutdown);
}

interface Deferred<T> {
  promise: Promise<T>;
  resolve: (value: Promise<T>) => void;
}

/** A promise settled later with another one's outcome. */
function deferred<T>(): Deferred<T> {
  let resolve!: (value: Promise<T>) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

function isDirectory(path: string): boolean {
  return statSync(path, { throwIfNoEntry: false })?.isDirectory() ?? false;
}
