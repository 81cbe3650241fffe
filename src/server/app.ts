// The HTTP application: middleware order matters. Every request is named first (the id a
// fault is logged under); CORS headers and the OPTIONS preflight answer come next, ahead
// of auth, as browsers send no key on a preflight; health, liveness and readiness come
// before auth (they must stay open), then the lifecycle gate (refusing work while
// draining), auth before body parsing (no parse errors for unauthenticated callers), and the
// 404 and error envelopes last.
import express, { Router, type Express, type RequestHandler } from 'express';
import type { Embedder } from '../engine/embedder.js';
import type { Engine } from '../engine/engine.js';
import type { Speaker } from '../engine/speaker.js';
import type { Transcriber } from '../engine/transcriber.js';
import { audioRoutes } from './openai/audio.js';
import { speechRoutes } from './openai/speech.js';
import { anthropicErrorScope, anthropicRoutes, ANTHROPIC_PATHS } from './anthropic/routes.js';
import { apiKeyAuth } from './auth.js';
import { cacheRoutes } from './native/cache.js';
import { cors } from './cors.js';
import { EmbedderState } from './embedder-state.js';
import type { Services } from './services.js';
import { GenerationDisabledError } from '../engine/embedding-only-engine.js';
import { embeddingRoutes, embeddingUnavailableRoutes } from './openai/embeddings.js';
import { rerankRoutes, rerankUnavailableRoutes } from './native/rerank.js';
import { verifyBodyDepth } from './body-depth.js';
import { ApiError, assignRequestId, errorHandler, sendError } from './errors.js';
import { healthRoutes, type LoadingProgress } from './native/health.js';
import { jsonBodyLimit, mediaPolicy, type MediaPolicy } from './media/policy.js';
import { metricsRoutes, ServerMetrics } from './metrics.js';
import { ModelState } from './model-state.js';
import { modelRoutes } from './openai/models.js';
import { keepRawBody, nativeRoutes, tokenizerRoutes } from './native/routes.js';
import { openAIChatRoutes } from './openai/chat.js';
import { openAICompletionRoutes } from './openai/completions.js';
import { propsRoutes } from './native/props.js';
import { DEFAULT_RESPONSES_OPTIONS, responsesRoutes } from './responses/routes.js';
import { samplingDefaults, type SamplingDefaults } from './sampling-defaults.js';
import { slotActionRoutes, slotRoutes } from './native/slots.js';
import { MemoryBackend, type StoreBackend } from './stores/store.js';
import { Lifecycle, lifecycleRoutes } from './lifecycle.js';
import { unavailableRoutes } from './unavailable.js';

export interface AppOptions {
  /** When set, every route but GET /health and GET / needs this key. */
  apiKey?: string;
  /** --cors-origins: the origins CORS headers are sent to; undefined: any. */
  corsOrigins?: string[];
  /** Defaults for what a request leaves out (the CLI's sampling flags); a field left
   *  undefined keeps ./sampling-defaults.ts's value. */
  sampling?: Partial<SamplingDefaults>;
  /** GET /slots; on unless false (--no-slots): then 501. */
  slots?: boolean;
  /** --slot-save-path: the directory of POST /slots/:id?action=save|restore files; undefined: 501. */
  slotSavePath?: string;
  /** GET /metrics on this app (--metrics); --metrics-port serves it on its own listener. */
  metrics?: boolean;
  /** --store: where stored responses and conversations live; default: this process's memory. */
  store?: StoreBackend;
  /** Responses API stores (--responses-store-*, --conversation-store-*); 0 entries disables one. */
  responsesStoreMaxEntries?: number;
  responsesStoreTtlSecs?: number;
  conversationStoreMaxEntries?: number;
  conversationStoreTtlSecs?: number;
  /** --chat-template-kwargs: kwargs every chat request starts from (request keys win). */
  chatTemplateKwargs?: Record<string, unknown>;
  /** --spm-infill: /infill lays the suffix before the prefix. */
  spmInfill?: boolean;
  /** While the model loads, how far it has come (GET /health shows it). */
  loadingProgress?: () => LoadingProgress | undefined;
  /** --chat-template(-file): a Jinja template used instead of the checkpoint's (all of its variants). */
  chatTemplate?: string;
  /** --alias: every id of the model (the first is the engine's id), listed by /v1/models. */
  aliases?: string[];
  /** --tags: listed by /v1/models. */
  tags?: string[];
  /** Native-shaped `__verbose` on OpenAI completion and chat bodies (llama-server's -v). */
  verbose?: boolean;
  /** --embeddings (the -m model) or --embedding-model: the model the embedding routes serve. */
  embedder?: Embedder | Promise<Embedder>;
  /** --reranking (the -m model) or --reranker-model: the model the rerank routes serve. */
  reranker?: Embedder | Promise<Embedder>;
  /** -m or --stt-model a Whisper checkpoint: the model the transcription and translation routes serve (a promise settling on none: not a Whisper -m). */
  transcriber?: Transcriber | Promise<Transcriber | undefined>;
  /** -m or --tts-model a Kokoro checkpoint: the model the speech route serves (a promise settling on none: not a Kokoro -m). */
  speaker?: Speaker | Promise<Speaker | undefined>;
  /**
   * --embeddings / --reranking, AUDIO_ONLY or SPEECH_ONLY (-m is a Whisper or Kokoro checkpoint): the -m model
   * serves that job only; generation routes answer 501 naming it. A function is asked per
   * request (the -m model's kind is known once it is resolved).
   */
  generationDisabledBy?: string | (() => string | undefined);
  /** The media flags that were set: they bound the JSON body (room for --max-images data URIs). */
  media?: Partial<MediaPolicy>;
  /** --embd-normalize: embd_normalize for embedding requests that set none; default 2 (euclidean). */
  embdNormalize?: number;
}

/** What the routes of one server share, a separate metrics listener included. */
export interface AppState {
  models: ModelState;
  defaults: SamplingDefaults;
  metrics: ServerMetrics;
  services: Services;
  store: StoreBackend;
  lifecycle: Lifecycle;
}

export function createAppState(engine: Engine | Promise<Engine>, options: AppOptions = {}): AppState {
  const models = new ModelState(engine, options.chatTemplate, mediaPolicy(options.media));
  const stats = () => {
    try {
      return models.current?.engine.stats();
    } catch {
      // The model failed to load: nothing to report, and a scrape should still answer.
      return undefined;
    }
  };
  const embedders = new EmbedderState(
    options.embedder,
    'This server does not support embeddings. Start it with `--embeddings` (the -m model serves embeddings) or `--embedding-model DIR|repo` (a second model beside the chat model)',
  );
  const rerankers = new EmbedderState(
    options.reranker,
    'This server does not support reranking. Start it with `--reranking` (the -m model reranks) or `--reranker-model DIR|repo` (a second model beside the chat model)',
  );
  const transcribers = new EmbedderState(
    options.transcriber,
    'This server does not serve speech to text. Start it with `-m` a Whisper checkpoint (an audio-only server) or `--stt-model DIR|repo` (a Whisper model beside the chat model)',
  );
  const speakers = new EmbedderState(
    options.speaker,
    'This server does not serve text to speech. Start it with `-m` a Kokoro checkpoint (an audio-only server) or `--tts-model DIR|repo` (a Kokoro model beside the chat model)',
  );
  const disabledBy = generationDisabledBy(options);
  const services: Services = { get completion() { return disabledBy() === undefined; }, embedders, rerankers, transcribers, speakers };
  return {
    models,
    defaults: samplingDefaults(options.sampling),
    metrics: new ServerMetrics(stats),
    services,
    store: options.store ?? new MemoryBackend(),
    lifecycle: new Lifecycle(),
  };
}

/** `engine` may still be loading: routes answer 503 until it resolves. */
export function createApp(
  engine: Engine | Promise<Engine>,
  options: AppOptions = {},
  state: AppState = createAppState(engine, options),
): Express {
  const { models, defaults, metrics, services, store, lifecycle } = state;
  const app = newApp(options);
  app.use(healthRoutes(models, options.loadingProgress), lifecycleRoutes(models, lifecycle), lifecycle.admit);
  // Before auth, so that its 401s on these paths are in Anthropic's envelope too.
  app.use(ANTHROPIC_PATHS, anthropicErrorScope);
  if (options.apiKey) app.use(apiKeyAuth(options.apiKey));
  // Bodiless GET routes, ahead of the body parser.
  const slots = { enabled: options.slots, savePath: options.slotSavePath };
  app.use(slotRoutes(models, slots));
  if (options.metrics) app.use(metricsRoutes(metrics));
  app.use(propsRoutes(models, defaults, services));
  // Bodiless too: POST /v1/cache/reset reads nothing.
  app.use(cacheRoutes(models));
  // 501s for the documented routes this server cannot serve; they read no body either.
  app.use(unavailableRoutes(services), embeddingUnavailableRoutes(services.embedders), rerankUnavailableRoutes(services.rerankers));
  const generation = [
    openAIChatRoutes(models, defaults, metrics, { chatTemplateKwargs: options.chatTemplateKwargs, verbose: options.verbose }),
    openAICompletionRoutes(models, defaults, metrics, { verbose: options.verbose }),
    nativeRoutes(models, defaults, metrics, { chatTemplateKwargs: options.chatTemplateKwargs, spmInfill: options.spmInfill }),
    responsesRoutes(models, defaults, metrics, responsesOptions(options), store),
    anthropicRoutes(models, defaults, metrics, { chatTemplateKwargs: options.chatTemplateKwargs }),
  ];
  // --embeddings / --reranking / an audio-only server: every route of the generation
  // routers, each alias included, answers 501 naming what disabled it.
  const disabledBy = generationDisabledBy(options);
  app.use(sameRoutes(generation, (_req, _res, next) => {
    const by = disabledBy();
    if (by) throw new GenerationDisabledError(by);
    next();
  }));
  // Multipart, read by the route itself: ahead of the JSON parser.
  app.use(audioRoutes(services.transcribers));
  // Any content type is read as JSON, as llama-server does: curl -d sends form encoding.
  const limit = jsonBodyLimit(mediaPolicy(options.media));
  const json = (verify: typeof verifyBodyDepth) => express.json({ limit, type: () => true, verify });
  app.post('/detokenize', json((req, res, body) => {
    verifyBodyDepth(req, res, body);
    keepRawBody(req, body);
  }));
  app.use(json(verifyBodyDepth));
  app.use(
    ...generation,
    tokenizerRoutes(models),
    modelRoutes(models, services, { aliases: options.aliases, tags: options.tags }),
    embeddingRoutes(services.embedders, options.embdNormalize),
    rerankRoutes(services.rerankers),
    speechRoutes(services.speakers),
    slotActionRoutes(models, slots),
  );
  return finish(app);
}

/** The --metrics-port listener's app: GET /metrics alone, behind the same API key and CORS. */
export function createMetricsApp(state: AppState, options: Pick<AppOptions, 'apiKey' | 'corsOrigins'> = {}): Express {
  const app = newApp(options);
  if (options.apiKey) app.use(apiKeyAuth(options.apiKey));
  app.use(metricsRoutes(state.metrics));
  return finish(app);
}

function generationDisabledBy(options: AppOptions): () => string | undefined {
  const by = options.generationDisabledBy;
  return typeof by === 'function' ? by : () => by;
}

function responsesOptions(o: AppOptions) {
  const d = DEFAULT_RESPONSES_OPTIONS;
  return {
    chatTemplateKwargs: o.chatTemplateKwargs,
    responses: { maxEntries: o.responsesStoreMaxEntries ?? d.responses.maxEntries, ttlSecs: o.responsesStoreTtlSecs ?? d.responses.ttlSecs },
    conversations: {
      maxEntries: o.conversationStoreMaxEntries ?? d.conversations.maxEntries,
      ttlSecs: o.conversationStoreTtlSecs ?? d.conversations.ttlSecs,
    },
  };
}

/** A router answering every route of `routers` (each method and path) with `handler`. */
function sameRoutes(routers: Router[], handler: RequestHandler): Router {
  const out = Router();
  for (const { route } of routers.flatMap((r) => r.stack)) {
    if (!route) continue;
    // The router's own fields, beyond what @types/express declares.
    const { path, methods } = route as unknown as { path: string | string[]; methods: Record<string, true> };
    for (const method of Object.keys(methods)) out[method as 'get' | 'post' | 'delete'](path, handler);
  }
  return out;
}

function newApp(options: Pick<AppOptions, 'corsOrigins'>): Express {
  const app = express();
  app.disable('x-powered-by');
  app.use(assignRequestId, cors(options.corsOrigins));
  return app;
}

function finish(app: Express): Express {
  app.use((req, res) => {
    sendError(res, new ApiError(404, 'not_found_error', `no route for ${req.method} ${req.path}`));
  });
  app.use(errorHandler);
  return app;
}
