// Opens the GPU, loads the checkpoint and tokenizer, and returns a ready engine.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { freemem } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { openGpu, type Backend } from '../runtime/gpu.js';
import { readModelConfig } from '../models/config.js';
import { loadModel } from '../models/model.js';
import { TextTokenizer } from '../models/tokenizer.js';
import { DraftModel, tokenizerMismatch } from './drafters/draft-model.js';
import { ENGINE_DEFAULTS, type Engine, type EngineOptions } from './engine.js';
import { ForwardRunner } from './forward.js';
import { Scheduler } from './scheduler.js';
import { SleepingEngine, type Awake } from './sleep.js';

const BLOCK_SIZE = 16;
/** Default KV budget across all slots when --ctx-size is not given. */
const DEFAULT_TOTAL_CONTEXT = 8192;

export async function loadEngine(options: EngineOptions): Promise<Engine> {
  const first = await loadScheduler(options);
  const idle = options.sleepIdleSeconds ?? 0;
  if (idle <= 0) return first.engine;
  // A reload reports nothing but the sleeping engine's own lines.
  return new SleepingEngine(first, () => loadScheduler({ ...options, log: undefined }), idle * 1000, options.log);
}

/** One load: the scheduler, and how to destroy its GPU device once it is closed. */
async function loadScheduler(options: EngineOptions): Promise<Awake> {
  const dir = resolve(options.modelDir);
  const slots = options.parallel ?? ENGINE_DEFAULTS.parallel;
  const batchSize = options.batchSize ?? ENGINE_DEFAULTS.batchSize;
  const cfg = readModelConfig(dir);
  const maxPositions = cfg.maxPositions;
  // Like llama-server, an explicit --ctx-size is shared by the slots; by default each
  // slot gets the model's trained length within a total budget.
  const perSlot = options.contextSize && options.contextSize > 0
    ? Math.floor(options.contextSize / slots)
    : Math.min(maxPositions, Math.floor(DEFAULT_TOTAL_CONTEXT / slots));
  if (perSlot < 2) throw new Error(`--ctx-size ${options.contextSize} leaves ${perSlot} tokens per slot for ${slots} slots`);
  // By default every slot can hold a full context at once, so admission never waits on KV
  // space. With --kv-unified the slots share that pool (llama-server's unified KV cache): one
  // sequence may fill all of it, the model's trained length aside when --ctx-size is not
  // given. The prompt cache's blocks come on top either way.
  const unified = options.kvUnified === true;
  const total = options.contextSize && options.contextSize > 0 ? options.contextSize : Math.min(maxPositions, slots * perSlot);
  const seqContext = unified ? total : perSlot;
  const slotBlocks = Math.max(slots * Math.ceil(perSlot / BLOCK_SIZE), Math.ceil(seqContext / BLOCK_SIZE));
  const blockBytes = cfg.layers * 2 * BLOCK_SIZE * cfg.kvHeads * cfg.headDim * 4;
  const cacheOn = options.cachePrompt !== false;
  const cacheMaxEntries = options.cacheMaxEntries ?? ENGINE_DEFAULTS.cacheMaxEntries;
  const cacheCapacityBytes = options.cacheCapacityBytes ?? slotBlocks * blockBytes;
  const cacheBlocks = cacheOn ? Math.min(cacheMaxEntries, Math.floor(cacheCapacityBytes / blockBytes)) : 0;
  // A draft model gets a KV pool of its own for the slots' contexts (no prompt cache).
  const draftDir = options.speculative?.kind === 'draft-model' ? draftModelDir(options.speculative.draftModel) : undefined;
  const draftCfg = draftDir === undefined ? undefined : readModelConfig(draftDir);
  const draftKvBytes = draftCfg ? slotBlocks * draftCfg.layers * 2 * BLOCK_SIZE * draftCfg.kvHeads * draftCfg.headDim * 4 : 0;
  const gpu = await openGpu((options.backend ?? 'auto') as Backend, { quietDawn: options.quietDawn });
  options.log?.(`adapter ${gpu.description}`);
  // On a CPU adapter the KV cache is host memory (llvmpipe zero-fills each texture as it
  // creates it): a cache the machine cannot hold would start loading, then die to the
  // out-of-memory killer. WebGPU reports no GPU memory to check against.
  const kvBytes = (slotBlocks + cacheBlocks) * blockBytes + draftKvBytes;
  if (gpu.isCpu && kvBytes > freemem()) {
    const gib = (b: number) => (b / 2 ** 30).toFixed(1);
    throw new Error(`a KV cache of ${gib(kvBytes)} GiB (${slots} slots of ${perSlot} tokens${cacheBlocks > 0 ? `, ${cacheBlocks * BLOCK_SIZE} tokens of prompt cache` : ''}) exceeds the ${gib(freemem())} GiB of free memory; lower --ctx-size or --parallel`);
  }
  const tokenizer = await TextTokenizer.load(dir);
  if (draftDir !== undefined) {
    const draftTokenizer = await TextTokenizer.load(draftDir);
    await draftTokenizer.close();
    const why = tokenizerMismatch(tokenizer, cfg.vocab, draftTokenizer, draftCfg!.vocab);
    if (why) throw new Error(`draft model ${draftDir} does not share the tokenizer of ${dir}: ${why}`);
  }
  collectGarbage();
  const model = await loadModel(gpu, dir, {
    maxTokens: batchSize,
    // A verify round samples at each drafted position as well as after the last token.
    maxSeqs: slots * (1 + (options.speculative?.nMax ?? 0)),
    kvTokens: (slotBlocks + cacheBlocks) * BLOCK_SIZE,
    maxContext: seqContext,
    blockSize: BLOCK_SIZE,
    onProgress: options.onLoadProgress,
    warmShaders: options.warmShaders === true && options.warmup !== false,
  });
  const eos = new Set(model.cfg.eosTokenIds);
  if (tokenizer.eosId !== undefined) eos.add(tokenizer.eosId);
  const info = {
    id: options.alias ?? basename(dir),
    path: dir,
    architecture: model.cfg.modelType,
    vocabSize: model.cfg.vocab,
    contextSize: seqContext,
    eosTokenIds: [...eos],
    ...(options.speculative ? { speculative: { kind: options.speculative.kind, nMax: options.speculative.nMax, ...(draftDir ? { draftModel: draftDir } : {}) } } : {}),
  };
  options.log?.(`model ${info.id} (${info.architecture}, ${model.weightFormat}) from ${dir}`);
  options.log?.(unified
    ? `context ${seqContext} tokens per sequence, one KV pool shared by ${slots} slot${slots === 1 ? '' : 's'} (--kv-unified)`
    : `context ${perSlot} tokens per slot, ${slots} slot${slots === 1 ? '' : 's'}`);
  const runner = new ForwardRunner(model);
  if (options.warmup !== false) await runner.warmUp();
  let drafter: DraftModel | undefined;
  if (draftDir !== undefined) {
    const draft = await loadModel(gpu, draftDir, {
      maxTokens: batchSize,
      maxSeqs: slots,
      kvTokens: slotBlocks * BLOCK_SIZE,
      maxContext: seqContext,
      blockSize: BLOCK_SIZE,
    });
    options.log?.(`draft model ${basename(draftDir)} (${draft.cfg.modelType}, ${draft.weightFormat}) from ${draftDir}`);
    const draftRunner = new ForwardRunner(draft);
    if (options.warmup !== false) await draftRunner.warmUp();
    drafter = new DraftModel(draftRunner);
  }
  const engine = new Scheduler(info, tokenizer, gpu.description, runner, {
    slots,
    maxQueue: options.maxQueue ?? ENGINE_DEFAULTS.maxQueue,
    kvUnified: unified,
    ...(options.speculative ? { speculative: options.speculative } : {}),
    ...(drafter ? { drafter } : {}),
    cache: {
      enabled: cacheOn,
      blockBytes,
      capacityBytes: cacheCapacityBytes,
      maxEntries: cacheMaxEntries,
      ttlMs: (options.cacheTtlSecs ?? ENGINE_DEFAULTS.cacheTtlSecs) * 1000,
      modelIdentity: createHash('sha256').update(dir).update(readFileSync(join(dir, 'config.json'))).digest('hex'),
    },
  });
  return { engine, release: () => gpu.device.destroy() };
}

/** The draft model's directory, which the draft-model drafter cannot do without. */
function draftModelDir(dir: string | undefined): string {
  if (dir === undefined) throw new Error('speculative decoding with a draft model needs its directory (--spec-draft-model)');
  return resolve(dir);
}

/**
 * One full garbage collection. Parsing the tokenizer leaves tens of MB of garbage in the
 * JS heap, and a server idling or decoding allocates too little for V8 to collect it soon.
 * Collected here, V8 returns the pages while the weights load, so the server is ready with
 * less resident memory. `gc` exists only in contexts created after --expose-gc is set,
 * hence the new context.
 */
function collectGarbage(): void {
  setFlagsFromString('--expose-gc');
  (runInNewContext('gc') as () => void)();
}
