// A loaded decoder model on the GPU: its weights, activation and KV buffers, and the
// forward pass recorded once. The engine fills the batch metadata and replays it.
import type { Gpu } from '../runtime/gpu.js';
import { isAffine } from '../runtime/kernel-source.js';
import { BIAS_ENTRY_BYTES, MAX_LOGIT_BIAS_TOKENS, MAX_TOP_LOGPROBS, maskWords, SEQ_PARAMS_BYTES } from '../runtime/ops/sampling.js';
import { Ops, type BatchMeta } from '../runtime/ops.js';
import { ShaderWarmer, warmerHelps } from '../runtime/shader-warmer.js';
import { SEQ_NORM_BYTES, type Pooling } from '../runtime/ops/pooling.js';
import type { Program } from '../runtime/program.js';
import { kvCacheTexture, storageBuffer, type GpuWeight } from '../runtime/tensors.js';
import { Checkpoint, loadMatrix, loadVector, type MatrixSource, type VectorSource } from './checkpoint.js';
import type { ConfigReader, ModelConfig, Rope } from './config.js';
import { readFamilyConfig } from './registry.js';
import { ropeAttentionFactor, ropeInvFreq } from './rope.js';

/** Buffers for one pass of up to maxTokens tokens, reused by every layer. */
export interface Activations {
  h: GPUBuffer;
  /** The normed residual stream, where a linear layer cannot fuse its norm (LinearNorm). */
  xn: GPUBuffer;
  q: GPUBuffer;
  k: GPUBuffer;
  v: GPUBuffer;
  /** May share the MLP's gate buffer (live from attention to o_proj). */
  attn: GPUBuffer;
  /** silu(gate) * up: the MLP's hidden activations (Ops.gatedLinear). */
  gate: GPUBuffer;
  /** The up projection, where the SwiGLU runs as its own kernel. */
  up: GPUBuffer;
  headIn: GPUBuffer;
  logits: GPUBuffer;
}

export interface KvCache {
  blockSize: number;
  blocks: number;
  /** Per layer (tensors.ts kvCacheTexture). */
  k: GPUTexture[];
  v: GPUTexture[];
}

/** One RoPE's tables as Ops.attention takes them (RopeOptions). */
export interface RopeTables {
  rotaryDim: number;
  invFreq: GPUBuffer;
  mscale: number;
}

/** What a family's forward pass is built from. */
export interface BuildContext {
  ops: Ops;
  cfg: ModelConfig;
  /**
   * Loads `<prefix>.weight` (or a slice of its rows) in its stored format, checking its
   * shape; several stack their rows into one weight. Names are the family's (Family.layouts
   * maps them to the checkpoint's) here and in vector and has.
   */
  matrix(...sources: MatrixSource[]): GpuWeight;
  /** A GLU's gate and up matrices as one weight for Ops.gatedLinear (loadMatrix `glu`). */
  gluMatrix(gate: MatrixSource, up: MatrixSource): GpuWeight;
  /** Loads an f32 vector tensor, checking its length; several concatenate into one buffer; `shift` is added to each value. */
  vector(sources: VectorSource | VectorSource[], shift?: number): GPUBuffer;
  has(name: string): boolean;
  /** The tables of a RoPE (cached: layers that share one share its buffer). */
  rope(rope: Rope): RopeTables;
  /** A [max tokens, width] f32 buffer for a family's own intermediate values (cached by label). */
  scratch(label: string, width: number): GPUBuffer;
  act: Activations;
  kv: KvCache;
  meta: BatchMeta;
  /** An embedding model's output: the head pools and normalises instead of sampling (layers.ts head). */
  pooled?: PooledOutput;
}

/**
 * Where an embedding model's head leaves one vector per sequence: out [maxSeqs, hidden],
 * pooled by `mode` and normalised in place by norms [maxSeqs] (ops.ts SeqNorm); and what
 * the pass's writer fills for an encoder.
 */
export interface PooledOutput {
  mode: Pooling;
  /** Values per sequence in out: hidden, or a reranker's one score (set by the family). */
  width: number;
  out: GPUBuffer;
  norms: GPUBuffer;
  /** [maxTokens] u32: each token's sequence's last position, for an encoder's bidirectional attention (Ops.attention keyEnd). */
  keyEnd: GPUBuffer;
  /** A generative reranker's answer tokens (LoadOptions.rankTokens). */
  rankTokens?: RankTokens;
}

/** The "yes" and "no" token ids whose logits a generative reranker (Qwen3-Reranker) compares. */
export interface RankTokens {
  yes: number;
  no: number;
}

/**
 * An architecture family (src/models/<family>.ts): configure reads and checks the
 * config.json fields the family uses beyond ModelConfig's (refusing values it cannot
 * honour) and returns the builder of its forward pass, which names its tensors as the
 * family's plain checkpoints do; `layouts` lists where other checkpoints keep them.
 */
export interface Family {
  name: string;
  configure(c: ConfigReader, cfg: ModelConfig): (ctx: BuildContext) => Program;
  layouts?: TensorLayout[];
}

/**
 * Where a checkpoint keeps a family's tensors: rewrites of a name's leading part, [the
 * builder's, the checkpoint's], the first that matches applying. A layout applies to a
 * checkpoint that holds a tensor under its first rewrite's checkpoint prefix; the family's
 * tensors are then those under its rewrites' checkpoint prefixes (a multimodal checkpoint's
 * vision tower lies outside).
 */
export type TensorLayout = ReadonlyArray<readonly [string, string]>;

export interface CheckpointNames {
  /** The checkpoint's name for a name the builder uses. */
  of(name: string): string;
  /** Whether checkpoint tensor `name` is the family's (under the layout that applies; all where none does). */
  isFamily(name: string): boolean;
}

/** The names of a family's tensors in a checkpoint holding `names`: by the first layout that applies, else unchanged. */
export function checkpointNames(family: Family, names: Iterable<string>): CheckpointNames {
  const all = [...names];
  const layout = family.layouts?.find(([[, to]]) => all.some((n) => n.startsWith(to)));
  return {
    of: (name) => {
      const rewrite = layout?.find(([from]) => name.startsWith(from));
      return rewrite ? rewrite[1] + name.slice(rewrite[0].length) : name;
    },
    isFamily: (name) => !layout || layout.some(([, to]) => name.startsWith(to)),
  };
}

export interface LoadedModel {
  cfg: ModelConfig;
  ops: Ops;
  program: Program;
  meta: BatchMeta;
  kv: KvCache;
  /** [maxSeqs, vocab] logits of the last pass; read only by diagnostics and tests. */
  logits: GPUBuffer;
  maxTokens: number;
  maxSeqs: number;
  /** Block-table capacity in entries. */
  maxTableEntries: number;
  /** The matrices' stored formats, e.g. "bf16" or "q4 g64" (several: comma-separated). */
  weightFormat: string;
  /** Loaded as an embedding model (LoadOptions.pooling). */
  pooled?: PooledOutput;
}

export interface LoadOptions {
  /** Tokens per forward pass (the prefill chunk). */
  maxTokens: number;
  /** Sequences per forward pass. */
  maxSeqs: number;
  /** KV capacity in tokens across all sequences. */
  kvTokens: number;
  /** Longest sequence in tokens (sizes the block table). */
  maxContext: number;
  blockSize: number;
  /** Load as an embedding model: the head pools the final hidden states (no LM head, no sampling). */
  pooling?: Pooling;
  /** With pooling 'rank' on a decoder: its answer tokens. */
  rankTokens?: RankTokens;
  /** Hears how far the load has come, as it goes (synchronously: the load blocks the event loop). */
  onProgress?: (progress: LoadProgress) => void;
  /**
   * Compile the kernels in a second process while the weights load, where that helps
   * (runtime/shader-warmer.ts warmerHelps); the pipelines settle at the first warm-up
   * (ForwardRunner.warmUp).
   */
  warmShaders?: boolean;
}

/** Tensors uploaded of those in the checkpoint, and pipelines compiled so far (warm-up adds more). */
export interface LoadProgress {
  tensors: number;
  tensorsTotal: number;
  pipelines: number;
}

export async function loadModel(gpu: Gpu, dir: string, options: LoadOptions): Promise<LoadedModel> {
  const { cfg, family, build } = readFamilyConfig(dir);
  const device = gpu.device;
  const progress: LoadProgress = { tensors: 0, tensorsTotal: 0, pipelines: 0 };
  const ckpt = new Checkpoint(dir, (done) => {
    progress.tensors = done;
    options.onProgress?.(progress);
  });
  const names = checkpointNames(family, ckpt.names());
  progress.tensorsTotal = [...ckpt.names()].filter(names.isFamily).length;
  const ops = new Ops(gpu);
  ops.pipelines.onCompile = (count) => {
    progress.pipelines = count;
    options.onProgress?.(progress);
  };
  if (options.warmShaders && warmerHelps(gpu.isCpu)) ops.pipelines.warmer = new ShaderWarmer(gpu.backend);
  const f32 = (n: number, label: string) => storageBuffer(device, n * 4, label);
  const u32 = f32;
  const T = options.maxTokens;
  const S = options.maxSeqs;
  const qDim = cfg.heads * cfg.headDim;
  const kvDim = cfg.kvHeads * cfg.headDim;
  // The MLP's buffers are dead while attention runs, so attention's short-lived buffers
  // borrow them where they fit (host memory on a software adapter counts toward RSS).
  const gate = f32(T * cfg.intermediate, 'gate');
  const up = f32(T * cfg.intermediate, 'up');
  const borrow = (from: GPUBuffer, floats: number, label: string) => (floats * 4 <= from.size ? from : f32(floats, label));
  const act: Activations = {
    h: f32(T * cfg.hidden, 'h'),
    xn: f32(T * cfg.hidden, 'xn'),
    q: f32(T * qDim, 'q'),
    k: f32(T * kvDim, 'k'),
    v: f32(T * kvDim, 'v'),
    attn: borrow(gate, T * qDim, 'attn'),
    gate,
    up,
    headIn: f32(S * cfg.hidden, 'head_in'),
    // An embedding model computes no logits.
    logits: f32(options.pooling ? 4 : S * cfg.vocab, 'logits'),
  };
  // Quantized linear layers read their input through one shared texture: size it for the widest.
  if (cfg.quantization) ops.reserveMatmulInput(Math.max(act.h.size, act.attn.size, act.gate.size, act.headIn.size));
  const blocks = Math.ceil(options.kvTokens / options.blockSize);
  const kvTexels = (blocks * options.blockSize * kvDim) / 4;
  const kv: KvCache = {
    blockSize: options.blockSize,
    blocks,
    k: Array.from({ length: cfg.layers }, (_, i) => kvCacheTexture(device, kvTexels, `k_cache.${i}`)),
    v: Array.from({ length: cfg.layers }, (_, i) => kvCacheTexture(device, kvTexels, `v_cache.${i}`)),
  };
  const maxTableEntries = S * Math.ceil(options.maxContext / options.blockSize);
  // Penalties name at most every token of each sequence's context, logit_bias at most
  // MAX_LOGIT_BIAS_TOKENS more.
  const biasCapacity = S * (options.maxContext + MAX_LOGIT_BIAS_TOKENS);
  const meta: BatchMeta = {
    tokens: u32(T, 'tokens'),
    tokenPos: u32(T, 'token_pos'),
    tokenTable: u32(T, 'token_table'),
    blockTable: u32(maxTableEntries, 'block_table'),
    seqLast: u32(S, 'seq_last'),
    seqParams: storageBuffer(device, S * SEQ_PARAMS_BYTES, 'seq_params'),
    sampled: u32(S, 'sampled'),
    masks: u32(S * maskWords(cfg.vocab), 'masks'),
    logprobs: u32(S * 2 * (1 + MAX_TOP_LOGPROBS), 'logprobs'),
    biasEntries: storageBuffer(device, biasCapacity * BIAS_ENTRY_BYTES, 'bias_entries'),
    biasCapacity,
  };
  const pooled: PooledOutput | undefined = options.pooling
    ? { mode: options.pooling, width: options.pooling === 'rank' ? 1 : cfg.hidden, out: f32(S * cfg.hidden, 'pooled'), norms: storageBuffer(device, S * SEQ_NORM_BYTES, 'seq_norms'), keyEnd: u32(T, 'key_end'), rankTokens: options.rankTokens }
    : undefined;
  const ropes = new Map<string, RopeTables>();
  const scratch = new Map<string, GPUBuffer>();
  // Tied embeddings are both the embedding table and the LM head: upload once.
  const matrices = new Map<string, GpuWeight>();
  const formats = new Set<string>();
  const loaded = (w: GpuWeight) => {
    formats.add(isAffine(w.format) ? (w.stored ? `${w.stored} (as ${w.format} g${w.groupSize})` : `${w.format} g${w.groupSize}`) : w.format);
    return w;
  };
  const inCheckpoint = (s: MatrixSource): MatrixSource => ({ ...s, prefix: names.of(s.prefix) });
  const ctx: BuildContext = {
    ops,
    cfg,
    matrix: (...sources) => {
      const key = JSON.stringify(sources);
      let w = matrices.get(key);
      if (!w) matrices.set(key, (w = loaded(loadMatrix(device, gpu, ckpt, sources.map(inCheckpoint), cfg.quantization))));
      return w;
    },
    gluMatrix: (gate, up) => loaded(loadMatrix(device, gpu, ckpt, [gate, up].map(inCheckpoint), cfg.quantization, { glu: true })),
    vector: (sources, shift) => loadVector(device, ckpt, [sources].flat().map((s) => ({ ...s, name: names.of(s.name) })), shift),
    has: (name) => ckpt.has(names.of(name)),
    rope: (r) => {
      const key = JSON.stringify(r);
      let tables = ropes.get(key);
      if (!tables) {
        const rc = { ...r, rotaryDim: cfg.rotaryDim };
        // longrope picks its factors by the context the engine serves.
        const data = ropeInvFreq(rc, options.maxContext);
        const invFreq = f32(Math.max(data.length, 4), 'inv_freq');
        device.queue.writeBuffer(invFreq, 0, data);
        ropes.set(key, (tables = { rotaryDim: cfg.rotaryDim, invFreq, mscale: ropeAttentionFactor(rc) }));
      }
      return tables;
    },
    scratch: (label, width) => {
      let b = scratch.get(label);
      if (!b) scratch.set(label, (b = f32(T * width, label)));
      return b;
    },
    act,
    kv,
    meta,
    pooled,
  };
  // Shader and binding mistakes surface here, at load, rather than as silent garbage.
  device.pushErrorScope('validation');
  let program: Program;
  try {
    program = build(ctx);
  } catch (err) {
    ops.pipelines.warmer?.close();
    throw err;
  } finally {
    ckpt.close();
  }
  const error = await device.popErrorScope();
  if (error) {
    ops.pipelines.warmer?.close();
    throw new Error(`building the ${family.name} forward pass: ${error.message}`);
  }
  return { cfg, ops, program, meta, kv, logits: act.logits, maxTokens: T, maxSeqs: S, maxTableEntries, weightFormat: [...formats].join(', '), pooled };
}
