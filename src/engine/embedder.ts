// An embedding model served by its own worker: requests queue (bounded), the worker takes
// every queued request's inputs at once, sorts them by length and packs them into forward
// passes of up to maxTokens tokens and maxSeqs sequences, each sequence's tokens laid out
// contiguously. The model's head pools and normalises on the GPU (layers.ts head); a pass
// reads back only the pooled vectors, which go back to their callers in input order.
import { existsSync, readFileSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { mapRead, openGpu, type Backend, type Gpu } from '../runtime/gpu.js';
import { packSeqNorms, type Pooling, type SeqNorm } from '../runtime/ops/pooling.js';
import { readModelConfig } from '../models/config.js';
import { loadModel, type LoadedModel } from '../models/model.js';
import { ENCODERS } from '../models/registry.js';
import { TextTokenizer } from '../models/tokenizer.js';
import { JobQueue } from './job-queue.js';
import { modelMemory, type EngineMemory } from './types.js';

const BLOCK_SIZE = 16;

export interface EmbedderInfo {
  /** Directory name or --alias: the id shown in responses. */
  id: string;
  path: string;
  architecture: string;
  vocabSize: number;
  /** Width of the pooled vector. */
  hidden: number;
  /** The most tokens one input may have (one forward pass holds a whole input). */
  contextSize: number;
  pooling: Pooling;
  /** With pooling 'rank': a sequence classifier (an encoder's head) or a generative reranker (a decoder's yes/no logits). */
  reranker?: 'classifier' | 'generative';
}

/** One input: its tokens, the columns kept (dimensions) and the norm (embd_normalize). */
export interface EmbedInput {
  tokens: number[];
  dims: number;
  normalize: number;
}

/** Thrown (rejected) when a request waited longer than the embedder's timeout. */
export class EmbedTimeoutError extends Error {
  constructor(readonly ms: number) {
    super(`the embedding request timed out after ${ms} ms`);
  }
}

export interface EmbedderOptions {
  modelDir: string;
  alias?: string;
  /** Tokens per forward pass, and so the longest input (llama-server's physical batch); default 512. */
  batchSize?: number;
  /** Sequences per forward pass; default 32. */
  maxSeqs?: number;
  /** Requests that may wait; default 64. */
  maxQueue?: number;
  /** A request not finished this long after it queued is rejected with EmbedTimeoutError; default 600 s. */
  timeoutMs?: number;
  /** --pooling; default the checkpoint's sentence-transformers config, else the family's convention. */
  pooling?: Pooling;
  backend?: string;
  quietDawn?: boolean;
  /** An already opened device to load onto (a second model beside a chat model), instead of opening one. */
  gpu?: Gpu;
  log?: (line: string) => void;
}

const EMBEDDER_DEFAULTS = { batchSize: 512, maxSeqs: 32, maxQueue: 64, timeoutMs: 600_000 } as const;

export async function loadEmbedder(options: EmbedderOptions): Promise<Embedder> {
  const dir = resolve(options.modelDir);
  const cfg = readModelConfig(dir);
  const batchSize = options.batchSize ?? EMBEDDER_DEFAULTS.batchSize;
  const contextSize = Math.min(batchSize, cfg.maxPositions);
  const maxSeqs = options.maxSeqs ?? EMBEDDER_DEFAULTS.maxSeqs;
  const pooling = options.pooling ?? checkpointPooling(dir) ?? familyPooling(cfg.modelType);
  const gpu = options.gpu ?? (await openGpu((options.backend ?? 'auto') as Backend, { quietDawn: options.quietDawn }));
  if (!options.gpu) options.log?.(`adapter ${gpu.description}`);
  const tokenizer = await TextTokenizer.load(dir);
  const encoder = ENCODERS.has(cfg.modelType);
  const generative = pooling === 'rank' && !encoder;
  const model = await loadModel(gpu, dir, {
    rankTokens: generative ? { yes: singleToken(tokenizer, 'yes'), no: singleToken(tokenizer, 'no') } : undefined,
    maxTokens: contextSize,
    maxSeqs,
    // Every sequence of a pass starts a fresh block.
    kvTokens: contextSize + maxSeqs * BLOCK_SIZE,
    maxContext: contextSize,
    blockSize: BLOCK_SIZE,
    // One pass's transient keys and values: kept at full precision, as an encoder computes them.
    kvTypes: { k: 'f32', v: 'f32' },
    pooling,
  });
  const info: EmbedderInfo = {
    id: options.alias ?? basename(dir), path: dir, architecture: cfg.modelType, vocabSize: cfg.vocab, hidden: cfg.hidden, contextSize, pooling,
    ...(pooling === 'rank' ? { reranker: generative ? 'generative' as const : 'classifier' as const } : {}),
  };
  options.log?.(info.reranker
    ? `reranker ${info.id} (${info.architecture}, ${model.weightFormat}, ${info.reranker === 'generative' ? 'generative: scores P(yes) of its yes/no answer' : 'sequence classifier'}, query and document up to ${contextSize} tokens) from ${dir}`
    : `embedding model ${info.id} (${info.architecture}, ${model.weightFormat}, ${pooling} pooling, ${info.hidden} dims, inputs up to ${contextSize} tokens) from ${dir}`);
  return new Embedder(info, tokenizer, model, {
    maxQueue: options.maxQueue ?? EMBEDDER_DEFAULTS.maxQueue,
    timeoutMs: options.timeoutMs ?? EMBEDDER_DEFAULTS.timeoutMs,
  }, options.gpu ? () => {} : () => gpu.device.destroy(), gpu.description);
}

/** The one token `text` encodes to (a generative reranker's answer words). */
function singleToken(tokenizer: TextTokenizer, text: string): number {
  const ids = tokenizer.encode(text, false);
  if (ids.length !== 1) throw new Error(`a generative reranker answers "yes" or "no", but "${text}" is ${ids.length} tokens in this tokenizer`);
  return ids[0]!;
}

/**
 * sentence-transformers' pooling for the checkpoint: modules.json names the Pooling
 * module's folder (default 1_Pooling), whose config.json sets one pooling_mode_* flag.
 */
export function checkpointPooling(dir: string): Pooling | undefined {
  let folder = '1_Pooling';
  const modules = join(dir, 'modules.json');
  if (existsSync(modules)) {
    const list = JSON.parse(readFileSync(modules, 'utf8')) as Array<{ type?: string; path?: string }>;
    const entry = list.find((m) => m.type?.endsWith('.Pooling'));
    if (!entry) return undefined;
    folder = entry.path ?? folder;
  }
  const file = join(dir, folder, 'config.json');
  if (!existsSync(file)) return undefined;
  const c = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
  if (c.pooling_mode_cls_token === true) return 'cls';
  if (c.pooling_mode_lasttoken === true) return 'last';
  if (c.pooling_mode_mean_tokens === true) return 'mean';
  throw new Error(`${file}: none of the pooling modes this server has (pooling_mode_cls_token, pooling_mode_mean_tokens, pooling_mode_lasttoken) is set; pass --pooling`);
}

/** A family's pooling where the checkpoint names none: encoders their first token ([CLS], transformers' pooler), decoders their last. */
function familyPooling(modelType: string): Pooling {
  return ENCODERS.has(modelType) ? 'cls' : 'last';
}

export class Embedder {
  private readonly jobs: JobQueue<EmbedInput[], Float32Array[]>;
  private readonly staging: GPUBuffer;

  constructor(
    readonly info: EmbedderInfo,
    readonly tokenizer: TextTokenizer,
    private readonly model: LoadedModel,
    limits: { maxQueue: number; timeoutMs: number },
    private readonly release: () => void,
    /** The adapter, e.g. "llvmpipe (LLVM 15, 256 bits) via opengles". */
    readonly adapterDescription: string,
  ) {
    this.jobs = new JobQueue({ capacity: limits.maxQueue, timeoutMs: limits.timeoutMs, timeoutError: (ms) => new EmbedTimeoutError(ms), drain: () => this.drain() });
    this.staging = model.ops.gpu.device.createBuffer({
      label: 'pooled_readback',
      size: model.maxSeqs * model.pooled!.width * 4,
      usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
    });
  }

  /** The model's GPU memory. */
  memory(): EngineMemory {
    return modelMemory([this.model]);
  }

  /** Requests waiting or running. */
  get pending(): number {
    return this.jobs.pending;
  }

  /**
   * The inputs' pooled, normalised vectors (each `dims` long), in input order. Inputs must
   * hold 1 .. info.contextSize tokens, ids below the vocabulary size (callers check and
   * answer 400). Throws QueueFullError synchronously when the queue is full; rejects with
   * EmbedTimeoutError after the timeout.
   */
  async embed(inputs: EmbedInput[]): Promise<Float32Array[]> {
    for (const input of inputs) {
      if (input.tokens.length < 1 || input.tokens.length > this.info.contextSize) throw new Error(`an input of ${input.tokens.length} tokens (1 .. ${this.info.contextSize})`);
      if (input.dims < 1 || input.dims > this.info.hidden) throw new Error(`dims ${input.dims} outside 1 .. ${this.info.hidden}`);
    }
    if (inputs.length === 0) return [];
    return this.jobs.push(inputs);
  }

  /**
   * A reranker's (pooling 'rank') relevance logits, one per input: each input is a query
   * and document pair as the model's tokenizer joins them. Limits and errors as embed().
   */
  async rank(inputs: number[][]): Promise<number[]> {
    if (this.info.pooling !== 'rank') throw new Error(`${this.info.id} is not loaded as a reranker`);
    const out = await this.embed(inputs.map((tokens) => ({ tokens, dims: 1, normalize: -1 })));
    return out.map((v) => v[0]!);
  }

  async close(): Promise<void> {
    await this.jobs.close();
    this.release();
  }

  /** Runs every queued job's inputs, longest first, in passes as full as the limits allow. */
  private async drain(): Promise<void> {
    const jobs = [...this.jobs.waiting];
    const results = new Map(jobs.map((job) => [job, { vectors: new Array<Float32Array>(job.request.length), left: job.request.length }]));
    const items = jobs.flatMap((job) => job.request.map((input, index) => ({ job, input, index })));
    items.sort((a, b) => b.input.tokens.length - a.input.tokens.length);
    const { maxTokens, maxSeqs } = this.model;
    let at = 0;
    while (at < items.length) {
      let tokens = 0;
      let end = at;
      while (end < items.length && end - at < maxSeqs && tokens + items[end]!.input.tokens.length <= maxTokens) tokens += items[end++]!.input.tokens.length;
      const pass = items.slice(at, end).filter((it) => !it.job.done);
      at = end;
      if (pass.length === 0) continue;
      let vectors: Float32Array[];
      try {
        vectors = await this.run(pass.map((it) => it.input));
      } catch (e) {
        for (const it of pass) this.jobs.finish(it.job, e instanceof Error ? e : new Error(String(e)));
        continue;
      }
      pass.forEach((it, i) => {
        const r = results.get(it.job)!;
        r.vectors[it.index] = vectors[i]!;
        if (--r.left === 0) this.jobs.finish(it.job, undefined, r.vectors);
      });
    }
  }

  /** One forward pass over `inputs` (fitting the pass's limits); their pooled vectors. */
  private async run(inputs: EmbedInput[]): Promise<Float32Array[]> {
    const { model } = this;
    const { meta, ops } = model;
    const queue = ops.gpu.device.queue;
    const n = inputs.reduce((s, x) => s + x.tokens.length, 0);
    const tokens = new Uint32Array(n);
    const pos = new Uint32Array(n);
    const tableOf = new Uint32Array(n);
    const keyEnd = new Uint32Array(n);
    const seqLast = new Uint32Array(inputs.length);
    const tables: number[] = [];
    let t = 0;
    let block = 0;
    inputs.forEach((input, s) => {
      const blocks = Math.ceil(input.tokens.length / BLOCK_SIZE);
      const offset = tables.length;
      for (let b = 0; b < blocks; b++) tables.push(block++);
      input.tokens.forEach((id, i) => {
        tokens[t] = id;
        pos[t] = i;
        keyEnd[t] = input.tokens.length - 1;
        tableOf[t++] = offset;
      });
      seqLast[s] = t - 1;
    });
    queue.writeBuffer(meta.tokens, 0, tokens);
    queue.writeBuffer(meta.tokenPos, 0, pos);
    queue.writeBuffer(meta.tokenTable, 0, tableOf);
    queue.writeBuffer(meta.blockTable, 0, Uint32Array.from(tables));
    queue.writeBuffer(meta.seqLast, 0, seqLast);
    queue.writeBuffer(model.pooled!.keyEnd, 0, keyEnd);
    const norms: SeqNorm[] = inputs.map((x) => ({ dims: x.dims, p: x.normalize }));
    queue.writeBuffer(model.pooled!.norms, 0, packSeqNorms(norms));
    const shape = { tokens: n, seqs: inputs.length, bias: 0 };
    ops.writeStep(shape);
    const width = model.pooled!.width;
    await model.program.submit(ops.gpu, shape, { finish: (encoder) => encoder.copyBufferToBuffer(model.pooled!.out, 0, this.staging, 0, inputs.length * width * 4) });
    const data = new Float32Array(await mapRead(this.staging), 0, inputs.length * width);
    return inputs.map((x, s) => data.slice(s * width, s * width + x.dims));
  }
}
