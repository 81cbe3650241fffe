// One function per kernel: binds buffers and static parameters once and returns the
// recorded dispatches. Shapes that change per step come from the step uniform.
import type { Gpu } from './gpu.js';
import { PipelineCache } from './pipelines.js';
import type { Dispatch, StepShape, Upload } from './program.js';
import { formatFile, isAffine, kernelEnum, kernelStruct, type Variant } from './kernel-source.js';
import { packArray, packStruct, type StructValues } from './wgsl-struct.js';
import { GLU_BLOCK_ROWS, KV_TEXTURE_WIDTH, PACKED_TEXTURE_WIDTH, PACKED_TILE_ROWS, storageBuffer, textureRows, uniformBuffer, type GpuWeight, type ScaleFormat, type WeightPart } from './tensors.js';

const ceil = (a: number, b: number) => Math.ceil(a / b);

/** A bind group's resources by the WGSL variable names they bind to. */
type Resources = Record<string, GPUBuffer | GPUBindingResource>;

/** Rows up to which a quantized linear layer reads its weights once per row (matvec). */
const MATVEC_MAX_ROWS = 2;
/**
 * Output rows per workgroup: matvec_q.wgsl's 16 invocations x R = 32, matmul_q.wgsl's 16 x
 * RR = 32 (matvec_q_workgroup.wgsl's is 16, two per 32-row block).
 */
const MATVEC_ROWS_PER_WORKGROUP = 16 * 32;
const MATMUL_ROWS_PER_WORKGROUP = 16 * 32;
/** Tokens per matmul_q tile (matmul_q.wgsl TT). */
const MATMUL_TILE_TOKENS = 4;
/**
 * Query rows per attention invocation: tokens in steps with a prefill chunk (attention.wgsl
 * TQ), and at most this many heads of one KV head in decode steps (HQ). More rows share
 * more key and value loads, and compile slower: past 3 the compile time grows steeply.
 */
const ATTENTION_GROUP = 3;
/** Texels per row of matmul_q's input texture (a power of two: the kernel shifts and masks). */
const MATMUL_INPUT_WIDTH = 1024;

export class Ops {
  readonly pipelines: PipelineCache;
  /** Written once per step: [n_tokens, n_seqs, n_bias]. */
  readonly step: GPUBuffer;
  private readonly dummy: GPUBuffer;
  /** Stand-ins for a linear layer's unused outputs (linear_out.wgsl): two, as writable bindings may not alias. */
  private readonly dummyOutputs: [GPUBuffer, GPUBuffer];
  /** matmul_q's input texture, shared by every quantized linear layer (Ops.matmulInput). */
  private inputTexture?: GPUTexture;
  private zeroBuffer?: GPUBuffer;

  constructor(readonly gpu: Gpu) {
    this.pipelines = new PipelineCache(gpu.device);
    this.step = gpu.device.createBuffer({ label: 'step', size: 16, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
    this.dummy = storageBuffer(gpu.device, 16, 'dummy');
    this.dummyOutputs = [storageBuffer(gpu.device, 16, 'dummy_y1'), storageBuffer(gpu.device, 16, 'dummy_y2')];
  }

  writeStep(shape: StepShape): void {
    this.gpu.device.queue.writeBuffer(this.step, 0, packStruct(kernelStruct('common', 'Step'), { n_tokens: shape.tokens, n_seqs: shape.seqs, n_bias: shape.bias }));
  }

  /** A uniform buffer of `struct Params` as kernel file `file` declares it, written by field name. */
  private params(file: string, values: StructValues): GPUBuffer {
    return uniformBuffer(this.gpu.device, packStruct(kernelStruct(file, 'Params'), values));
  }

  /** A bind group of `pipeline`: its params (p), the step uniform, and `resources` by the WGSL variable names they bind to. */
  private bind(label: string, pipeline: GPUComputePipeline, params: GPUBuffer, resources: Resources): GPUBindGroup {
    const entries = Object.entries({ p: params, step: this.step, ...resources }).map(([name, r]): GPUBindGroupEntry => ({
      binding: this.pipelines.binding(pipeline, name),
      resource: r instanceof GPUBuffer ? { buffer: r } : r,
    }));
    return this.gpu.device.createBindGroup({ label, layout: pipeline.getBindGroupLayout(0), entries });
  }

  /** A weight part's data (formats/*.wgsl w_data, or readers/affine_*.wgsl w_packed and w_affine). */
  private weightBindings(part: WeightPart): Resources {
    if (!part.affine) return { w_data: part.data as GPUBuffer };
    return { w_packed: (part.data as GPUTexture).createView(), w_affine: part.affine.createView() };
  }

  /** formats/affine.wgsl's override constants for a q4/q8 weight (none for a float one). */
  private weightConstants(w: GpuWeight): Record<string, number> {
    if (!isAffine(w.format)) return {};
    return {
      BITS: w.format === 'q4' ? 4 : 8,
      SCALE_FORMAT: SCALE_FORMAT_CODE[w.scaleFormat ?? 'f32'],
      PACKED_WIDTH: PACKED_TEXTURE_WIDTH,
      PACKED_TILE_ROWS,
    };
  }

  /** formats/affine.wgsl's variant values for a q4/q8 weight, read through storage textures with `storage` where WGSL allows them (affineRead). */
  private affineVariant(w: GpuWeight, storage: boolean): Variant {
    return { GROUP_SIZE: w.groupSize, W_READ: this.affineRead(storage) };
  }

  /** A kernel's variant values for reading a weight of any format (`#include "formats/${FORMAT}"`). */
  private weightVariant(w: GpuWeight): Variant {
    return { FORMAT: formatFile(w.format), ...(isAffine(w.format) ? this.affineVariant(w, false) : {}) };
  }

  /**
   * Y[m, :] (+)= X[m, :] W^T (+ bias). Rows are tokens, or sampling sequences with perSeq.
   * A weight stacked from several matrices (GpuWeight.segments) takes one output buffer per
   * source, in order: q/k/v or gate/up in one dispatch.
   * Quantized weights get two recorded kernels, and each step runs the one its row count
   * suits: a matvec for up to MATVEC_MAX_ROWS rows (decode: matvec_q, in the layout
   * measured fastest on llvmpipe, on a CPU adapter; matvec_q_workgroup's coalesced one on a
   * GPU), else matmul_q's register tiles of 32 rows x 4 tokens (prefill, batched decode),
   * which read X from a texture the rows are copied into first. Float weights use the generic
   * matmul with the format's loader.
   * With `norm`, X is the raw residual stream and the layer computes RMSNorm(X) W^T:
   * the matvecs fuse the norm into their input, the other kernels get a recorded
   * rmsnorm.wgsl dispatch before them (LinearNorm).
   */
  linear(label: string, w: GpuWeight, x: GPUBuffer, y: GPUBuffer | GPUBuffer[], opts: LinearOptions = {}): Dispatch[] {
    if (w.cols % 4 !== 0) throw new Error(`${label}: input width ${w.cols} is not a multiple of 4`);
    const outputs = Array.isArray(y) ? y : [y];
    // A gated weight's two matrices give one output, of half the rows.
    const segments = opts.glu ? [w.rows / 2] : (w.segments ?? [w.rows]);
    const outRows = segments.reduce((a, b) => a + b, 0);
    if (outputs.length !== segments.length || outputs.length > 3) throw new Error(`${label}: ${outputs.length} outputs for a weight stacked from ${segments.length} matrices (at most 3)`);
    if (opts.accumulate && outputs.length > 1) throw new Error(`${label}: accumulate into a stacked weight's outputs`);
    if (opts.glu) this.checkGlu(label, w, opts);
    // Where outputs 1 and 2 start among the output columns (outRows when absent).
    const split1 = segments.length > 1 ? segments[0]! : outRows;
    const split2 = segments.length > 2 ? segments[0]! + segments[1]! : outRows;
    const rows = (s: StepShape) => (opts.perSeq ? s.seqs : s.tokens);
    if (opts.norm && opts.perSeq) throw new Error(`${label}: norm does not combine with perSeq`);
    const matvec = (n: number) => isAffine(w.format) && n <= MATVEC_MAX_ROWS;
    // matvec_q applies the norm itself; the other kernels read X normed by rmsnorm.wgsl first,
    // in the steps that run them (linear_out.wgsl says why).
    const pre: Dispatch[] = [];
    let normed = x;
    if (opts.norm) {
      const n = opts.norm;
      const d = this.rmsnorm(`${label}.norm`, x, n.weight, n.out, { width: w.cols, eps: n.eps });
      pre.push({ ...d, workgroups: (s) => (matvec(rows(s)) ? [0] : d.workgroups(s)) });
      normed = n.out;
    }
    const variants: Array<{
      pipeline: GPUComputePipeline;
      workgroups: (part: WeightPart, s: StepShape) => [number, number];
      bindings?: Resources;
      upload?: Upload;
    }> = [];
    if (isAffine(w.format)) {
      if (w.cols % 32 !== 0) throw new Error(`${label}: quantized input width ${w.cols} is not a multiple of 32`);
      const q = this.weightConstants(w);
      const input = this.matvecInput(x, w.cols);
      const norm = this.normInput(w.cols, opts.norm?.weight);
      const constants = { ...q, NORM: opts.norm !== undefined, GLU: opts.glu === true };
      const cpu = this.gpu.isCpu;
      const variant = { ...this.affineVariant(w, cpu), ...input.variant, ...norm.variant };
      variants.push({
        pipeline: this.pipelines.get(cpu ? 'matvec_q' : 'matvec_q_workgroup', variant, constants),
        bindings: { x: input.binding ?? x, norm_weight: norm.binding },
        workgroups: (part, s) => (matvec(rows(s)) ? [cpu ? ceil(part.rows, MATVEC_ROWS_PER_WORKGROUP) : 2 * ceil(part.rows, 32), rows(s)] : [0, 0]),
      });
      const tiled = this.matmulInput(normed, w.cols, rows);
      variants.push({
        pipeline: this.pipelines.get('matmul_q', { ...this.affineVariant(w, false), X_READ: this.textureRead() }, { ...q, X_WIDTH: MATMUL_INPUT_WIDTH }),
        workgroups: (part, s) => (matvec(rows(s)) ? [0, 0] : [ceil(part.rows, MATMUL_ROWS_PER_WORKGROUP), ceil(rows(s), MATMUL_TILE_TOKENS)]),
        ...tiled,
      });
    } else {
      variants.push({
        pipeline: this.pipelines.get('matmul', this.weightVariant(w)),
        bindings: { x: normed },
        workgroups: (part, s) => [ceil(part.rows, 64), ceil(rows(s), 4)],
      });
    }
    const perSeq = opts.perSeq ? 1 : 0;
    return [...pre, ...w.parts.flatMap((part) => {
      const params = this.params('linear_out', {
        K: w.cols, N: part.rows, n_offset: part.rowStart, n_total: outRows, split1, split2, per_seq: perSeq,
        accumulate: opts.accumulate === true, has_bias: opts.bias !== undefined, glu: opts.glu === true, norm_eps: opts.norm?.eps ?? 0,
        act: ACTIVATION_CODE[opts.activation ?? 'silu'], out_scale: opts.scale ?? 1, softcap: opts.softcap ?? 0,
      });
      const buffers: Resources = {
        ...this.weightBindings(part), y: outputs[0]!, bias: opts.bias ?? this.dummy, y1: outputs[1] ?? this.dummyOutputs[0], y2: outputs[2] ?? this.dummyOutputs[1],
      };
      return variants.map((v) => ({
        label,
        pipeline: v.pipeline,
        bindGroup: this.bind(label, v.pipeline, params, { ...buffers, ...v.bindings }),
        upload: v.upload,
        workgroups: (s: StepShape) => v.workgroups(part, s),
      }));
    })];
  }

  /**
   * out = act(X W_gate^T) * (X W_up^T), X normed first with `norm`, for a weight loaded
   * with loadMatrix's `glu`. Where its rows are interleaved (GpuWeight.gluBlock: q4/q8), one
   * dispatch whose kernel applies the GLU to its finished rows (linear_out.wgsl glu);
   * otherwise the stacked projection into out and `up`, then glu.wgsl in place.
   */
  gatedLinear(label: string, w: GpuWeight, x: GPUBuffer, out: GPUBuffer, up: GPUBuffer, opts: { norm?: LinearNorm; activation?: Activation } = {}): Dispatch[] {
    if (w.gluBlock) return this.linear(label, w, x, out, { ...opts, glu: true });
    if (w.segments?.length !== 2 || w.segments[0] !== w.segments[1]) throw new Error(`${label}: a gated linear layer needs a weight stacked from gate and up`);
    return [...this.linear(label, w, x, [out, up], { norm: opts.norm }), this.glu(out, up, w.segments[0], opts.activation)];
  }

  /** The GLU epilogue's preconditions: interleaved blocks that match the kernels' rows, whole block pairs per part, and nothing added after the SwiGLU. */
  private checkGlu(label: string, w: GpuWeight, opts: LinearOptions): void {
    const pair = 2 * GLU_BLOCK_ROWS;
    if (!isAffine(w.format) || w.gluBlock !== GLU_BLOCK_ROWS) throw new Error(`${label}: the GLU epilogue needs a q4/q8 weight interleaved in blocks of ${GLU_BLOCK_ROWS} rows`);
    if (w.parts.some((part) => part.rowStart % pair !== 0 || part.rows % pair !== 0)) throw new Error(`${label}: a part of an interleaved gate/up weight splits a block pair`);
    if (opts.bias || opts.accumulate || opts.perSeq) throw new Error(`${label}: bias, accumulate and perSeq do not combine with the GLU epilogue`);
  }

  /**
   * How a q4/q8 weight's two textures are read (formats/affine.wgsl W_READ): as read-only
   * storage textures with `storage` where WGSL allows them, else sampled. On llvmpipe a
   * storage-texture load skips the sampled path's per-lane mip-level arithmetic, which pays
   * in matvec_q and costs in matmul_q, so only matvec_q asks for it (the GPU layout keeps
   * the sampled path GPUs are built around; bench/RESULTS.md has the figures).
   */
  private affineRead(storage: boolean): 'storage' | 'sampled' {
    return storage ? this.textureRead() : 'sampled';
  }

  /** Read-only storage textures where WGSL allows them, else sampled: the KV cache's (KV_READ) and matmul_q's input's (X_READ). */
  private textureRead(): 'storage' | 'sampled' {
    return this.gpu.readOnlyStorageTextures ? 'storage' : 'sampled';
  }

  /**
   * The decode matvecs' input X (matvec_input.wgsl): a uniform array over the rows it can
   * read when they fit one uniform binding, else a storage array.
   */
  private matvecInput(x: GPUBuffer, cols: number): { variant: Variant; binding?: GPUBufferBinding } {
    const rows = Math.min(MATVEC_MAX_ROWS, Math.floor(x.size / (cols * 4)));
    const bytes = rows * cols * 4;
    if (rows < 1 || bytes > this.gpu.maxUniformBinding || (x.usage & GPUBufferUsage.UNIFORM) === 0) return { variant: { X_UNIFORM: false } };
    return { variant: { X_UNIFORM: true, X_VEC4S: bytes / 16 }, binding: { buffer: x, offset: 0, size: bytes } };
  }

  /**
   * The matvecs' norm weight (matvec_input.wgsl norm_w) of a layer with a fused RMSNorm
   * (NORM), zeros for one without: a uniform array where the weight fits one uniform
   * binding, else a storage array.
   */
  private normInput(cols: number, weight: GPUBuffer | undefined): { variant: Variant; binding: GPUBufferBinding } {
    const bytes = cols * 4;
    const uniform = bytes <= this.gpu.maxUniformBinding && (!weight || (weight.usage & GPUBufferUsage.UNIFORM) !== 0);
    return {
      variant: uniform ? { NORM_UNIFORM: true, NORM_VEC4S: cols / 4 } : { NORM_UNIFORM: false },
      binding: { buffer: weight ?? this.zeros(bytes), offset: 0, size: bytes },
    };
  }

  /** A zero-filled buffer (storage and uniform) of at least `bytes`: the stand-in for an absent norm weight. */
  private zeros(bytes: number): GPUBuffer {
    if (!this.zeroBuffer || this.zeroBuffer.size < bytes) this.zeroBuffer = storageBuffer(this.gpu.device, bytes, 'zeros');
    return this.zeroBuffer;
  }

  /**
   * Sizes the texture matmul_q reads its input through for the largest input (in bytes)
   * any linear layer will have, so all layers share one; call before recording them.
   */
  reserveMatmulInput(bytes: number): void {
    if (this.inputTexture && this.inputTexture.height * MATMUL_INPUT_WIDTH * 16 >= bytes) return;
    const usage = GPUTextureUsage.TEXTURE_BINDING | GPUTextureUsage.COPY_DST;
    this.inputTexture = this.gpu.device.createTexture({
      label: 'matmul input',
      size: [MATMUL_INPUT_WIDTH, textureRows(Math.ceil(bytes / (MATMUL_INPUT_WIDTH * 16)))],
      format: 'rgba32float',
      usage: this.gpu.readOnlyStorageTextures ? usage | GPUTextureUsage.STORAGE_BINDING : usage,
    });
  }

  /**
   * matmul_q's input: the rows of X copied, flat, into an rgba32float texture (binding 5)
   * before the dispatch. Every linear layer shares the texture: each copy runs right before
   * its own dispatch, so a later layer's copy cannot overwrite an input still being read.
   */
  private matmulInput(x: GPUBuffer, cols: number, rows: (s: StepShape) => number): { bindings: Resources; upload: Upload } {
    const capacity = Math.floor(x.size / (cols * 4));
    this.reserveMatmulInput(capacity * cols * 4);
    const texture = this.inputTexture!;
    return {
      bindings: { x_tex: texture.createView() },
      upload: { from: x, to: texture, bytes: (s) => Math.min(rows(s), capacity) * cols * 4 },
    };
  }

  /** out = W[tokens] * scale, or out += it with `accumulate`. */
  embedding(w: GpuWeight, tokens: GPUBuffer, out: GPUBuffer, scale = 1, accumulate = false): Dispatch[] {
    const pipeline = this.pipelines.get('embedding', this.weightVariant(w), this.weightConstants(w));
    return w.parts.map((part) => {
      const params = this.params('embedding', { K: w.cols, row_start: part.rowStart, row_count: part.rows, scale, accumulate });
      return {
        label: 'embedding',
        pipeline,
        bindGroup: this.bind('embedding', pipeline, params, { ...this.weightBindings(part), tokens, out }),
        workgroups: (s: StepShape) => [ceil(w.cols / 4, 64), s.tokens],
      };
    });
  }

  /** y = RMSNorm(x) * weight, or with `accumulate` y += it (a post-norm's residual add). */
  rmsnorm(label: string, x: GPUBuffer, weight: GPUBuffer, y: GPUBuffer, options: { width: number; eps: number; seqLast?: GPUBuffer; accumulate?: boolean }): Dispatch {
    const pipeline = this.pipelines.get('rmsnorm');
    const perSeq = options.seqLast ? 1 : 0;
    const params = this.params('rmsnorm', { width: options.width, per_seq: perSeq, eps: options.eps, accumulate: options.accumulate === true });
    return {
      label,
      pipeline,
      bindGroup: this.bind(label, pipeline, params, { x, weight, y, seq_last: options.seqLast ?? this.dummy }),
      workgroups: (s) => [ceil(perSeq ? s.seqs : s.tokens, 64)],
    };
  }

  /** x = LayerNorm(x + res) * weight + bias in place (res optional): an encoder's norms (layernorm.wgsl). */
  layernorm(label: string, x: GPUBuffer, weight: GPUBuffer, bias: GPUBuffer, options: { width: number; eps: number; res?: GPUBuffer }): Dispatch {
    const pipeline = this.pipelines.get('layernorm');
    const params = this.params('layernorm', { width: options.width, eps: options.eps, has_res: options.res !== undefined });
    return {
      label,
      pipeline,
      bindGroup: this.bind(label, pipeline, params, { x, res: options.res ?? this.dummy, weight, bias }),
      workgroups: (s) => [ceil(s.tokens, 64)],
    };
  }

  /** out[s, :] = the mean, first or last of x's rows of sequence s (pool.wgsl), for the step's sequences. */
  pool(x: GPUBuffer, seqLast: GPUBuffer, out: GPUBuffer, width: number, mode: Pooling): Dispatch {
    const pipeline = this.pipelines.get('pool');
    const params = this.params('pool', { width, mode: POOLING_CODE[mode] });
    return {
      label: 'pool',
      pipeline,
      bindGroup: this.bind('pool', pipeline, params, { x, seq_last: seqLast, out }),
      workgroups: (s) => [ceil(s.seqs * width, 64)],
    };
  }

  /** x[s, :dims] normalised in place by each sequence's SeqNorm (embd_normalize.wgsl). */
  embdNormalize(x: GPUBuffer, norms: GPUBuffer, width: number): Dispatch {
    const pipeline = this.pipelines.get('embd_normalize');
    const params = this.params('embd_normalize', { width });
    return {
      label: 'embd_normalize',
      pipeline,
      bindGroup: this.bind('embd_normalize', pipeline, params, { x, norms }),
      workgroups: (s) => [ceil(s.seqs, 64)],
    };
  }

  /**
   * Rotary embedding of q (in place) and k, and the append of this pass's k and v to the
   * layer's paged KV cache, in one dispatch (rope_kv_write.wgsl). With `headNorm` ([2 *
   * head_dim]: q's weight, then k's), each head is RMS-normed first (Qwen3's q/k norm).
   */
  ropeKvWrite(label: string, inputs: RopeKvInputs, rope: RopeOptions, meta: Pick<BatchMeta, 'tokenPos' | 'tokenTable' | 'blockTable'>): Dispatch {
    if (rope.headDim % 8 !== 0) throw new Error(`head_dim ${rope.headDim} unsupported (multiple of 8)`);
    const rotDim = rope.rotaryDim ?? rope.headDim;
    if (rotDim % 8 !== 0 || rotDim > rope.headDim) throw new Error(`rotary dims ${rotDim} unsupported (a multiple of 8, at most head_dim ${rope.headDim})`);
    if (rotDim > 0 && !rope.invFreq) throw new Error(`${label}: rotary dims without inverse frequencies`);
    const pipeline = this.pipelines.get('rope_kv_write', {}, { NORM: rope.headNorm !== undefined, KV_WIDTH: KV_TEXTURE_WIDTH });
    const params = this.params('rope_kv_write', {
      heads: inputs.heads, kv_heads: inputs.kvHeads, head_dim: rope.headDim, eps: rope.eps ?? 0, block_size: inputs.blockSize, rot_dim: rotDim, mscale: rope.mscale ?? 1,
    });
    return {
      label,
      pipeline,
      bindGroup: this.bind(label, pipeline, params, {
        q: inputs.q, token_pos: meta.tokenPos, inv_freq: rope.invFreq ?? this.dummy, norm_weight: rope.headNorm ?? this.dummy, k: inputs.k, v: inputs.v,
        token_table: meta.tokenTable, block_table: meta.blockTable, k_cache: inputs.kCache.createView(), v_cache: inputs.vCache.createView(),
      }),
      workgroups: (s) => [ceil(s.tokens * (inputs.heads + inputs.kvHeads), 64)],
    };
  }

  /**
   * Causal self-attention of a step's tokens over their sequences' paged KV caches: first
   * the rotary embedding and the cache append (Ops.ropeKvWrite), then one of two recorded
   * kernels. For steps of decode tokens only, on a CPU adapter attention.wgsl with one token
   * per invocation and the heads of a KV head that share its key and value loads (up to
   * ATTENTION_GROUP; the largest divisor of the group size), and on a GPU
   * attention_decode_workgroup.wgsl. For steps with a prefill chunk, attention.wgsl with
   * groups of ATTENTION_GROUP consecutive tokens of one head (sharing the loads when they
   * belong to one sequence).
   * With `keyEnd` ([tokens] u32), a token attends to its sequence's keys at positions
   * 0 ..= keyEnd[token] instead of 0 ..= its own position: bidirectional attention (an
   * encoder's) when each token's keyEnd is its sequence's last position. The cache append
   * still writes each token at its own position.
   */
  attention(label: string, inputs: RopeKvInputs, out: GPUBuffer, rope: RopeOptions & AttentionScores, meta: Pick<BatchMeta, 'tokenPos' | 'tokenTable' | 'blockTable'> & { keyEnd?: GPUBuffer }): Dispatch[] {
    if (rope.headDim > 256) throw new Error(`head_dim ${rope.headDim} unsupported (at most 256)`);
    if (inputs.heads % inputs.kvHeads !== 0) throw new Error(`${inputs.heads} attention heads are not a multiple of ${inputs.kvHeads} KV heads`);
    const params = this.params('attention_io', {
      heads: inputs.heads, kv_heads: inputs.kvHeads, block_size: inputs.blockSize, scale: rope.scale, window: rope.window ?? 0, softcap: rope.softcap ?? 0,
    });
    // The group's registers grow with head_dim; past 128 a group compiles slowly.
    const group = rope.headDim <= 128 ? ATTENTION_GROUP : 1;
    const perKv = inputs.heads / inputs.kvHeads;
    let sharing = group;
    while (perKv % sharing !== 0) sharing--;
    const variant = { KV_READ: this.textureRead(), D4: rope.headDim / 4 };
    const bindings = (pipeline: GPUComputePipeline) => this.bind(`${label}.attention`, pipeline, params, {
      q: inputs.q, k_cache: inputs.kCache.createView(), v_cache: inputs.vCache.createView(), token_pos: meta.keyEnd ?? meta.tokenPos, token_table: meta.tokenTable, block_table: meta.blockTable, out,
    });
    /** attention.wgsl over groups of tq tokens x hq heads. */
    const grouped = (tq: number, hq: number, active: (s: StepShape) => boolean): Dispatch => {
      const wg = Math.max(1, Math.floor(8 / hq));
      const pipeline = this.pipelines.get('attention', { ...variant, TQ: tq, HQ: hq }, { WG: wg, KV_WIDTH: KV_TEXTURE_WIDTH });
      return { label: `${label}.attention`, pipeline, bindGroup: bindings(pipeline), workgroups: (s) => (active(s) ? [ceil(ceil(s.tokens, tq) * (inputs.heads / hq), wg)] : [0]) };
    };
    // Steps with tokens beyond one per sequence hold a prefill chunk.
    const prefillChunk = (s: StepShape) => s.tokens > s.seqs;
    const decodeOnly = (s: StepShape) => !prefillChunk(s);
    let decode: Dispatch;
    if (this.gpu.isCpu) {
      decode = grouped(1, sharing, decodeOnly);
    } else {
      const pipeline = this.pipelines.get('attention_decode_workgroup', variant, { KV_WIDTH: KV_TEXTURE_WIDTH });
      decode = { label: `${label}.attention`, pipeline, bindGroup: bindings(pipeline), workgroups: (s) => [decodeOnly(s) ? s.tokens * inputs.heads : 0] };
    }
    return [this.ropeKvWrite(`${label}.rope_kv_write`, inputs, rope, meta), decode, grouped(group, 1, prefillChunk)];
  }

  /** gate = act(gate) * up, in place; without `up`, gate = act(gate) (a plain MLP's activation). */
  glu(gate: GPUBuffer, up: GPUBuffer | undefined, width: number, activation: Activation = 'silu'): Dispatch {
    if (width % 4 !== 0) throw new Error(`intermediate size ${width} is not a multiple of 4`);
    const pipeline = this.pipelines.get('glu');
    const params = this.params('glu', { width4: width / 4, act: ACTIVATION_CODE[activation], gated: up !== undefined });
    return {
      label: 'glu',
      pipeline,
      bindGroup: this.bind('glu', pipeline, params, { gate, up: up ?? this.dummy }),
      workgroups: (s) => [ceil((s.tokens * width) / 4, 64)],
    };
  }

  logitBias(logits: GPUBuffer, vocab: number, entries: GPUBuffer): Dispatch {
    const pipeline = this.pipelines.get('logit_bias');
    const params = this.params('logit_bias', { vocab });
    return {
      label: 'logit_bias',
      pipeline,
      bindGroup: this.bind('logit_bias', pipeline, params, { logits, entries }),
      workgroups: (s) => [ceil(s.bias, 64)],
    };
  }

  sample(logits: GPUBuffer, vocab: number, meta: BatchMeta): Dispatch {
    const pipeline = this.pipelines.get('sample', {}, { MAX_TOP: MAX_TOP_LOGPROBS });
    const params = this.params('sample', { vocab, mask_words: maskWords(vocab), neg_inf: -Infinity });
    return {
      label: 'sample',
      pipeline,
      bindGroup: this.bind('sample', pipeline, params, { logits, seqs: meta.seqParams, out: meta.sampled, masks: meta.masks, logprobs: meta.logprobs }),
      workgroups: (s) => [s.seqs],
    };
  }
}

/**
 * How an embedding model pools its final hidden states into one vector per sequence
 * (pool.wgsl); rank: a reranker's, its score computed from the first token (a sequence
 * classifier's head).
 */
export const POOLINGS = ['mean', 'cls', 'last', 'rank'] as const;
export type Pooling = (typeof POOLINGS)[number];
const POOL_CODE = kernelEnum('pool', 'POOL', ['mean', 'first', 'last']);
const POOLING_CODE: Record<Pooling, number> = { mean: POOL_CODE.mean, cls: POOL_CODE.first, last: POOL_CODE.last, rank: POOL_CODE.first };

/** One sequence's normalisation: embd_normalize.wgsl's SeqNorm (dims: the columns kept; p: the norm, < 0 none). */
export interface SeqNorm {
  dims: number;
  p: number;
}

/** The SeqNorm buffer's contents for `norms`. */
export function packSeqNorms(norms: SeqNorm[]): ArrayBuffer {
  return packArray(kernelStruct('embd_normalize', 'SeqNorm'), norms);
}

/** Bytes per sequence in the SeqNorm buffer. */
export const SEQ_NORM_BYTES = kernelStruct('embd_normalize', 'SeqNorm').bytes;

/** An activation (common.wgsl activate): SiLU, GELU's tanh approximation, GELU, tanh. */
export type Activation = 'silu' | 'gelu_tanh' | 'gelu' | 'tanh';
const ACTIVATION_CODE = kernelEnum<Activation>('common', 'ACT', ['silu', 'gelu_tanh', 'gelu', 'tanh']);
/** How a q4/q8 weight's scales and biases are stored (formats/affine.wgsl SCALE_FORMAT). */
const SCALE_FORMAT_CODE = kernelEnum<ScaleFormat>('formats/affine', 'SCALE', ['f32', 'f16', 'bf16']);

export interface LinearOptions {
  /** Add into Y (the residual stream) instead of overwriting it. */
  accumulate?: boolean;
  /** Multiplies the output, before any accumulate (Granite's multipliers). Default 1. */
  scale?: number;
  /** cap * tanh(y / cap) on the output (Gemma 2's final logits). */
  softcap?: number;
  /** The GLU epilogue's activation (glu). Default SiLU. */
  activation?: Activation;
  bias?: GPUBuffer;
  /** Rows are sampling sequences (each one's last token), not tokens: the LM head. */
  perSeq?: boolean;
  norm?: LinearNorm;
  /** Y = silu(gate) * up of an interleaved gate/up weight (Ops.gatedLinear). */
  glu?: boolean;
}

/**
 * The RMSNorm a linear layer applies to its input rows first (Ops.linear's `norm`):
 * matvec_q fuses it into its input; the other kernels read it from `out`, written by
 * rmsnorm.wgsl in the steps that run them.
 */
export interface LinearNorm {
  /** [K] f32. */
  weight: GPUBuffer;
  eps: number;
  /** [max tokens, K] f32. */
  out: GPUBuffer;
}

/**
 * How Ops.ropeKvWrite rotates: the first rotaryDim dims of each head (default head_dim; 0:
 * none, a NoPE layer) by inv_freq [rotaryDim / 2], the result times mscale (default 1);
 * with headNorm, each head RMS-normed first by its weights ([2 * head_dim]: q's, k's).
 */
export interface RopeOptions {
  headDim: number;
  rotaryDim?: number;
  invFreq?: GPUBuffer;
  mscale?: number;
  headNorm?: GPUBuffer;
  eps?: number;
}

/** How Ops.attention scores: q times scale, each score soft-capped (0: not), over the last `window` positions (0: all). */
export interface AttentionScores {
  scale: number;
  softcap?: number;
  window?: number;
}

/** What Ops.ropeKvWrite reads and writes: one layer's q, k, v [tokens, heads, head_dim] and its KV cache (tensors.ts kvCacheTexture). */
export interface RopeKvInputs {
  q: GPUBuffer;
  k: GPUBuffer;
  v: GPUBuffer;
  heads: number;
  kvHeads: number;
  kCache: GPUTexture;
  vCache: GPUTexture;
  blockSize: number;
}

/** u32 words of one sequence's grammar mask. */
export function maskWords(vocab: number): number {
  return Math.ceil(vocab / 32);
}

/** One sequence's sampler params: sample.wgsl's SeqParams, field by field (writeStruct checks the names). */
export interface SeqParams {
  temperature: number;
  top_k: number;
  top_p: number;
  /** The uniform draw for the final pick. */
  u: number;
  min_p: number;
  p_less: boolean;
  /** 0: XTC not applied at this step. */
  xtc_threshold: number;
  masked: boolean;
  /** 0: none; else 1 + the number of top logprobs. */
  logprobs: number;
  /** Logprobs of the distribution the token was drawn from, not the temperature-1 row. */
  post_sampling: boolean;
}

/** The sampler's seq-params buffer for `seqs` (sample.wgsl SeqParams, one per sequence). */
export function packSeqParams(seqs: SeqParams[]): ArrayBuffer {
  return packArray(kernelStruct('sample', 'SeqParams'), seqs);
}

/** One penalty entry: logit_bias.wgsl's Entry. */
export interface BiasEntry {
  seq: number;
  token: number;
  repeat: number;
  subtract: number;
}

/** Bytes per penalty entry (logit_bias.wgsl Entry). */
export const BIAS_ENTRY_BYTES = kernelStruct('logit_bias', 'Entry').bytes;

/** The most distinct tokens one request's logit_bias may name (sizes the entry buffer). */
export const MAX_LOGIT_BIAS_TOKENS = 1024;

/** The penalty-entries buffer's contents for `entries` (logit_bias.wgsl Entry). */
export function packBiasEntries(entries: BiasEntry[]): ArrayBuffer {
  return packArray(kernelStruct('logit_bias', 'Entry'), entries);
}

/** Bytes per sequence in the sampler's seq-params buffer. */
export const SEQ_PARAMS_BYTES = kernelStruct('sample', 'SeqParams').bytes;
/** Top logprobs the sampler can return besides the chosen token's (sample.wgsl MAX_TOP). */
export const MAX_TOP_LOGPROBS = 20;

/** Per-token and per-sequence metadata of one forward pass, shared by every layer. */
export interface BatchMeta {
  tokens: GPUBuffer;
  tokenPos: GPUBuffer;
  tokenTable: GPUBuffer;
  blockTable: GPUBuffer;
  seqLast: GPUBuffer;
  seqParams: GPUBuffer;
  sampled: GPUBuffer;
  /** [S, maskWords(vocab)] grammar masks. */
  masks: GPUBuffer;
  /** [S, 2 * (1 + MAX_TOP_LOGPROBS)] (id, logprob) pairs. */
  logprobs: GPUBuffer;
  /** Penalty entries (seq, token, repeat, subtract). */
  biasEntries: GPUBuffer;
  /** Capacity of biasEntries in entries. */
  biasCapacity: number;
}
