// The linear layers: Y = X W^T in every weight format (matmul.wgsl; matvec_q.wgsl,
// matvec_q_workgroup.wgsl and matmul_q.wgsl for the affine formats), stacked projections, the fused
// input RMSNorm and the GLU epilogue; and the gated MLP's activation (glu.wgsl).
import { flatWorkgroups, type Dispatch, type StepShape, type Upload } from '../program.js';
import { isAffine, kernelEnum, type Variant } from '../kernel-source.js';
import { GLU_BLOCK_ROWS, partWeight, textureRows, type GpuWeight, type WeightPart } from '../tensors.js';
import { ceil, type Ops, type Resources } from '../ops.js';
import { rmsnorm } from './norms.js';

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
/** Texels per row of matmul_q's input texture (a power of two: the kernel shifts and masks). */
const MATMUL_INPUT_WIDTH = 1024;

/** matmul_q's input texture per Ops, shared by every quantized linear layer (reserveMatmulInput). */
const inputTextures = new WeakMap<Ops, GPUTexture>();

/** An activation (common.wgsl activate): SiLU, GELU's tanh approximation, GELU, tanh, squared ReLU, quick GELU. */
export type Activation = 'silu' | 'gelu_tanh' | 'gelu' | 'tanh' | 'relu2' | 'gelu_quick';
export const ACTIVATION_CODE = kernelEnum<Activation>('common', 'ACT', ['silu', 'gelu_tanh', 'gelu', 'tanh', 'relu2', 'gelu_quick']);

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
export function linear(ops: Ops, label: string, w: GpuWeight, x: GPUBuffer, y: GPUBuffer | GPUBuffer[], opts: LinearOptions = {}): Dispatch[] {
  if (w.cols % 4 !== 0) throw new Error(`${label}: input width ${w.cols} is not a multiple of 4`);
  const outputs = Array.isArray(y) ? y : [y];
  // A gated weight's two matrices give one output, of half the rows.
  const segments = opts.glu ? [w.rows / 2] : (w.segments ?? [w.rows]);
  const outRows = segments.reduce((a, b) => a + b, 0);
  if (outputs.length !== segments.length || outputs.length > 3) throw new Error(`${label}: ${outputs.length} outputs for a weight stacked from ${segments.length} matrices (at most 3)`);
  if (opts.accumulate && outputs.length > 1) throw new Error(`${label}: accumulate into a stacked weight's outputs`);
  if (opts.glu) checkGlu(label, w, opts);
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
    const d = rmsnorm(ops, `${label}.norm`, x, n.weight, n.out, { width: w.cols, eps: n.eps });
    pre.push({ ...d, workgroups: (s) => (matvec(rows(s)) ? [0] : d.workgroups(s)) });
    normed = n.out;
  }
  type Kernel = {
    pipeline: GPUComputePipeline;
    workgroups: (part: WeightPart, s: StepShape) => [number, number];
    bindings?: Resources;
    upload?: Upload;
  };
  // The kernels for the weight's format, or a part's own (WeightPart.format).
  const kernels = new Map<string, Kernel[]>();
  const kernelsFor = (pw: GpuWeight): Kernel[] => {
    const key = `${pw.format}/${pw.groupSize}`;
    let variants = kernels.get(key);
    if (variants) return variants;
    variants = [];
    kernels.set(key, variants);
    if (!isAffine(pw.format)) {
      variants.push({
        pipeline: ops.pipelines.get('matmul', ops.weightVariant(pw)),
        bindings: { x: normed },
        workgroups: (part, s) => [ceil(part.rows, 64), ceil(rows(s), 4)],
      });
      return variants;
    }
    const q = ops.weightConstants(pw);
    const input = matvecInput(ops, x, pw.cols);
    const norm = normInput(ops, pw.cols, opts.norm?.weight);
    const constants = { ...q, NORM: opts.norm !== undefined };
    const cpu = ops.gpu.isCpu;
    const variant = { ...ops.affineVariant(pw, cpu), ...input.variant, ...norm.variant };
    variants.push({
      pipeline: ops.pipelines.get(cpu ? 'matvec_q' : 'matvec_q_workgroup', variant, constants),
      bindings: { x: input.binding ?? x, norm_weight: norm.binding },
      workgroups: (part, s) => (matvec(rows(s)) ? [cpu ? ceil(part.rows, MATVEC_ROWS_PER_WORKGROUP) : 2 * ceil(part.rows, 32), rows(s)] : [0, 0]),
    });
    const tiled = matmulInput(ops, normed, pw.cols, rows);
    variants.push({
      pipeline: ops.pipelines.get('matmul_q', { ...ops.affineVariant(pw, false), X_READ: ops.textureRead() }, { ...q, X_WIDTH: MATMUL_INPUT_WIDTH }),
      workgroups: (part, s) => (matvec(rows(s)) ? [0, 0] : [ceil(part.rows, MATMUL_ROWS_PER_WORKGROUP), ceil(rows(s), MATMUL_TILE_TOKENS)]),
      ...tiled,
    });
    return variants;
  };
  if (isAffine(w.format) && w.cols % 32 !== 0) throw new Error(`${label}: quantized input width ${w.cols} is not a multiple of 32`);
  const perSeq = opts.perSeq ? 1 : 0;
  return [...pre, ...w.parts.flatMap((part) => {
    const params = ops.params('linear_out', {
      K: w.cols, N: part.rows, n_offset: part.rowStart, n_total: outRows, split1, split2, per_seq: perSeq,
      accumulate: opts.accumulate === true, has_bias: opts.bias !== undefined, glu: opts.glu === true, norm_eps: opts.norm?.eps ?? 0,
      act: ACTIVATION_CODE[opts.activation ?? 'silu'], out_scale: opts.scale ?? 1, softcap: opts.softcap ?? 0,
    });
    const buffers: Resources = {
      ...ops.weightBindings(part), y: outputs[0]!, bias: opts.bias ?? ops.dummy, y1: outputs[1] ?? ops.dummyOutputs[0], y2: outputs[2] ?? ops.dummyOutputs[1],
    };
    return kernelsFor(partWeight(w, part)).map((v) => ({
      label,
      pipeline: v.pipeline,
      bindGroup: ops.bind(label, v.pipeline, params, { ...buffers, ...v.bindings }),
      upload: v.upload,
      workgroups: (s: StepShape) => v.workgroups(part, s),
    }));
  })];
}

/**
 * out = act(X W_gate^T) * (X W_up^T), X normed first with `norm`, for a weight loaded
 * with loadMatrix's `glu`. Where its rows are interleaved (GpuWeight.gluBlock: affine formats), one
 * dispatch whose kernel applies the GLU to its finished rows (linear_out.wgsl glu);
 * otherwise the stacked projection into out and `up`, then glu.wgsl in place.
 */
export function gatedLinear(ops: Ops, label: string, w: GpuWeight, x: GPUBuffer, out: GPUBuffer, up: GPUBuffer, opts: { norm?: LinearNorm; activation?: Activation } = {}): Dispatch[] {
  if (w.gluBlock) return linear(ops, label, w, x, out, { ...opts, glu: true });
  if (w.segments?.length !== 2 || w.segments[0] !== w.segments[1]) throw new Error(`${label}: a gated linear layer needs a weight stacked from gate and up`);
  return [...linear(ops, label, w, x, [out, up], { norm: opts.norm }), glu(ops, out, up, w.segments[0], opts.activation)];
}

/** gate = act(gate) * up, in place; without `up`, gate = act(gate) (a plain MLP's activation). */
export function glu(ops: Ops, gate: GPUBuffer, up: GPUBuffer | undefined, width: number, activation: Activation = 'silu'): Dispatch {
  if (width % 4 !== 0) throw new Error(`intermediate size ${width} is not a multiple of 4`);
  const pipeline = ops.pipelines.get('glu');
  const params = ops.params('glu', { width4: width / 4, act: ACTIVATION_CODE[activation], gated: up !== undefined });
  return {
    label: 'glu',
    pipeline,
    bindGroup: ops.bind('glu', pipeline, params, { gate, up: up ?? ops.dummy }),
    workgroups: (s) => flatWorkgroups(ceil((s.tokens * width) / 4, 64)),
  };
}

/** The GLU epilogue's preconditions: interleaved blocks that match the kernels' rows, whole block pairs per part, and nothing added after the SwiGLU. */
function checkGlu(label: string, w: GpuWeight, opts: LinearOptions): void {
  const pair = 2 * GLU_BLOCK_ROWS;
  if (!isAffine(w.format) || w.gluBlock !== GLU_BLOCK_ROWS) throw new Error(`${label}: the GLU epilogue needs an affine weight interleaved in blocks of ${GLU_BLOCK_ROWS} rows`);
  if (w.parts.some((part) => part.rowStart % pair !== 0 || part.rows % pair !== 0)) throw new Error(`${label}: a part of an interleaved gate/up weight splits a block pair`);
  if (opts.bias || opts.accumulate || opts.perSeq) throw new Error(`${label}: bias, accumulate and perSeq do not combine with the GLU epilogue`);
}

/**
 * The decode matvecs' input X (matvec_input.wgsl): a uniform array when the rows it can
 * read fit one uniform binding, else a storage array. The uniform array spans as much of
 * the buffer as one binding holds, not just those rows, so that layers of different input
 * widths reading activation buffers of at least that size (the engine's, at its batch
 * sizes) share one pipeline.
 */
function matvecInput(ops: Ops, x: GPUBuffer, cols: number): { variant: Variant; binding?: GPUBufferBinding } {
  const rows = Math.min(MATVEC_MAX_ROWS, Math.floor(x.size / (cols * 4)));
  const bytes = Math.floor(Math.min(x.size, ops.gpu.maxUniformBinding) / 16) * 16;
  if (rows < 1 || bytes < rows * cols * 4 || (x.usage & GPUBufferUsage.UNIFORM) === 0) return { variant: { X_UNIFORM: false } };
  return { variant: { X_UNIFORM: true, X_VEC4S: bytes / 16 }, binding: { buffer: x, offset: 0, size: bytes } };
}

/**
 * The matvecs' norm weight (matvec_input.wgsl norm_w) of a layer with a fused RMSNorm
 * (NORM): a uniform array where the weight fits one uniform binding, else a storage array.
 * A layer without the norm binds one vec4 of zeros, which it never reads, so that such
 * layers share one pipeline whatever their input width.
 */
function normInput(ops: Ops, cols: number, weight: GPUBuffer | undefined): { variant: Variant; binding: GPUBufferBinding } {
  if (!weight) return { variant: { NORM_UNIFORM: true, NORM_VEC4S: 1 }, binding: { buffer: ops.zeros(16), offset: 0, size: 16 } };
  const bytes = cols * 4;
  const uniform = bytes <= ops.gpu.maxUniformBinding && (weight.usage & GPUBufferUsage.UNIFORM) !== 0;
  return {
    variant: uniform ? { NORM_UNIFORM: true, NORM_VEC4S: cols / 4 } : { NORM_UNIFORM: false },
    binding: { buffer: weight, offset: 0, size: bytes },
  };
}

/**
 * Sizes the texture matmul_q reads its input through for the largest input (in bytes)
 * any linear layer will have, so all layers share one; call before recording them.
 */
export function reserveMatmulInput(ops: Ops, bytes: number): void {
  const texture = inputTextures.get(ops);
  if (texture && texture.height * MATMUL_INPUT_WIDTH * 16 >= bytes) return;
  const usage = GPUTextureUsage.TEXTURE_BINDING | GPUTextureUsage.COPY_DST;
  inputTextures.set(ops, ops.gpu.device.createTexture({
    label: 'matmul input',
    size: [MATMUL_INPUT_WIDTH, textureRows(Math.ceil(bytes / (MATMUL_INPUT_WIDTH * 16)))],
    format: 'rgba32float',
    usage: ops.gpu.readOnlyStorageTextures ? usage | GPUTextureUsage.STORAGE_BINDING : usage,
  }));
}

/**
 * matmul_q's input: the rows of X copied, flat, into an rgba32float texture (binding 5)
 * before the dispatch. Every linear layer shares the texture: each copy runs right before
 * its own dispatch, so a later layer's copy cannot overwrite an input still being read.
 */
function matmulInput(ops: Ops, x: GPUBuffer, cols: number, rows: (s: StepShape) => number): { bindings: Resources; upload: Upload } {
  const capacity = Math.floor(x.size / (cols * 4));
  reserveMatmulInput(ops, capacity * cols * 4);
  const texture = inputTextures.get(ops)!;
  return {
    bindings: { x_tex: texture.createView() },
    upload: { from: x, to: texture, bytes: (s) => Math.min(rows(s), capacity) * cols * 4 },
  };
}
