// Opens the GPU, loads the checkpoint and tokenizer, and returns a ready engine.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { freemem } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { openGpu, type Backend } from '../runtime/gpu.js';
import { loadGemma3Vision } from '../models/gemma3-vision.js';
import { loadQwen25VlVision } from '../models/qwen2-5-vl-vision.js';
import { readFamilyConfig } from '../models/registry.js';
import { checkpointWeightBytes, kvPlacements, kvRingBytes, kvTokenBytes, loadModel, type KvTypes } from '../models/model.js';
import { TextTokenizer } from '../models/tokenizer.js';
import { DraftModel, tokenizerMismatch } from './drafters/draft-model.js';
import { memoryBudget, RequestMemory } from './memory-budget.js';
import { cacheBlockBound } from './prompt-cache.js';
import { ENGINE_DEFAULTS, type Engine, type EngineOptions } from './engine.js';
import { ForwardRunner } from './forward.js';
import { Scheduler } from './scheduler.js';
import { SleepingEngine, type Awake } from './sleep.js';

const BLOCK_SIZE = 16;

/** Bytes in GiB, one decimal (MiB below one GiB). */
function size(bytes: number): string {
  return bytes >= 2 ** 30 ? `${(bytes / 2 ** 30).toFixed(1)} GiB` : `${(bytes / 2 ** 20).toFixed(1)} MiB`;
}
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
  const { cfg } = readFamilyConfig(dir);
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
  const kvTypes: KvTypes = { k: options.cacheTypeK ?? ENGINE_DEFAULTS.cacheTypeK, v: options.cacheTypeV ?? ENGINE_DEFAULTS.cacheTypeV };
  // Sliding-window layers keep a ring per slot (unless --swa-full): a fixed size beside the paged pool's blocks.
  const ringSlots = options.swaFull ? undefined : slots;
  const placements = kvPlacements(cfg.layerKv, ringSlots === undefined ? undefined : { slots: ringSlots, chunk: batchSize, maxContext: seqContext });
  const ringBytes = kvRingBytes(cfg, kvTypes, placements, slots);
  const blockBytes = BLOCK_SIZE * kvTokenBytes(cfg, kvTypes, placements);
  // A recurrent state holds the whole prefix in a fixed size: it cannot be cut back to a
  // shifted context, and the prompt cache resumes it from snapshots (sized once loaded).
  const recurrent = cfg.recurrent === true;
  const cacheAsked = options.cachePrompt !== false;
  const cacheMaxEntries = options.cacheMaxEntries ?? ENGINE_DEFAULTS.cacheMaxEntries;
  const cacheCapacityBytes = options.cacheCapacityBytes ?? slotBlocks * blockBytes;
  const cacheBlocks = cacheAsked ? cacheBlockBound({ maxEntries: cacheMaxEntries, capacityBytes: cacheCapacityBytes, blockBytes }) : 0;
  // A draft model gets a KV pool of its own for the slots' contexts (no prompt cache).
  const draftDir = options.speculative?.kind === 'draft-model' ? draftModelDir(options.speculative.draftModel) : undefined;
  const draftCfg = draftDir === undefined ? undefined : readFamilyConfig(draftDir).cfg;
  const draftKvBytes = draftCfg ? slotBlocks * BLOCK_SIZE * kvTokenBytes(draftCfg, kvTypes, kvPlacements(draftCfg.layerKv)) : 0;
  const gpu = await openGpu((options.backend ?? 'auto') as Backend, { quietDawn: options.quietDawn });
  options.log?.(`adapter ${gpu.description}`);
  // On a CPU adapter the weights and the KV cache are host memory (llvmpipe zero-fills each
  // texture as it creates it): a model the machine cannot hold would start loading, then
  // die to the out-of-memory killer. WebGPU reports no GPU memory to check against.
  const kvBytes = (slotBlocks + cacheBlocks) * blockBytes + ringBytes + draftKvBytes;
  const weightBytes = checkpointWeightBytes(dir);
  if (gpu.isCpu && kvBytes > freemem()) {
    throw new Error(`a KV cache of ${size(kvBytes)} (${slots} slots of ${perSlot} tokens${cacheBlocks > 0 ? `, ${cacheBlocks * BLOCK_SIZE} tokens of prompt cache` : ''}) exceeds the ${size(freemem())} of free memory; lower --ctx-size or --parallel`);
  }
  if (gpu.isCpu && weightBytes + kvBytes > freemem()) {
    throw new Error(`the checkpoint's weights (${size(weightBytes)}) and a KV cache of ${size(kvBytes)} exceed the ${size(freemem())} of free memory this CPU adapter (${gpu.description}) has`);
  }
  const budget = memoryBudget(gpu.isCpu, options.requestMemoryBudget);
  if (weightBytes > budget.bytes) {
    gpu.device.destroy();
    throw new Error(`the checkpoint's weights (${weightBytes} bytes, ${size(weightBytes)}) do not fit the request memory budget of ${budget.bytes} bytes (${size(budget.bytes)}, from ${budget.from})`);
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
    // The pool grows from there as sequences need blocks, up to the slots' contexts and the prompt cache's.
    kvInitialTokens: Math.min(seqContext, options.kvInitialTokens ?? ENGINE_DEFAULTS.kvInitialTokens),
    kvTypes,
    maxContext: seqContext,
    blockSize: BLOCK_SIZE,
    // With speculative decoding, a snapshot slot per slot for a verify round's state.
    stateSlots: options.speculative ? 2 * slots : slots,
    ringSlots,
    onProgress: options.onLoadProgress,
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
    ...(recurrent ? { recurrent } : {}),
    ...(options.speculative ? { speculative: { kind: options.speculative.kind, nMax: options.speculative.nMax, ...(draftDir ? { draftModel: draftDir } : {}) } } : {}),
  };
  options.log?.(`model ${info.id} (${info.architecture}, ${model.weightFormat}, ${size(weightBytes)}) from ${dir}`);
  options.log?.(unified
    ? `context ${seqContext} tokens per sequence, one KV pool shared by ${slots} slot${slots === 1 ? '' : 's'} (--kv-unified)`
    : `context ${perSlot} tokens per slot, ${slots} slot${slots === 1 ? '' : 's'}`);
  // A hybrid's snapshots of its recurrent state take at most half the prompt cache's bytes.
  const snapshotBytes = model.states.reduce((n, s) => n + s.slotBytes, 0);
  const snapshots = cacheAsked && recurrent ? Math.min(cacheMaxEntries, Math.floor(cacheCapacityBytes / 2 / snapshotBytes)) : 0;
  const cacheOn = cacheAsked && (!recurrent || snapshots > 0);
  if (cacheAsked && recurrent) {
    options.log?.(cacheOn
      ? `prompt cache: ${snapshots} snapshots of ${info.architecture}'s recurrent state (${size(snapshotBytes)} each) within its ${size(cacheCapacityBytes)}`
      : `prompt cache off: its ${size(cacheCapacityBytes)} (--cache-capacity-bytes) are under two snapshots of ${info.architecture}'s recurrent state (${size(snapshotBytes)} each)`);
  }
  const runner = new ForwardRunner(model);
  if (options.warmup !== false) await runner.warmUp();
  const vision = (await loadGemma3Vision(gpu, dir, batchSize)) ?? (await loadQwen25VlVision(gpu, dir, batchSize, options.imageTokens));
  if (vision) options.log?.(`vision tower: ${vision.tokensPerImage ?? `up to ${vision.maxImageTokens}`} soft tokens per image`);
  let drafter: DraftModel | undefined;
  if (draftDir !== undefined) {
    const draft = await loadModel(gpu, draftDir, {
      maxTokens: batchSize,
      maxSeqs: slots,
      kvTokens: slotBlocks * BLOCK_SIZE,
      kvTypes,
      maxContext: seqContext,
      blockSize: BLOCK_SIZE,
    });
    if (draft.states.length > 0) {
      gpu.device.destroy();
      throw new Error(`draft model ${draftDir} (${draft.cfg.modelType}) has recurrent layers, whose state cannot be rolled back to the kept position of a verify round: use a transformer draft model`);
    }
    options.log?.(`draft model ${basename(draftDir)} (${draft.cfg.modelType}, ${draft.weightFormat}) from ${draftDir}`);
    const draftRunner = new ForwardRunner(draft);
    if (options.warmup !== false) await draftRunner.warmUp();
    drafter = new DraftModel(draftRunner);
  }
  options.log?.(`request memory budget ${size(budget.bytes)} (${budget.from}), ${size(budget.bytes - weightBytes)} of it for requests`);
  const qkv = (cfg.heads + 2 * cfg.kvHeads) * cfg.headDim;
  // The rings, allocated whatever the requests hold, come off the top with the weights.
  const memory = new RequestMemory(budget.bytes, weightBytes + ringBytes, {
    kvBytesPerToken: blockBytes / BLOCK_SIZE,
    // With speculative decoding, each sequence's state has a snapshot too.
    stateBytes: (options.speculative ? 2 : 1) * snapshotBytes,
    activationBytesPerToken: 4 * (2 * cfg.hidden + qkv + 2 * cfg.intermediate),
    chunkTokens: batchSize,
    contextSize: seqContext,
  });
  const engine = new Scheduler(info, tokenizer, gpu.description, runner, {
    memory,
    slots,
    maxQueue: options.maxQueue ?? ENGINE_DEFAULTS.maxQueue,
    kvUnified: unified,
    kvShrinkIdleMs: options.kvShrinkIdleMs ?? ENGINE_DEFAULTS.kvShrinkIdleMs,
    ...(options.speculative ? { speculative: options.speculative } : {}),
    ...(drafter ? { drafter } : {}),
    ...(vision ? { vision } : {}),
    cache: {
      enabled: cacheOn,
      blockBytes,
      capacityBytes: cacheCapacityBytes,
      maxEntries: cacheMaxEntries,
      ttlMs: (options.cacheTtlSecs ?? ENGINE_DEFAULTS.cacheTtlSecs) * 1000,
      snapshots,
      snapshotBytes,
      modelIdentity: createHash('sha256').update(dir).update(readFileSync(join(dir, 'config.json'))).digest('hex'),
    },
  });
  const m = engine.stats().memory;
  const bytes = (n: number) => `${n} B (${(n / 2 ** 20).toFixed(1)} MiB)`;
  const kvLayers = placements.filter((p) => p !== null).length;
  const ringLayers = placements.filter((p) => p);
  const layout = ringLayers.length > 0 ? `, ${ringLayers.length} of ${kvLayers} layers a ring of ${Math.max(...(ringLayers as number[]))} positions per slot` : '';
  options.log?.(`GPU memory: weights ${bytes(m.weights)}, KV cache ${bytes(m.kv)} of at most ${bytes(m.kvMax)} (K ${kvTypes.k}, V ${kvTypes.v}${layout}), other ${bytes(m.other)}`);
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
