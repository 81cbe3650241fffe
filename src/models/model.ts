// A loaded decoder model on the GPU: its weights, activation and KV buffers, and the
// forward pass recorded once. The engine fills the batch metadata and replays it.
import { textureBytes, type Gpu } from '../runtime/gpu.js';
import { isAffine } from '../runtime/kernel-source.js';
import { BIAS_ENTRY_BYTES, MAX_LOGIT_BIAS_TOKENS, MAX_TOP_LOGPROBS, maskWords, SEQ_PARAMS_BYTES } from '../runtime/ops/sampling.js';
import { Ops, type BatchMeta } from '../runtime/ops.js';
import { SEQ_NORM_BYTES, type Pooling } from '../runtime/ops/pooling.js';
import type { Program } from '../runtime/program.js';
import type { KvLayer } from '../runtime/ops/attention.js';
import { KV_TEXEL_BYTES, KV_TEXTURE_WIDTH, kvCacheTexture, kvTextureRows, partWeight, storageBuffer, type GpuWeight, type KvType } from '../runtime/tensors.js';
import { Checkpoint, loadMatrix, loadVector, type MatrixSource, type VectorSource } from './checkpoint.js';
import type { ConfigReader, LayerKv, ModelConfig, Rope } from './config.js';
import { readFamilyConfig } from './registry.js';
import { listCheckpointTensors } from './safetensors.js';
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

/** The keys' and values' types in the KV cache. */
export interface KvTypes {
  k: KvType;
  v: KvType;
}

/**
 * The KV cache's textures, per layer (undefined for a layer that keeps no KV). A paged
 * layer holds `blocks` blocks of blockSize positions now, up to maxBlocks as the engine
 * grows the pool (engine/kv-cache.ts KvRows.resize replaces the paged layers' textures); a
 * ring layer holds its ring of every slot, allocated once (KvLayer.ring).
 */
export interface KvCache {
  blockSize: number;
  blocks: number;
  maxBlocks: number;
  /** Slots a ring layer holds a ring for (0 without ring layers). */
  ringSlots: number;
  types: KvTypes;
  /** Values of one position's keys (or values) in one layer: kvHeads * headDim. */
  kvDim: number;
  /** Bytes of one position's keys and values across the paged layers. */
  tokenBytes: number;
  layers: Array<KvLayer | undefined>;
}

/**
 * Where a layer keeps its KV (cfg.layerKv): `ring` positions per slot for a sliding-window
 * layer whose ring is shorter than the context, 0 for paged blocks of every position, null
 * for a layer that keeps none.
 */
export type KvPlacement = number | null;

/** What sizes the rings: the slots, a pass's most tokens per sequence (the prefill chunk), a sequence's longest context. */
export interface RingOptions {
  slots: number;
  chunk: number;
  maxContext: number;
}

/**
 * Each layer's KV placement. A sliding-window layer of window w keeps a ring of w + chunk - 1
 * positions per slot (kv_cache.wgsl): a pass writes at most `chunk` positions of a sequence
 * (a speculative verify round's drafts included) before its first token reads back w - 1
 * before them. Without `rings` (or where the ring would not be shorter than the context)
 * a layer is paged.
 */
export function kvPlacements(layerKv: readonly LayerKv[], rings?: RingOptions): KvPlacement[] {
  return layerKv.map((l) => {
    if (l === 'none') return null;
    if (l === 'full' || !rings) return 0;
    const ring = l.window + rings.chunk - 1;
    return ring < rings.maxContext ? ring : 0;
  });
}

/** Bytes of one position's keys and values in one layer. */
function kvRowBytes(cfg: Pick<ModelConfig, 'kvHeads' | 'headDim'>, types: KvTypes): number {
  const bytes = (t: KvType) => KV_TEXEL_BYTES[t] / 4;
  return cfg.kvHeads * cfg.headDim * (bytes(types.k) + bytes(types.v));
}

/** Bytes of the textures of `layers` layers holding `rows` positions each. */
function kvTextureBytes(layers: number, rows: number, kvDim: number, types: KvTypes): number {
  return layers * KV_TEXTURE_WIDTH * kvTextureRows((rows * kvDim) / 4) * (KV_TEXEL_BYTES[types.k] + KV_TEXEL_BYTES[types.v]);
}

/** Bytes of a KV cache's textures when its paged layers hold `blocks` blocks (default: as many as now). */
export function kvCacheBytes(kv: KvCache, blocks = kv.blocks): number {
  const layers = kv.layers.filter((l): l is KvLayer => l !== undefined);
  const paged = layers.filter((l) => !l.ring).length;
  const rings = layers.reduce((n, l) => n + (l.ring ? kvTextureBytes(1, kv.ringSlots * l.ring, kv.kvDim, kv.types) : 0), 0);
  return kvTextureBytes(paged, blocks * kv.blockSize, kv.kvDim, kv.types) + rings;
}

/** Bytes of the ring layers' textures of a model of cfg's shape with `placements`: a fixed cost, whatever the sequences hold. */
export function kvRingBytes(cfg: Pick<ModelConfig, 'kvHeads' | 'headDim'>, types: KvTypes, placements: readonly KvPlacement[], slots: number): number {
  return placements.reduce<number>((n, ring) => n + (ring ? kvTextureBytes(1, slots * ring, cfg.kvHeads * cfg.headDim, types) : 0), 0);
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
  /**
   * A mixture of experts' matrices stacked expert after expert, each expert's sources in
   * order (gate then up, say), every part of the weight holding whole experts (Ops.moeMatmul).
   */
  experts(perExpert: MatrixSource[][]): GpuWeight;
  /** A GLU's gate and up matrices as one weight for Ops.gatedLinear (loadMatrix `glu`). */
  gluMatrix(gate: MatrixSource, up: MatrixSource): GpuWeight;
  /** Loads an f32 vector tensor, checking its length; several concatenate into one buffer; `shift` is added to each value. */
  vector(sources: VectorSource | VectorSource[], shift?: number): GPUBuffer;
  has(name: string): boolean;
  /** The tables of a RoPE (cached: layers that share one share its buffer). */
  rope(rope: Rope): RopeTables;
  /**
   * A [rows, width] buffer of 32-bit values for a family's or a block's own intermediate
   * values, rows by default the pass's max tokens (cached by label: blocks that run one
   * after another share it).
   */
  scratch(label: string, width: number, rows?: number): GPUBuffer;
  /**
   * A recurrent layer's state, `floats` 32-bit values per state slot (one slot per engine
   * slot), zeroed; the engine copies a slot's values to fork a sequence (LoadedModel.states).
   */
  state(label: string, floats: number): GPUBuffer;
  act: Activations;
  kv: KvCache;
  meta: BatchMeta;
  /** An embedding model's output: the head pools and normalises instead of sampling (layers.ts head). */
  pooled?: PooledOutput;
  /** The buffers through which a vision-language family takes images' soft tokens (made on first call). */
  imageInputs(): ImageInputs;
  /** [maxTokens, 3] u32: each token's multimodal RoPE positions (t, h, w), which the engine fills each pass (made on first call). */
  mropePositions(): GPUBuffer;
}

/**
 * Where the engine puts a pass's image soft tokens for a vision-language family: each
 * image token's embedding row, the flags of the tokens that take one, and how far each
 * token attends (its own position, or its image's last: bidirectional within an image).
 */
export interface ImageInputs {
  /** [maxTokens, hidden] f32, at the rows of the pass's image tokens. */
  rows: GPUBuffer;
  /** [maxTokens] u32: 1 for a token whose embedding is its row of `rows`. */
  flags: GPUBuffer;
  /** [maxTokens] u32: the last position each token attends to (Ops.attention keyEnd). */
  keyEnd: GPUBuffer;
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
  /** Bytes of the weights on the GPU: matrices and vectors as uploaded. */
  weightBytes: number;
  /** Loaded as an embedding model (LoadOptions.pooling). */
  pooled?: PooledOutput;
  /** A vision-language family's image inputs, which the engine fills each pass. */
  images?: ImageInputs;
  /** A multimodal-RoPE family's positions (BuildContext.mropePositions), which the engine fills each pass. */
  mropePositions?: GPUBuffer;
  /** The recurrent layers' states (BuildContext.state), each [stateSlots, slotBytes]; none for a transformer. */
  states: RecurrentState[];
}

/** One recurrent layer's state buffer: slot s holds bytes [s * slotBytes, (s + 1) * slotBytes). */
export interface RecurrentState {
  buffer: GPUBuffer;
  slotBytes: number;
}

export interface LoadOptions {
  /** Tokens per forward pass (the prefill chunk). */
  maxTokens: number;
  /** Sequences per forward pass. */
  maxSeqs: number;
  /** KV capacity in tokens across all sequences: the most the pool may grow to. */
  kvTokens: number;
  /** KV tokens allocated at load (default kvTokens), rounded up to whole blocks. */
  kvInitialTokens?: number;
  /** The KV cache's types. */
  kvTypes: KvTypes;
  /** Longest sequence in tokens (sizes the block table). */
  maxContext: number;
  blockSize: number;
  /** Recurrent state slots (the engine's slots; SeqChunk.state). Default maxSeqs. */
  stateSlots?: number;
  /** Sliding-window layers keep a ring per slot of the engine's `ringSlots` slots (kvPlacements); absent: every position, paged. */
  ringSlots?: number;
  /** Load as an embedding model: the head pools the final hidden states (no LM head, no sampling). */
  pooling?: Pooling;
  /** With pooling 'rank' on a decoder: its answer tokens. */
  rankTokens?: RankTokens;
  /** Hears how far the load has come, as it goes (synchronously: the load blocks the event loop). */
  onProgress?: (progress: LoadProgress) => void;
}

/** Tensors uploaded of those in the checkpoint, and pipelines compiled so far (warm-up adds more). */
export interface LoadProgress {
  tensors: number;
  tensorsTotal: number;
  pipelines: number;
}

/** Bytes of one position's keys and values across the paged layers of a model of `cfg`'s shape with `placements`. */
export function kvTokenBytes(cfg: Pick<ModelConfig, 'kvHeads' | 'headDim'>, types: KvTypes, placements: readonly KvPlacement[]): number {
  return placements.filter((p) => p === 0).length * kvRowBytes(cfg, types);
}

/** A model's KV cache textures: `blocks` blocks per paged layer, a ring per slot per ring layer. */
function kvCache(device: GPUDevice, cfg: ModelConfig, placements: KvPlacement[], shape: Omit<KvCache, 'layers' | 'tokenBytes' | 'kvDim'>): KvCache {
  const kvDim = cfg.kvHeads * cfg.headDim;
  const layer = (i: number, ring: number): KvLayer => {
    const texels = ((ring ? shape.ringSlots * ring : shape.blocks * shape.blockSize) * kvDim) / 4;
    return {
      k: kvCacheTexture(device, texels, shape.types.k, `k_cache.${i}`),
      v: kvCacheTexture(device, texels, shape.types.v, `v_cache.${i}`),
      ...(ring ? { ring } : {}),
    };
  };
  return {
    ...shape,
    kvDim,
    tokenBytes: kvTokenBytes(cfg, shape.types, placements),
    layers: placements.map((ring, i) => (ring === null ? undefined : layer(i, ring))),
  };
}

/** Bytes of the family's tensors in checkpoint `dir`, as stored (a multimodal checkpoint's other towers left out). */
export function checkpointWeightBytes(dir: string): number {
  const { family } = readFamilyConfig(dir);
  const tensors = listCheckpointTensors(dir);
  const names = checkpointNames(family, tensors.keys());
  let bytes = 0;
  for (const [name, t] of tensors) if (names.isFamily(name)) bytes += t.info.data_offsets[1] - t.info.data_offsets[0];
  return bytes;
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
    // At least one uniform binding's worth, as the layers' inputs are: the LM head's decode
    // matvec then shares their pipeline (runtime/ops/linear.ts matvecInput).
    headIn: storageBuffer(device, Math.max(S * cfg.hidden * 4, gpu.maxUniformBinding), 'head_in'),
    // An embedding model computes no logits.
    logits: f32(options.pooling ? 4 : S * cfg.vocab, 'logits'),
  };
  // Quantized linear layers read their input through one shared texture: size it for the widest.
  if (cfg.quantization) ops.reserveMatmulInput(Math.max(act.h.size, act.attn.size, act.gate.size, act.headIn.size));
  const maxBlocks = Math.ceil(options.kvTokens / options.blockSize);
  const blocks = Math.min(maxBlocks, Math.ceil((options.kvInitialTokens ?? options.kvTokens) / options.blockSize));
  const ringSlots = options.ringSlots ?? 0;
  const placements = kvPlacements(cfg.layerKv, ringSlots > 0 ? { slots: ringSlots, chunk: T, maxContext: options.maxContext } : undefined);
  const kv = kvCache(device, cfg, placements, { blockSize: options.blockSize, blocks, maxBlocks, ringSlots, types: options.kvTypes });
  const maxTableEntries = S * Math.ceil(options.maxContext / options.blockSize);
  // Penalties name at most every token of each sequence's context, logit_bias at most
  // MAX_LOGIT_BIAS_TOKENS more.
  const biasCapacity = S * (options.maxContext + MAX_LOGIT_BIAS_TOKENS);
  const meta: BatchMeta = {
    tokens: u32(T, 'tokens'),
    tokenPos: u32(T, 'token_pos'),
    tokenTable: u32(T, 'token_table'),
    blockTable: u32(maxTableEntries, 'block_table'),
    tokenSlot: u32(T, 'token_slot'),
    seqLast: u32(S, 'seq_last'),
    seqParams: storageBuffer(device, S * SEQ_PARAMS_BYTES, 'seq_params'),
    sampled: u32(S, 'sampled'),
    masks: u32(S * maskWords(cfg.vocab), 'masks'),
    logprobs: u32(S * 2 * (1 + MAX_TOP_LOGPROBS), 'logprobs'),
    biasEntries: storageBuffer(device, biasCapacity * BIAS_ENTRY_BYTES, 'bias_entries'),
    biasCapacity,
    chunks: u32(4 * T, 'chunks'),
  };
  const pooled: PooledOutput | undefined = options.pooling
    ? { mode: options.pooling, width: options.pooling === 'rank' ? 1 : cfg.hidden, out: f32(S * cfg.hidden, 'pooled'), norms: storageBuffer(device, S * SEQ_NORM_BYTES, 'seq_norms'), keyEnd: u32(T, 'key_end'), rankTokens: options.rankTokens }
    : undefined;
  const ropes = new Map<string, RopeTables>();
  const scratch = new Map<string, GPUBuffer>();
  const states: RecurrentState[] = [];
  // Tied embeddings are both the embedding table and the LM head: upload once.
  const matrices = new Map<string, GpuWeight>();
  const formats = new Set<string>();
  let weightBytes = 0;
  const uploaded = <T extends GPUBuffer | GPUTexture>(data: T): T => {
    weightBytes += 'size' in data ? data.size : textureBytes(data);
    return data;
  };
  const loaded = (w: GpuWeight) => {
    for (const part of w.parts) {
      [part.data, part.affine].forEach((d) => d && uploaded(d));
      const p = partWeight(w, part);
      formats.add(isAffine(p.format) ? (w.stored ? `${w.stored} (as ${p.format} g${p.groupSize})` : `${p.format} g${p.groupSize}`) : p.format);
    }
    return w;
  };
  const inCheckpoint = (s: MatrixSource): MatrixSource => ({ ...s, prefix: names.of(s.prefix) });
  let images: ImageInputs | undefined;
  let mropePositions: GPUBuffer | undefined;
  const ctx: BuildContext = {
    ops,
    cfg,
    matrix: (...sources) => {
      const key = JSON.stringify(sources);
      let w = matrices.get(key);
      if (!w) matrices.set(key, (w = loaded(loadMatrix(device, gpu, ckpt, sources.map(inCheckpoint), cfg.quantization))));
      return w;
    },
    experts: (perExpert) => {
      const unit = perExpert[0]!.reduce((n, s) => n + (s.slice?.rows ?? s.rows), 0);
      return loaded(loadMatrix(device, gpu, ckpt, perExpert.flat().map(inCheckpoint), cfg.quantization, { unit }));
    },
    gluMatrix: (gate, up) => loaded(loadMatrix(device, gpu, ckpt, [gate, up].map(inCheckpoint), cfg.quantization, { glu: true })),
    vector: (sources, shift) => uploaded(loadVector(device, ckpt, [sources].flat().map((s) => ({ ...s, name: names.of(s.name) })), shift)),
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
    scratch: (label, width, rows = T) => {
      let b = scratch.get(label);
      if (!b) scratch.set(label, (b = f32(rows * width, label)));
      if (b.size < rows * width * 4) throw new Error(`scratch buffer ${label}: asked for ${rows * width * 4} bytes, made with ${b.size}`);
      return b;
    },
    state: (label, floats) => {
      const slotBytes = floats * 4;
      const buffer = storageBuffer(device, (options.stateSlots ?? S) * slotBytes, label);
      states.push({ buffer, slotBytes });
      return buffer;
    },
    imageInputs: () => (images ??= { rows: f32(T * cfg.hidden, 'image_rows'), flags: u32(T, 'image_flags'), keyEnd: u32(T, 'key_end') }),
    mropePositions: () => (mropePositions ??= u32(3 * T, 'mrope_positions')),
    act,
    kv,
    meta,
    pooled,
  };
  // Shader and binding mistakes surface here, at load, rather than as silent garbage.
  device.pushErrorScope('validation');
  const program = build(ctx);
  ckpt.close();
  const error = await device.popErrorScope();
  if (error) throw new Error(`building the ${family.name} forward pass: ${error.message}`);
  return { cfg, ops, program, meta, kv, logits: act.logits, maxTokens: T, maxSeqs: S, maxTableEntries, weightFormat: [...formats].join(', '), weightBytes, pooled, states, images, mropePositions };
}
