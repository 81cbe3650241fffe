// Command-line options in llama-server's spelling, each also settable through its
// environment variable (the flag wins when both are given). Pure, so it is unit-tested.
import { parseArgs } from 'node:util';
import { ENGINE_DEFAULTS } from './engine/engine.js';
import { parseByteSize } from './engine/memory-budget.js';
import { SPECULATIVE_DEFAULTS, type SpeculativeOptions } from './engine/speculative.js';
import { AUDIO_QUEUE_DEFAULTS } from './engine/job-queue.js';
import { parseRepoRef } from './hub/repo-ref.js';
import type { ModelArg } from './hub/resolve-model.js';
import { IMAGE_MODELS_UNSUPPORTED, SERVED_KINDS } from './models/model-kinds.js';
import type { Backend } from './runtime/gpu.js';
import { KV_TYPES, type KvType } from './runtime/tensors.js';
import { POOLINGS, type Pooling } from './runtime/ops/pooling.js';
import { DEFAULT_RESPONSES_OPTIONS } from './server/responses/routes.js';
import { LOOP_POLICY_HELP, parseLoopPolicy } from './server/loop-policy.js';
import { DEFAULT_MEDIA_POLICY, type MediaPolicy } from './server/media/policy.js';
import { DEFAULT_VIDEO_FPS } from './server/media/video.js';
import { DEFAULT_SAMPLING, type SamplingDefaults } from './server/sampling-defaults.js';
import { DEFAULT_SHUTDOWN_GRACE_SECS } from './server/lifecycle.js';
import { parseStoreSpec, STORE_HELP, type StoreSpec } from './server/stores/store.js';

/** --pooling's values: the embedding poolings (rank is the rerankers', chosen by --reranking). */
const EMBEDDING_POOLINGS = POOLINGS.filter((p) => p !== 'rank');

export const BACKENDS = ['auto', 'metal', 'vulkan', 'd3d12', 'opengles', 'swiftshader'] as const satisfies readonly Backend[];

/** llama-server's log levels: a message is printed when its level is at most --log-verbosity. */
export const LOG_LEVELS = { output: 0, error: 1, warning: 2, info: 3, trace: 4, debug: 5 } as const;
/** Startup facts print; Dawn's own startup messages do not (they are trace). */
export const DEFAULT_LOG_VERBOSITY = LOG_LEVELS.info;

export interface ServeOptions {
  /** --model or -hf: resolved (and downloaded) by resolveModel once the server listens. */
  model: ModelArg;
  /** --hf-token: for gated and private repos (else HF_TOKEN, else the stored login). */
  hfToken?: string;
  host: string;
  port: number;
  /** Total KV tokens shared by the slots; undefined: the engine's default. */
  ctxSize?: number;
  parallel?: number;
  /** --kv-unified: the slots share one KV pool; undefined = off. */
  kvUnified?: boolean;
  /** --swa-full: sliding-window layers keep every position; undefined = off. */
  swaFull?: boolean;
  batchSize?: number;
  /** --image-min-tokens / --image-max-tokens: those set. */
  imageTokens?: { minTokens?: number; maxTokens?: number };
  /** --cache-type-k / --cache-type-v; undefined = the engine's default. */
  cacheTypeK?: KvType;
  cacheTypeV?: KvType;
  maxQueue?: number;
  apiKey?: string;
  /** --cors-origins: origins sent CORS headers; undefined = any ("*"). */
  corsOrigins?: string[];
  /** --alias: model ids; the first is the id in responses, all are listed in /v1/models. */
  alias?: string[];
  /** --tags: informational, listed in /v1/models. */
  tags?: string[];
  /** --chat-template: a Jinja chat template used instead of the checkpoint's. */
  chatTemplate?: string;
  /** --chat-template-file: the same, read from this file (by the caller, not here). */
  chatTemplateFile?: string;
  backend: (typeof BACKENDS)[number];
  /** GET /slots; undefined = on. */
  slots?: boolean;
  /** --slot-save-path: the directory of slot files (POST /slots/:id?action=save|restore). */
  slotSavePath?: string;
  /** GET /metrics on the main port. */
  metrics?: boolean;
  /** GET /metrics on a listener of its own, same host. */
  metricsPort?: number;
  /** Server-wide sampling defaults that were set; the rest keep DEFAULT_SAMPLING. */
  sampling?: Partial<SamplingDefaults>;
  /** Responses API stores: entries kept (0 disables) and their lifetime in seconds. */
  responsesStoreMaxEntries?: number;
  responsesStoreTtlSecs?: number;
  conversationStoreMaxEntries?: number;
  conversationStoreTtlSecs?: number;
  /** --store: where those stores live; undefined = this process's memory. */
  storeSpec?: StoreSpec;
  /** --shutdown-grace-secs: how long SIGTERM/SIGINT wait for admitted requests; undefined = DEFAULT_SHUTDOWN_GRACE_SECS. */
  shutdownGraceSecs?: number;
  /** --chat-template-kwargs: a JSON object every chat request's kwargs are merged over. */
  chatTemplateKwargs?: Record<string, unknown>;
  /** --media-path, --max-images, --max-image-payload-size, --video-max-frames, MLXCEL_ALLOW_PRIVATE_MEDIA_URLS, MLXCEL_VIDEO_DIR_ALLOWLIST: those set. */
  media?: Partial<MediaPolicy>;
  /** --spm-infill: /infill lays the suffix before the prefix. */
  spmInfill?: boolean;
  /** Prompt cache: --no-cache-prompt turns it off; undefined = the engine's defaults. */
  cachePrompt?: boolean;
  cacheCapacityBytes?: number;
  /** MLXCEL_REQUEST_MEMORY_BUDGET in bytes, when set. */
  requestMemoryBudget?: number;
  cacheMaxEntries?: number;
  cacheTtlSecs?: number;
  /** --sleep-idle-seconds: unload the model after this long without requests; undefined = never. */
  sleepIdleSeconds?: number;
  /** --no-warmup skips running every kernel once at load; undefined = on. */
  warmup?: boolean;
  /** --spec-type and the --draft flags; undefined = no speculative decoding. A draft
   *  model's speculative.draftModel is filled in from `draftModel` once that is resolved. */
  speculative?: SpeculativeOptions;
  /** --spec-draft-model: the draft model, resolved (and downloaded) by resolveModel as --model is. */
  draftModel?: ModelArg;
  /** Messages above this level (LOG_LEVELS) are not printed; --verbose: Infinity;
   *  undefined: DEFAULT_LOG_VERBOSITY. */
  logVerbosity?: number;
  /** --embeddings: the -m model serves embeddings only (generation routes answer 501). */
  embeddings?: boolean;
  /** --embedding-model: a second model serving embeddings beside the chat model. */
  embeddingModel?: ModelArg;
  /** --reranking: the -m model serves reranking only (generation routes answer 501). */
  reranking?: boolean;
  /** --reranker-model: a second model serving reranking beside the chat model. */
  rerankerModel?: ModelArg;
  /** --stt-model: a Whisper model serving speech to text beside the chat model. */
  sttModel?: ModelArg;
  /** --tts-model: a Kokoro model serving text to speech beside the chat model. */
  ttsModel?: ModelArg;
  /** --audio-queue-depth: transcription (and speech) requests that may wait before 503. */
  audioQueueDepth?: number;
  /** --audio-request-timeout-secs: a transcription (or speech) request not finished this long after it queued answers 504. */
  audioRequestTimeoutSecs?: number;
  /** --pooling: overrides the embedding model's own pooling. */
  pooling?: Pooling;
  /** --embd-normalize: embd_normalize for requests that set none; undefined: euclidean (2). */
  embdNormalize?: number;
}

/** `unsupported`: the options ask for a model kind this server cannot load yet (the message says which). */
export type CliCommand = { kind: 'help' } | { kind: 'serve'; options: ServeOptions } | { kind: 'unsupported'; message: string };

export class CliError extends Error {}

interface Flag {
  name: string;
  short?: string;
  /** Other long spellings of the flag (llama-server's older names). */
  aliases?: string[];
  /** Environment variables read when the flag is absent, first match wins. */
  env: string[];
  /** The value's placeholder in --help; absent for an on/off switch. */
  value?: string;
  /** A switch's "off" spelling; its variables then take true/false values. */
  negation?: string;
  /** A server-wide sampling default (see ./server/sampling-defaults.ts): its field and range
   *  (`above`: the minimum itself is excluded). */
  sampling?: { key: keyof SamplingDefaults; kind: 'int' | 'float'; min: number; max?: number; above?: boolean };
  help: string;
}

const sampling = (key: keyof SamplingDefaults, kind: 'int' | 'float', min: number, max?: number, above?: boolean) => ({ key, kind, min, max, above });
const D = DEFAULT_SAMPLING;
/** --spec-type's values: none, prompt lookup under its own name and llama-server's, or a draft model (--spec-draft-model). */
const SPEC_TYPES = ['none', 'prompt-lookup', 'ngram-simple', 'draft-model'] as const;

const FLAGS: Flag[] = [
  { name: 'model', short: 'm', env: ['LLAMA_ARG_MODEL'], value: 'DIR|REPO', help: 'model directory in Hugging Face layout, or a Hub repo id org/name[:revision] to download (default: the bundled stories260k)' },
  { name: 'hf-repo', short: 'hf', env: ['LLAMA_ARG_HF_REPO'], value: 'REPO', help: 'Hub repo org/name[:revision] to serve, downloaded into the Hugging Face cache (HF_HUB_CACHE, HF_HOME) unless there (default: none)' },
  // HF_TOKEN is llama-server's and huggingface_hub's name for it.
  { name: 'hf-token', env: ['HF_TOKEN'], value: 'TOKEN', help: 'Hugging Face token for gated and private repos (default: the one `hf auth login` stored)' },
  { name: 'host', env: ['LLAMA_ARG_HOST'], value: 'HOST', help: 'address to listen on (default: 127.0.0.1)' },
  { name: 'port', env: ['LLAMA_ARG_PORT'], value: 'PORT', help: 'port to listen on, 0 for any free port (default: 8080)' },
  { name: 'ctx-size', short: 'c', env: ['LLAMA_ARG_CTX_SIZE'], value: 'N', help: 'context tokens shared by all slots, 0 for the model default (default: 0)' },
  { name: 'parallel', short: 'np', env: ['LLAMA_ARG_N_PARALLEL'], value: 'N', help: `sequences decoded together (slots) (default: ${ENGINE_DEFAULTS.parallel})` },
  { name: 'kv-unified', short: 'kvu', negation: 'no-kv-unified', env: ['LLAMA_ARG_KV_UNIFIED'], help: 'one KV pool shared by the slots: a request may use the whole --ctx-size while the others leave room (default: off, each slot gets ctx-size / parallel)' },
  { name: 'swa-full', env: ['LLAMA_ARG_SWA_FULL'], help: 'sliding-window layers keep every position in the paged KV cache, as full-attention layers do (default: off, each keeps a ring of its window plus one --batch-size chunk per slot)' },
  { name: 'cache-type-k', short: 'ctk', env: ['LLAMA_ARG_CACHE_TYPE_K'], value: 'TYPE', help: `KV cache type of the keys: ${KV_TYPES.join('|')} (default: ${ENGINE_DEFAULTS.cacheTypeK})` },
  { name: 'cache-type-v', short: 'ctv', env: ['LLAMA_ARG_CACHE_TYPE_V'], value: 'TYPE', help: `KV cache type of the values: ${KV_TYPES.join('|')} (default: ${ENGINE_DEFAULTS.cacheTypeV})` },
  { name: 'batch-size', short: 'b', env: ['LLAMA_ARG_BATCH'], value: 'N', help: `tokens per forward pass, the prefill chunk (default: ${ENGINE_DEFAULTS.batchSize})` },
  { name: 'max-queue', env: ['LLAMA_ARG_MAX_QUEUE'], value: 'N', help: `requests that may wait for a slot before 503 (default: ${ENGINE_DEFAULTS.maxQueue})` },
  // LLAMA_API_KEY is llama-server's own name for this one.
  { name: 'api-key', env: ['LLAMA_ARG_API_KEY', 'LLAMA_API_KEY'], value: 'KEY', help: 'require this key in "Authorization: Bearer KEY" (default: none)' },
  { name: 'cors-origins', env: ['LLAMA_ARG_CORS_ORIGINS'], value: 'LIST', help: 'comma-separated origins whose browser calls may read responses, * for any (default: *)' },
  { name: 'alias', short: 'a', env: ['LLAMA_ARG_ALIAS'], value: 'LIST', help: 'comma-separated model ids: the first is shown in responses, all are listed in /v1/models (default: the model directory name)' },
  { name: 'tags', env: ['LLAMA_ARG_TAGS'], value: 'LIST', help: 'comma-separated model tags, listed in /v1/models (informational) (default: none)' },
  { name: 'backend', env: ['LLAMA_ARG_BACKEND'], value: 'NAME', help: `GPU backend: ${BACKENDS.join('|')} (default: auto)` },
  // Jinja only: llama-server's built-in template names (chatml, llama3...) are not known here.
  { name: 'chat-template', env: ['LLAMA_ARG_CHAT_TEMPLATE'], value: 'JINJA', help: "Jinja chat template used instead of the checkpoint's (default: the checkpoint's)" },
  { name: 'chat-template-file', env: ['LLAMA_ARG_CHAT_TEMPLATE_FILE'], value: 'PATH', help: "file holding a Jinja chat template used instead of the checkpoint's (default: none)" },
  { name: 'chat-template-kwargs', env: ['LLAMA_ARG_CHAT_TEMPLATE_KWARGS'], value: 'JSON', help: 'JSON object of chat template kwargs; request kwargs win per key (default: {})' },
  { name: 'reasoning', short: 'rea', env: ['LLAMA_ARG_REASONING'], value: 'on|off|auto', help: "thinking in chat: on or off sets the template's enable_thinking for requests that set none; auto renders templates with a thinking switch with thinking on (default: auto)" },
  // llama-server's variable names for these two take a boolean.
  { name: 'slots', negation: 'no-slots', env: ['LLAMA_ARG_ENDPOINT_SLOTS'], help: 'serve GET /slots (default: on)' },
  { name: 'slot-save-path', env: ['LLAMA_ARG_SLOT_SAVE_PATH'], value: 'DIR', help: 'directory of the slot files POST /slots/ID?action=save|restore write and read (default: none, slot actions answer 501)' },
  { name: 'metrics', env: ['LLAMA_ARG_ENDPOINT_METRICS'], help: 'serve Prometheus GET /metrics on the main port (default: off)' },
  { name: 'metrics-port', env: ['LLAMA_ARG_METRICS_PORT'], value: 'PORT', help: 'serve GET /metrics on its own listener at this port of --host (default: none)' },
  // Server-wide sampling defaults: what a request gets for a field it leaves out. A new
  // sampler knob is one line here plus its field in src/server/sampling-defaults.ts.
  // LLAMA_ARG_TEMPERATURE is current llama-server's name, LLAMA_ARG_TEMP an older one.
  { name: 'temp', env: ['LLAMA_ARG_TEMP', 'LLAMA_ARG_TEMPERATURE'], value: 'N', sampling: sampling('temperature', 'float', 0), help: `temperature, 0 = greedy (default: ${D.temperature})` },
  { name: 'top-k', env: ['LLAMA_ARG_TOP_K'], value: 'N', sampling: sampling('top_k', 'int', 0), help: `top-k sampling, 0 = off (default: ${D.top_k})` },
  { name: 'top-p', env: ['LLAMA_ARG_TOP_P'], value: 'N', sampling: sampling('top_p', 'float', 0, 1), help: `top-p sampling, 1 = off (default: ${D.top_p})` },
  { name: 'min-p', env: ['LLAMA_ARG_MIN_P'], value: 'N', sampling: sampling('min_p', 'float', 0, 1), help: `min-p sampling, 0 = off (default: ${D.min_p})` },
  { name: 'repeat-penalty', env: ['LLAMA_ARG_REPEAT_PENALTY'], value: 'N', sampling: sampling('repeat_penalty', 'float', 0, undefined, true), help: `repetition penalty, 1 = off (default: ${D.repeat_penalty})` },
  { name: 'repeat-last-n', env: ['LLAMA_ARG_REPEAT_LAST_N'], value: 'N', sampling: sampling('repeat_last_n', 'int', -1), help: `tokens the repetition/frequency/presence penalties look back, -1 = whole context, 0 = none (default: ${D.repeat_last_n})` },
  { name: 'presence-penalty', env: ['LLAMA_ARG_PRESENCE_PENALTY'], value: 'N', sampling: sampling('presence_penalty', 'float', -2, 2), help: `presence penalty, 0 = off (default: ${D.presence_penalty})` },
  { name: 'frequency-penalty', env: ['LLAMA_ARG_FREQUENCY_PENALTY'], value: 'N', sampling: sampling('frequency_penalty', 'float', -2, 2), help: `frequency penalty, 0 = off (default: ${D.frequency_penalty})` },
  { name: 'dry-multiplier', env: ['LLAMA_ARG_DRY_MULTIPLIER'], value: 'N', sampling: sampling('dry_multiplier', 'float', 0), help: `DRY multiplier, 0 = off (default: ${D.dry_multiplier})` },
  { name: 'dry-base', env: ['LLAMA_ARG_DRY_BASE'], value: 'N', sampling: sampling('dry_base', 'float', 1), help: `DRY base (default: ${D.dry_base})` },
  { name: 'dry-allowed-length', env: ['LLAMA_ARG_DRY_ALLOWED_LENGTH'], value: 'N', sampling: sampling('dry_allowed_length', 'int', 1), help: `DRY: repeats longer than this are penalised (default: ${D.dry_allowed_length})` },
  { name: 'dry-penalty-last-n', env: ['LLAMA_ARG_DRY_PENALTY_LAST_N'], value: 'N', sampling: sampling('dry_penalty_last_n', 'int', -1), help: `DRY look-back in tokens, 0 or -1 = whole context (default: ${D.dry_penalty_last_n})` },
  { name: 'xtc-probability', env: ['LLAMA_ARG_XTC_PROBABILITY'], value: 'N', sampling: sampling('xtc_probability', 'float', 0, 1), help: `XTC chance per token, 0 = off (default: ${D.xtc_probability})` },
  { name: 'xtc-threshold', env: ['LLAMA_ARG_XTC_THRESHOLD'], value: 'N', sampling: sampling('xtc_threshold', 'float', 0, 1), help: `XTC probability threshold (default: ${D.xtc_threshold})` },
  { name: 'n-predict', short: 'n', env: ['LLAMA_ARG_N_PREDICT'], value: 'N', sampling: sampling('n_predict', 'int', -1), help: 'tokens to predict when a request sets none; -1 = until the context is full (default: -1)' },
  // llama-server has --keep and no variable for it.
  { name: 'keep', env: [], value: 'N', sampling: sampling('n_keep', 'int', -1), help: `prompt tokens (after BOS) a context shift keeps, -1 = the whole prompt; a request's n_keep wins (default: ${D.n_keep})` },
  { name: 'context-shift', negation: 'no-context-shift', env: ['LLAMA_ARG_CONTEXT_SHIFT'], help: 'when a generation fills its context, drop the older half after the kept tokens and go on, instead of stopping (default: off)' },
  { name: 'seed', short: 's', env: ['LLAMA_ARG_SEED'], value: 'N', sampling: sampling('seed', 'int', -1), help: 'seed for requests that set none, -1 = random (default: -1)' },
  { name: 'responses-store-max-entries', env: ['LLAMA_ARG_RESPONSES_STORE_MAX_ENTRIES'], value: 'N', help: `stored /v1/responses responses, 0 disables storing (default: ${DEFAULT_RESPONSES_OPTIONS.responses.maxEntries})` },
  { name: 'responses-store-ttl-secs', env: ['LLAMA_ARG_RESPONSES_STORE_TTL_SECS'], value: 'N', help: `seconds a stored response is kept, 0 = no expiry (default: ${DEFAULT_RESPONSES_OPTIONS.responses.ttlSecs})` },
  { name: 'conversation-store-max-entries', env: ['LLAMA_ARG_CONVERSATION_STORE_MAX_ENTRIES'], value: 'N', help: `stored /v1/responses conversations, 0 disables them (default: ${DEFAULT_RESPONSES_OPTIONS.conversations.maxEntries})` },
  { name: 'conversation-store-ttl-secs', env: ['LLAMA_ARG_CONVERSATION_STORE_TTL_SECS'], value: 'N', help: `seconds a conversation is kept after its last use, 0 = no expiry (default: ${DEFAULT_RESPONSES_OPTIONS.conversations.ttlSecs})` },
  { name: 'store', env: ['MLXCEL_STORE'], value: 'SPEC', help: `where stored responses and conversations live: ${STORE_HELP}; sqlite survives restarts, redis is shared by replicas (default: memory)` },
  { name: 'shutdown-grace-secs', env: ['MLXCEL_SHUTDOWN_GRACE_SECS'], value: 'N', help: `on SIGTERM or SIGINT, refuse new work and give admitted requests this long to finish before their streams end with an error; a second signal exits at once (default: ${DEFAULT_SHUTDOWN_GRACE_SECS})` },
  // Prompt cache (GET /v1/cache/stats): llama-server's switch and variable, then its bounds.
  { name: 'cache-prompt', negation: 'no-cache-prompt', env: ['LLAMA_ARG_CACHE_PROMPT'], help: 'reuse the KV of cached prompt prefixes across requests (default: on)' },
  { name: 'cache-capacity-bytes', env: ['LLAMA_ARG_CACHE_CAPACITY_BYTES'], value: 'N', help: "prompt-cache KV bytes, on top of the slots' own (default: as many as the slots' KV)" },
  { name: 'cache-max-entries', env: ['LLAMA_ARG_CACHE_MAX_ENTRIES'], value: 'N', help: `prompt-cache blocks (16 tokens each) kept at most (default: ${ENGINE_DEFAULTS.cacheMaxEntries})` },
  { name: 'cache-ttl-secs', env: ['LLAMA_ARG_CACHE_TTL_SECS'], value: 'N', help: `seconds an unused cached block is kept, 0 = no expiry (default: ${ENGINE_DEFAULTS.cacheTtlSecs})` },
  { name: 'sleep-idle-seconds', env: ['LLAMA_ARG_SLEEP_IDLE_SECONDS'], value: 'N', help: 'after N seconds without a request, release the GPU (weights, KV cache, pipelines) and load the model again on the next one, which waits for it; GET /props shows is_sleeping, 0 = never (default: 0)' },
  // Speculative decoding: llama-server's flags. Its n-gram drafter names all mean prompt lookup here.
  { name: 'spec-type', env: ['LLAMA_ARG_SPEC_TYPE'], value: 'NAME', help: `drafter for speculative decoding: ${SPEC_TYPES.join('|')} (prompt lookup: n-gram matches in the prompt and the text generated so far) (default: none)` },
  { name: 'spec-draft-model', short: 'md', aliases: ['model-draft'], env: ['LLAMA_ARG_SPEC_DRAFT_MODEL', 'LLAMA_ARG_MODEL_DRAFT'], value: 'DIR|REPO', help: 'draft model for speculative decoding, a directory or a Hub repo id as for --model; it must share the model\'s tokenizer, and selects --spec-type draft-model (default: none)' },
  { name: 'spec-draft-n-max', aliases: ['draft', 'draft-max', 'draft-n'], env: ['LLAMA_ARG_DRAFT_MAX'], value: 'N', help: `most tokens drafted per verify pass; the engine adapts the length to the measured acceptance (default: ${SPECULATIVE_DEFAULTS.nMax})` },
  { name: 'draft-min', aliases: ['draft-n-min', 'spec-draft-n-min'], env: ['LLAMA_ARG_DRAFT_MIN'], value: 'N', help: `fewest drafted tokens worth a verify pass (default: ${SPECULATIVE_DEFAULTS.nMin})` },
  { name: 'spec-adaptive', negation: 'no-spec-adaptive', env: ['LLAMA_ARG_SPEC_ADAPTIVE'], help: 'fit each sequence\'s draft length to its measured acceptance and to what drafting and verifying cost, and stop drafting where it does not pay; off: every round drafts the most allowed, as llama-server does (default: on)' },
  { name: 'spec-ngram-size-n', env: ['LLAMA_ARG_SPEC_NGRAM_SIZE_N'], value: 'N', help: `longest n-gram prompt lookup matches (default: ${SPECULATIVE_DEFAULTS.ngram})` },
  // llama-server has --no-warmup and no variable for it.
  { name: 'warmup', negation: 'no-warmup', env: [], help: 'run every kernel once at load, so the first request does not wait for shader compiles (default: on)' },
  // llama-server's -v has no variable; LLAMA_ARG_VERBOSE follows its naming. LLAMA_LOG_VERBOSITY
  // is an older llama-server name for LLAMA_ARG_LOG_VERBOSITY.
  { name: 'spm-infill', env: ['LLAMA_ARG_SPM_INFILL'], help: 'lay /infill prompts out suffix-prefix-middle, for models trained so (default: prefix-suffix-middle)' },
  { name: 'embeddings', aliases: ['embedding'], env: ['LLAMA_ARG_EMBEDDINGS'], help: 'serve embeddings with the -m model (/v1/embeddings, /embedding); the generation routes answer 501 (default: off)' },
  { name: 'embedding-model', env: ['LLAMA_ARG_EMBEDDING_MODEL'], value: 'DIR|REPO', help: 'a second model, directory or Hub repo, serving embeddings beside the chat model, with its own worker and queue (default: none)' },
  { name: 'reranking', aliases: ['rerank'], env: ['LLAMA_ARG_RERANKING'], help: 'serve reranking with the -m model, a sequence classifier (bge-reranker) or a generative reranker (Qwen3-Reranker) (/v1/rerank, /rerank); the generation routes answer 501 (default: off)' },
  { name: 'reranker-model', env: ['LLAMA_ARG_RERANKER_MODEL'], value: 'DIR|REPO', help: 'a second model, directory or Hub repo, serving reranking beside the chat model, with its own worker and queue (default: none)' },
  { name: 'stt-model', env: ['MLXCEL_STT_MODEL'], value: 'DIR|REPO', help: 'a Whisper model, directory or Hub repo, serving speech to text (/v1/audio/transcriptions, /v1/audio/translations) beside the chat model, with its own worker and queue; -m a Whisper checkpoint instead makes an audio-only server (default: none)' },
  { name: 'tts-model', env: ['MLXCEL_TTS_MODEL'], value: 'DIR|REPO', help: 'a Kokoro model, directory or Hub repo, serving text to speech (/v1/audio/speech) beside the chat model, with its own worker and queue; -m a Kokoro checkpoint instead makes an audio-only server (default: none)' },
  { name: 'audio-queue-depth', env: ['MLXCEL_AUDIO_QUEUE_DEPTH'], value: 'N', help: `transcription and speech requests that may wait behind the running one (each worker its own queue) before 503 (default: ${AUDIO_QUEUE_DEFAULTS.maxQueue})` },
  { name: 'audio-request-timeout-secs', env: ['MLXCEL_AUDIO_REQUEST_TIMEOUT_SECS'], value: 'N', help: `a transcription or speech request not finished this many seconds after it queued answers 504 (default: ${AUDIO_QUEUE_DEFAULTS.timeoutSecs})` },
  { name: 'pooling', env: ['LLAMA_ARG_POOLING'], value: 'NAME', help: `embedding pooling: ${EMBEDDING_POOLINGS.join('|')} (default: the checkpoint's sentence-transformers 1_Pooling config, else the family's: last token for decoders)` },
  { name: 'embd-normalize', env: ['LLAMA_ARG_EMBD_NORMALIZE'], value: 'N', help: 'embedding normalisation for requests that set none: -1 none, 0 max-abs into int16 range, 1 taxicab, 2 euclidean, >2 p-norm (default: 2)' },
  // Media in chat content (src/server/media/): llama-server's --media-path, the REST reference's bounds.
  { name: 'media-path', env: ['LLAMA_ARG_MEDIA_PATH'], value: 'DIR', help: 'directory whose regular files (symlinks resolved, no "..") image parts may name as file:// URLs or absolute paths (default: none, local paths are refused)' },
  { name: 'max-images', env: ['MLXCEL_MAX_IMAGES'], value: 'N', help: `image and video parts per request (default: ${DEFAULT_MEDIA_POLICY.maxImages})` },
  { name: 'max-image-payload-size', env: ['MLXCEL_MAX_IMAGE_PAYLOAD_SIZE'], value: 'BYTES', help: `bytes of one encoded image or video, data URI, download or file; a download past it is cut off with 413 (default: ${DEFAULT_MEDIA_POLICY.maxImagePayloadBytes})` },
  { name: 'video-max-frames', env: ['MLXCEL_VIDEO_MAX_FRAMES'], value: 'N', help: `frames a video part is sampled into at most (with ffmpeg, at its fps, default ${DEFAULT_VIDEO_FPS}), each taken as an image (default: ${DEFAULT_MEDIA_POLICY.videoMaxFrames})` },
  { name: 'image-min-tokens', env: ['LLAMA_ARG_IMAGE_MIN_TOKENS'], value: 'N', help: 'fewest tokens an image becomes, for a dynamic-resolution vision tower (Qwen2.5-VL: N x 784 pixels; Gemma 3 is always 256) (default: the preprocessor_config.json min_pixels)' },
  { name: 'image-max-tokens', env: ['LLAMA_ARG_IMAGE_MAX_TOKENS'], value: 'N', help: 'most tokens an image becomes, for a dynamic-resolution vision tower (Qwen2.5-VL: N x 784 pixels; Gemma 3 is always 256) (default: the preprocessor_config.json max_pixels)' },
  // The REST reference's image server flag; image generation models do not load yet.
  { name: 'image-model', env: ['MLXCEL_IMAGE_MODEL'], value: 'DIR|REPO', help: 'image generation model for /v1/images/generations and /v1/images/edits: not supported yet, the server exits saying so (default: none, those routes answer 501)' },
  { name: 'verbose', short: 'v', env: ['LLAMA_ARG_VERBOSE'], help: "log everything, Dawn's own startup warnings included (--log-verbosity without a limit)" },
  { name: 'log-verbosity', short: 'lv', env: ['LLAMA_ARG_LOG_VERBOSITY', 'LLAMA_LOG_VERBOSITY'], value: 'N', help: `log threshold in llama-server's levels: ${LOG_LEVELS.info} prints the startup facts, ${LOG_LEVELS.trace} also Dawn's own startup warnings, below ${LOG_LEVELS.info} neither; errors and warnings always print (default: ${DEFAULT_LOG_VERBOSITY})` },
];

/** Variables read that belong to no flag. */
const ENVIRONMENT = [
  LOOP_POLICY_HELP,
  'MLXCEL_ALLOW_PRIVATE_MEDIA_URLS=1: image and video URLs may reach loopback, private and other non-public addresses (default: refused before, during and after connecting)',
  'MLXCEL_VIDEO_DIR_ALLOWLIST=DIR,...: directories whose regular files (symlinks resolved, no "..") video parts may name as file:// URLs or absolute paths, read at startup (default: none, local video paths are refused)',
  'HF_ENDPOINT: the Hub to download from (default: https://huggingface.co); HF_HUB_OFFLINE=1: use only the cache',
];

export const HELP_TEXT = [
  'Usage: mlxcel-server [options]',
  '',
  'Serves an LLM over the OpenAI and llama-server HTTP APIs.',
  '',
  'Options:',
  ...FLAGS.map((f) => {
    const names = `${f.short ? `-${f.short}, ` : '    '}--${f.name}${f.negation ? `, --${f.negation}` : ''}${f.value ? ` ${f.value}` : ''}`;
    return `  ${names.padEnd(25)} ${f.help}${f.env.length ? `\n  ${''.padEnd(26)}(env: ${f.env.join(', ')})` : ''}`;
  }),
  `  ${'-h, --help'.padEnd(26)}show this help`,
  '',
  'Environment:',
  ...ENVIRONMENT.map((line) => `  ${line}`),
  '',
].join('\n');

export function parseCli(argv: string[], env: Readonly<Record<string, string | undefined>>, defaultModelDir: string): CliCommand {
  let values: Record<string, string | boolean | undefined>;
  try {
    // parseArgs takes one-letter short options only; llama-server has "-np".
    const longShorts = new Map(FLAGS.filter((f) => f.short && f.short.length > 1).map((f) => [`-${f.short}`, `--${f.name}`]));
    for (const f of FLAGS) for (const alias of f.aliases ?? []) longShorts.set(`--${alias}`, `--${f.name}`);
    const spelled = (a: string) => {
      const eq = a.indexOf('=');
      const name = eq < 0 ? a : a.slice(0, eq);
      const to = longShorts.get(name);
      return to === undefined ? a : to + (eq < 0 ? '' : a.slice(eq));
    };
    const args = joinNegativeValues(argv.map(spelled));
    const options = Object.fromEntries(
      FLAGS.flatMap((f) => [
        [f.name, { type: f.value ? ('string' as const) : ('boolean' as const), ...(f.short?.length === 1 ? { short: f.short } : {}) }],
        ...(f.negation ? [[f.negation, { type: 'boolean' as const }]] : []),
      ]),
    );
    ({ values } = parseArgs({ args, options: { ...options, help: { type: 'boolean', short: 'h' } }, strict: true }) as {
      values: Record<string, string | boolean | undefined>;
    });
    // Of "--slots --no-slots", the last one wins, as in llama-server.
    for (const f of FLAGS.filter((g) => g.negation)) {
      const last = [...args].reverse().find((a) => a === `--${f.name}` || a === `--${f.negation}`);
      if (last) values[f.name] = last === `--${f.name}`;
    }
  } catch (err) {
    throw new CliError((err as Error).message);
  }
  if (values.help) return { kind: 'help' };

  const fromEnv = (flag: Flag): string | undefined => flag.env.map((e) => env[e]).find((v) => v !== undefined && v !== '');
  const get = (name: string): string | undefined => {
    const flag = FLAGS.find((f) => f.name === name)!;
    const fromArgs = values[name];
    if (typeof fromArgs === 'string') return fromArgs;
    return fromEnv(flag);
  };
  /** A switch: true/false from the command line or its variable, undefined when unset. */
  const getSwitch = (name: string): boolean | undefined => {
    const flag = FLAGS.find((f) => f.name === name)!;
    const fromArgs = values[name];
    if (typeof fromArgs === 'boolean') return fromArgs;
    const text = fromEnv(flag);
    return text === undefined ? undefined : boolean(flag, text);
  };

  const ctxSize = integer('ctx-size', get('ctx-size') ?? '0', 0);
  const optionalInteger = (name: string, min: number, max?: number) => {
    const text = get(name);
    return text === undefined ? undefined : integer(name, text, min, max);
  };
  const logVerbosity = optionalInteger('log-verbosity', 0);
  const backend = get('backend') ?? 'auto';
  if (!(BACKENDS as readonly string[]).includes(backend)) {
    throw new CliError(`--backend must be one of ${BACKENDS.join(', ')}, got "${backend}"`);
  }
  if (get('image-model') !== undefined) return { kind: 'unsupported', message: `${IMAGE_MODELS_UNSUPPORTED}; ${SERVED_KINDS}` };
  return {
    kind: 'serve',
    options: {
      model: modelArg(get('model'), get('hf-repo'), defaultModelDir),
      hfToken: get('hf-token'),
      host: get('host') ?? '127.0.0.1',
      port: integer('port', get('port') ?? '8080', 0, 65535),
      ctxSize: ctxSize === 0 ? undefined : ctxSize,
      parallel: optionalInteger('parallel', 1),
      kvUnified: getSwitch('kv-unified'),
      swaFull: getSwitch('swa-full'),
      batchSize: optionalInteger('batch-size', 1),
      imageTokens: definedFields({ minTokens: optionalInteger('image-min-tokens', 1), maxTokens: optionalInteger('image-max-tokens', 1) }),
      cacheTypeK: kvType('cache-type-k', get('cache-type-k')),
      cacheTypeV: kvType('cache-type-v', get('cache-type-v')),
      maxQueue: optionalInteger('max-queue', 0),
      apiKey: get('api-key'),
      corsOrigins: originList('cors-origins', get('cors-origins')),
      alias: nameList('alias', get('alias')),
      tags: nameList('tags', get('tags')),
      ...chatTemplateOptions(get('chat-template'), get('chat-template-file')),
      backend: backend as ServeOptions['backend'],
      slots: getSwitch('slots'),
      slotSavePath: get('slot-save-path'),
      metrics: getSwitch('metrics'),
      metricsPort: optionalInteger('metrics-port', 0, 65535),
      sampling: mergeDefined(mergeDefined(samplingOptions(get), loopPolicyOption(env)), contextShiftOption(getSwitch('context-shift'))),
      responsesStoreMaxEntries: optionalInteger('responses-store-max-entries', 0),
      responsesStoreTtlSecs: optionalInteger('responses-store-ttl-secs', 0),
      conversationStoreMaxEntries: optionalInteger('conversation-store-max-entries', 0),
      conversationStoreTtlSecs: optionalInteger('conversation-store-ttl-secs', 0),
      storeSpec: storeOption(get('store')),
      shutdownGraceSecs: optionalInteger('shutdown-grace-secs', 0),
      chatTemplateKwargs: reasoningKwargs(get('reasoning'), jsonObject('chat-template-kwargs', get('chat-template-kwargs'))),
      spmInfill: getSwitch('spm-infill'),
      cachePrompt: getSwitch('cache-prompt'),
      warmup: getSwitch('warmup'),
      ...speculativeOptions(
        get('spec-type'),
        get('spec-draft-model'),
        optionalInteger('spec-draft-n-max', 1, 64),
        optionalInteger('draft-min', 0, 64),
        optionalInteger('spec-ngram-size-n', 1, 64),
        getSwitch('spec-adaptive'),
      ),
      sleepIdleSeconds: optionalInteger('sleep-idle-seconds', 0),
      cacheCapacityBytes: optionalInteger('cache-capacity-bytes', 0),
      requestMemoryBudget: requestMemoryBudgetOption(env),
      cacheMaxEntries: optionalInteger('cache-max-entries', 0),
      cacheTtlSecs: optionalInteger('cache-ttl-secs', 0),
      logVerbosity: getSwitch('verbose') ? Infinity : logVerbosity,
      ...servedJob(getSwitch('embeddings'), getSwitch('reranking')),
      rerankerModel: secondModel('reranker-model', get('reranker-model')),
      embeddingModel: secondModel('embedding-model', get('embedding-model')),
      sttModel: secondModel('stt-model', get('stt-model')),
      ttsModel: secondModel('tts-model', get('tts-model')),
      audioQueueDepth: optionalInteger('audio-queue-depth', 0),
      audioRequestTimeoutSecs: optionalInteger('audio-request-timeout-secs', 1),
      pooling: poolingOption(get('pooling')),
      embdNormalize: optionalInteger('embd-normalize', -1),
      media: definedFields({
        mediaPath: get('media-path'),
        allowPrivateUrls: env.MLXCEL_ALLOW_PRIVATE_MEDIA_URLS === '1' ? true : undefined,
        maxImages: optionalInteger('max-images', 0),
        maxImagePayloadBytes: optionalInteger('max-image-payload-size', 1),
        videoDirs: listed(env.MLXCEL_VIDEO_DIR_ALLOWLIST),
        videoMaxFrames: optionalInteger('video-max-frames', 1),
      }),
    },
  };
}

/** --model and -hf name the same thing: at most one of them, -hf a well-formed repo id. */
function modelArg(model: string | undefined, hfRepo: string | undefined, defaultModelDir: string): ModelArg {
  if (hfRepo === undefined) return { kind: 'path-or-repo', text: model ?? defaultModelDir };
  if (model !== undefined) throw new CliError(`give --model or --hf-repo, not both (got "${model}" and "${hfRepo}")`);
  const ref = parseRepoRef(hfRepo, true);
  if (!ref) throw new CliError(`--hf-repo must be a Hub repo id org/name[:revision], got "${hfRepo}"`);
  return { kind: 'repo', ref };
}

/** The engine's speculative options from --spec-type, --spec-draft-model and the --draft flags; none when off. */
function speculativeOptions(
  type: string | undefined,
  draftModel: string | undefined,
  nMax: number | undefined,
  nMin: number | undefined,
  ngram: number | undefined,
  adaptive: boolean | undefined,
): Pick<ServeOptions, 'speculative' | 'draftModel'> {
  if (type !== undefined && !(SPEC_TYPES as readonly string[]).includes(type)) {
    throw new CliError(`--spec-type must be one of ${SPEC_TYPES.join(', ')}, got "${type}"`);
  }
  if (draftModel !== undefined && type !== undefined && type !== 'draft-model') {
    throw new CliError(`--spec-draft-model drafts with a model; --spec-type ${type} names another drafter`);
  }
  if (type === 'draft-model' && draftModel === undefined) throw new CliError('--spec-type draft-model needs --spec-draft-model');
  if (draftModel === undefined && (type === undefined || type === 'none')) return {};
  const kind = draftModel === undefined ? 'prompt-lookup' : 'draft-model';
  const options = {
    kind,
    nMax: nMax ?? SPECULATIVE_DEFAULTS.nMax,
    nMin: nMin ?? SPECULATIVE_DEFAULTS.nMin,
    ngram: ngram ?? SPECULATIVE_DEFAULTS.ngram,
    adaptive: adaptive ?? SPECULATIVE_DEFAULTS.adaptive,
  } as const;
  if (options.nMin > options.nMax) throw new CliError(`--draft-min ${options.nMin} exceeds --spec-draft-n-max ${options.nMax}`);
  return { speculative: options, ...(draftModel === undefined ? {} : { draftModel: { kind: 'path-or-repo', text: draftModel } }) };
}

/** --embeddings and --reranking: the -m model serves one job, not both. */
function servedJob(embeddings: boolean | undefined, reranking: boolean | undefined): Pick<ServeOptions, 'embeddings' | 'reranking'> {
  if (embeddings && reranking) throw new CliError('give --embeddings or --reranking, not both: the -m model serves one of them (--embedding-model / --reranker-model add a second model)');
  return { embeddings, reranking };
}

/** A second model's directory or Hub repo id. */
function secondModel(name: string, text: string | undefined): ModelArg | undefined {
  if (text === undefined) return undefined;
  if (text.trim() === '') throw new CliError(`--${name} must name a directory or a Hub repo`);
  return { kind: 'path-or-repo', text };
}

function poolingOption(text: string | undefined): Pooling | undefined {
  if (text === undefined) return undefined;
  if (text === 'rank') throw new CliError('--pooling rank is a reranker\'s: serve one with --reranking or --reranker-model');
  if (!(EMBEDDING_POOLINGS as readonly string[]).includes(text)) throw new CliError(`--pooling must be one of ${EMBEDDING_POOLINGS.join(', ')}, got "${text}"`);
  return text as Pooling;
}

/** --context-shift / --no-context-shift, when given, as the server's context_shift. */
function contextShiftOption(on: boolean | undefined): Partial<SamplingDefaults> | undefined {
  return on === undefined ? undefined : { context_shift: on };
}

/** MLXCEL_REQUEST_MEMORY_BUDGET, when set, as a byte size; zero, none and other invalid values stop startup. */
function requestMemoryBudgetOption(env: Readonly<Record<string, string | undefined>>): number | undefined {
  const text = env.MLXCEL_REQUEST_MEMORY_BUDGET;
  if (text === undefined) return undefined;
  try {
    return parseByteSize(text, 'MLXCEL_REQUEST_MEMORY_BUDGET');
  } catch (err) {
    throw new CliError((err as Error).message);
  }
}

function storeOption(text: string | undefined): StoreSpec | undefined {
  if (text === undefined) return undefined;
  const spec = parseStoreSpec(text);
  if (!spec) throw new CliError(`--store must be ${STORE_HELP}, got "${text}"`);
  return spec;
}

/** MLXCEL_LOOP_DETECTION, when set, as the server's loop_detection default. */
function loopPolicyOption(env: Readonly<Record<string, string | undefined>>): Partial<SamplingDefaults> | undefined {
  const text = env.MLXCEL_LOOP_DETECTION;
  if (text === undefined || text === '') return undefined;
  try {
    return { loop_detection: parseLoopPolicy(text) };
  } catch (err) {
    throw new CliError((err as Error).message);
  }
}

/** --cache-type-k / --cache-type-v: a KV type this server stores; undefined when unset. */
function kvType(name: string, text: string | undefined): KvType | undefined {
  if (text === undefined) return undefined;
  if (!(KV_TYPES as readonly string[]).includes(text)) throw new CliError(`--${name} must be one of ${KV_TYPES.join(', ')}, got "${text}"`);
  return text as KvType;
}

/** --cors-origins: a comma-separated list; undefined (any origin) when unset or when it holds "*". */
function originList(name: string, text: string | undefined): string[] | undefined {
  if (text === undefined) return undefined;
  const origins = text.split(',').map((o) => o.trim()).filter((o) => o !== '');
  if (origins.length === 0) throw new CliError(`--${name} must list at least one origin, got "${text}"`);
  return origins.includes('*') ? undefined : origins;
}

/** A comma-separated list of names; undefined when unset. */
function nameList(name: string, text: string | undefined): string[] | undefined {
  if (text === undefined) return undefined;
  const names = text.split(',').map((n) => n.trim()).filter((n) => n !== '');
  if (names.length === 0) throw new CliError(`--${name} must list at least one name, got "${text}"`);
  return names;
}

/** --chat-template or --chat-template-file: one of them at most. */
function chatTemplateOptions(text: string | undefined, file: string | undefined): Pick<ServeOptions, 'chatTemplate' | 'chatTemplateFile'> {
  if (text !== undefined && file !== undefined) throw new CliError('give --chat-template or --chat-template-file, not both');
  if (text !== undefined && text.trim() === '') throw new CliError('--chat-template must not be empty');
  return { ...(text === undefined ? {} : { chatTemplate: text }), ...(file === undefined ? {} : { chatTemplateFile: file }) };
}

/** A flag whose value is a JSON object (llama-server's --chat-template-kwargs). */
function jsonObject(name: string, text: string | undefined): Record<string, unknown> | undefined {
  if (text === undefined) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new CliError(`--${name} must be a JSON object: ${(err as Error).message}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new CliError(`--${name} must be a JSON object, got ${text}`);
  return value as Record<string, unknown>;
}

/** --reasoning's spellings, llama-server's. */
const REASONING_WORDS = { on: ['on', 'enabled', 'true', '1'], off: ['off', 'disabled', 'false', '0'], auto: ['auto', '-1'] };

/**
 * --reasoning on|off is the server-wide enable_thinking, as llama-server keeps it among
 * the template kwargs; auto leaves it to the chat pipeline. One that contradicts
 * --chat-template-kwargs' enable_thinking is refused rather than one silently winning.
 */
function reasoningKwargs(text: string | undefined, kwargs: Record<string, unknown> | undefined): Record<string, unknown> | undefined {
  if (text === undefined || REASONING_WORDS.auto.includes(text)) return kwargs;
  const on = REASONING_WORDS.on.includes(text);
  if (!on && !REASONING_WORDS.off.includes(text)) throw new CliError(`--reasoning must be on, off or auto, got "${text}"`);
  if (kwargs && 'enable_thinking' in kwargs && kwargs.enable_thinking !== on) {
    throw new CliError(`--reasoning ${text} contradicts --chat-template-kwargs' "enable_thinking": ${JSON.stringify(kwargs.enable_thinking)}; give one of them`);
  }
  return { ...kwargs, enable_thinking: on };
}

/** The sampling flags that were given, parsed; undefined when none was. */
function samplingOptions(get: (name: string) => string | undefined): Partial<SamplingDefaults> | undefined {
  const entries = FLAGS.flatMap((f) => {
    const text = f.sampling && get(f.name);
    if (!f.sampling || text === undefined) return [];
    const { key, kind, min, max, above } = f.sampling;
    return [[key, kind === 'int' ? integer(f.name, text, min, max) : float(f.name, text, min, max, above)]];
  });
  return entries.length > 0 ? Object.fromEntries(entries) : undefined;
}

/** A comma-separated list's entries, trimmed; undefined when it has none. */
function listed(text: string | undefined): string[] | undefined {
  const entries = (text ?? '').split(',').map((entry) => entry.trim()).filter((entry) => entry !== '');
  return entries.length > 0 ? entries : undefined;
}

/** `fields` without its undefined values; undefined when none is left. */
function definedFields<T extends object>(fields: T): Partial<T> | undefined {
  const defined = Object.entries(fields).filter(([, v]) => v !== undefined);
  return defined.length > 0 ? (Object.fromEntries(defined) as Partial<T>) : undefined;
}

function mergeDefined<T extends object>(a: T | undefined, b: T | undefined): T | undefined {
  return a || b ? { ...a, ...b } as T : undefined;
}

/**
 * parseArgs refuses "--seed -1" (a value that looks like an option) and wants
 * "--seed=-1"; llama-server users write the former, so a value flag followed by a
 * negative number is joined with it.
 */
function joinNegativeValues(args: string[]): string[] {
  const valueFlags = new Set(FLAGS.filter((f) => f.value).flatMap((f) => [`--${f.name}`, ...(f.short?.length === 1 ? [`-${f.short}`] : [])]));
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    const next = args[i + 1];
    if (valueFlags.has(a) && next !== undefined && /^-\d/.test(next)) {
      const long = a.startsWith('--') ? a : `--${FLAGS.find((f) => `-${f.short}` === a)!.name}`;
      out.push(`${long}=${next}`);
      i++;
    } else {
      out.push(a);
    }
  }
  return out;
}

const TRUE_WORDS = ['1', 'true', 'on', 'yes', 'enabled'];
const FALSE_WORDS = ['0', 'false', 'off', 'no', 'disabled'];

function boolean(flag: Flag, text: string): boolean {
  const word = text.trim().toLowerCase();
  if (TRUE_WORDS.includes(word)) return true;
  if (FALSE_WORDS.includes(word)) return false;
  throw new CliError(`${flag.env.join('/')} must be one of ${[...TRUE_WORDS, ...FALSE_WORDS].join(', ')}, got "${text}"`);
}

function float(name: string, text: string, min: number, max = Infinity, above = false): number {
  const value = /^-?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$/i.test(text.trim()) ? Number(text) : NaN;
  if (!((above ? value > min : value >= min) && value <= max)) {
    const range = above ? `above ${min}` : `from ${min}${max === Infinity ? '' : ` to ${max}`}`;
    throw new CliError(`--${name} must be a number ${range}, got "${text}"`);
  }
  return value;
}

function integer(name: string, text: string, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const value = /^-?\d+$/.test(text) ? Number(text) : NaN;
  if (!(value >= min && value <= max)) throw new CliError(`--${name} must be an integer from ${min} to ${max}, got "${text}"`);
  return value;
}
