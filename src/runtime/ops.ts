// The kernels a model records, one method per kernel, each binding its buffers and static
// parameters once and returning the recorded dispatches; shapes that change per step come
// from the step uniform. The kernels are grouped by family in ops/*.ts (functions over an
// Ops); this file holds what they share: the pipeline cache, the step uniform, params and
// bind groups, stand-in buffers, and how weights and textures are read.
import type { Gpu } from './gpu.js';
import { PipelineCache } from './pipelines.js';
import type { StepShape } from './program.js';
import { AFFINE_BITS, formatFile, isAffine, kernelEnum, kernelStruct, type Variant } from './kernel-source.js';
import { packStruct, type StructValues } from './wgsl-struct.js';
import { PACKED_TEXTURE_WIDTH, PACKED_TILE_ROWS, storageBuffer, uniformBuffer, type GpuWeight, type ScaleFormat, type WeightPart } from './tensors.js';
import { attention, cachedAttention, ropeKvWrite } from './ops/attention.js';
import { adain, adaLayerNorm, conv1d, convTranspose1d, gatherRows, harmonicSource, istft, lstm, stft } from './ops/audio.js';
import { im2col } from './ops/conv.js';
import { embedOverride, embedding } from './ops/embedding.js';
import { gatedLinear, glu, linear, reserveMatmulInput } from './ops/linear.js';
import { moeCombine, moeMatmul, moeRoute } from './ops/moe.js';
import { layernorm, rmsnorm } from './ops/norms.js';
import { embdNormalize, patchPool, pool } from './ops/pooling.js';
import { logitBias, sample } from './ops/sampling.js';
import { rmsnormGated, ssmConv, ssmScan } from './ops/ssm.js';

export const ceil = (a: number, b: number) => Math.ceil(a / b);

/** A bind group's resources by the WGSL variable names they bind to. */
export type Resources = Record<string, GPUBuffer | GPUBindingResource>;

/** How an affine weight's scales and biases are stored (formats/affine.wgsl SCALE_FORMAT). */
const SCALE_FORMAT_CODE = kernelEnum<ScaleFormat>('formats/affine', 'SCALE', ['f32', 'f16', 'bf16']);

/** A kernel family's function (ops/*.ts) as a method of `ops`. */
type Method<F> = F extends (ops: Ops, ...args: infer A) => infer R ? (...args: A) => R : never;
function method<F extends (ops: Ops, ...args: never[]) => unknown>(ops: Ops, f: F): Method<F> {
  return ((...args: never[]) => f(ops, ...args)) as Method<F>;
}

export class Ops {
  readonly pipelines: PipelineCache;
  /** Written once per step: [n_tokens, n_seqs, n_bias]. */
  readonly step: GPUBuffer;
  /** A stand-in for an unused storage binding. */
  readonly dummy: GPUBuffer;
  /** Stand-ins for a linear layer's unused outputs (linear_out.wgsl): two, as writable bindings may not alias. */
  readonly dummyOutputs: [GPUBuffer, GPUBuffer];
  private zeroBuffer?: GPUBuffer;

  // The kernels, by family.
  readonly linear = method(this, linear);
  readonly gatedLinear = method(this, gatedLinear);
  readonly glu = method(this, glu);
  readonly reserveMatmulInput = method(this, reserveMatmulInput);
  readonly embedding = method(this, embedding);
  readonly embedOverride = method(this, embedOverride);
  readonly rmsnorm = method(this, rmsnorm);
  readonly layernorm = method(this, layernorm);
  readonly ropeKvWrite = method(this, ropeKvWrite);
  readonly attention = method(this, attention);
  readonly moeRoute = method(this, moeRoute);
  readonly moeMatmul = method(this, moeMatmul);
  readonly moeCombine = method(this, moeCombine);
  readonly ssmConv = method(this, ssmConv);
  readonly ssmScan = method(this, ssmScan);
  readonly rmsnormGated = method(this, rmsnormGated);
  readonly cachedAttention = method(this, cachedAttention);
  readonly im2col = method(this, im2col);
  readonly pool = method(this, pool);
  readonly patchPool = method(this, patchPool);
  readonly embdNormalize = method(this, embdNormalize);
  readonly logitBias = method(this, logitBias);
  readonly sample = method(this, sample);
  readonly conv1d = method(this, conv1d);
  readonly convTranspose1d = method(this, convTranspose1d);
  readonly adain = method(this, adain);
  readonly adaLayerNorm = method(this, adaLayerNorm);
  readonly lstm = method(this, lstm);
  readonly gatherRows = method(this, gatherRows);
  readonly harmonicSource = method(this, harmonicSource);
  readonly stft = method(this, stft);
  readonly istft = method(this, istft);

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
  params(file: string, values: StructValues): GPUBuffer {
    return uniformBuffer(this.gpu.device, packStruct(kernelStruct(file, 'Params'), values));
  }

  /**
   * A bind group of `pipeline`: its params (p), the step uniform where the kernel declares
   * it, and `resources` by the WGSL variable names they bind to.
   */
  bind(label: string, pipeline: GPUComputePipeline, params: GPUBuffer, resources: Resources): GPUBindGroup {
    const step = this.pipelines.declares(pipeline, 'step') ? { step: this.step } : {};
    const entries = Object.entries({ p: params, ...step, ...resources }).map(([name, r]): GPUBindGroupEntry => ({
      binding: this.pipelines.binding(pipeline, name),
      resource: r instanceof GPUBuffer ? { buffer: r } : r,
    }));
    return this.gpu.device.createBindGroup({ label, layout: pipeline.getBindGroupLayout(0), entries });
  }

  /** A weight part's data (formats/*.wgsl w_data and MXFP4's w_scales, or readers/affine_*.wgsl w_packed and w_affine). */
  weightBindings(part: WeightPart): Resources {
    if (part.scales) return { w_data: part.data as GPUBuffer, w_scales: part.scales };
    if (!part.affine) return { w_data: part.data as GPUBuffer };
    return { w_packed: (part.data as GPUTexture).createView(), w_affine: part.affine.createView() };
  }

  /** formats/affine.wgsl's override constants for an affine weight (none for a float one). */
  weightConstants(w: GpuWeight): Record<string, number> {
    if (!isAffine(w.format)) return {};
    return {
      SCALE_FORMAT: SCALE_FORMAT_CODE[w.scaleFormat ?? 'f32'],
      PACKED_WIDTH: PACKED_TEXTURE_WIDTH,
      PACKED_TILE_ROWS,
    };
  }

  /** formats/affine.wgsl's variant values for an affine weight, read through storage textures with `storage` where WGSL allows them (affineRead). */
  affineVariant(w: GpuWeight, storage: boolean): Variant {
    if (!isAffine(w.format)) throw new Error(`${w.format}: not an affine format`);
    return { BITS: AFFINE_BITS[w.format], GROUP_SIZE: w.groupSize, W_READ: this.affineRead(storage) };
  }

  /** A kernel's variant values for reading a weight of any format (`#include "formats/${FORMAT}"`). */
  weightVariant(w: GpuWeight): Variant {
    return { FORMAT: formatFile(w.format), ...(isAffine(w.format) ? this.affineVariant(w, false) : {}) };
  }

  /**
   * How an affine weight's two textures are read (formats/affine.wgsl W_READ): as read-only
   * storage textures with `storage` where WGSL allows them, else sampled. On llvmpipe a
   * storage-texture load skips the sampled path's per-lane mip-level arithmetic, which pays
   * in matvec_q and costs in matmul_q, so only matvec_q asks for it (the GPU layout keeps
   * the sampled path GPUs are built around; bench/RESULTS.md has the figures).
   */
  affineRead(storage: boolean): 'storage' | 'sampled' {
    return storage ? this.textureRead() : 'sampled';
  }

  /** Read-only storage textures where WGSL allows them, else sampled: the KV cache's (KV_READ) and matmul_q's input's (X_READ). */
  textureRead(): 'storage' | 'sampled' {
    return this.gpu.readOnlyStorageTextures ? 'storage' : 'sampled';
  }

  /** A zero-filled buffer (storage and uniform) of at least `bytes`: the stand-in for an absent norm weight. */
  zeros(bytes: number): GPUBuffer {
    if (!this.zeroBuffer || this.zeroBuffer.size < bytes) this.zeroBuffer = storageBuffer(this.gpu.device, bytes, 'zeros');
    return this.zeroBuffer;
  }
}

/** Per-token and per-sequence metadata of one forward pass, shared by every layer. */
export interface BatchMeta {
  tokens: GPUBuffer;
  tokenPos: GPUBuffer;
  tokenTable: GPUBuffer;
  blockTable: GPUBuffer;
  /** [max tokens] u32: each token's sequence's engine slot, whose ring a ring KV layer uses (kv_cache.wgsl). */
  tokenSlot: GPUBuffer;
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
  /**
   * [max tokens] vec4<u32>, one per sequence chunk of the pass: its first token, its token
   * count, its recurrent state slot and its start position (the recurrent layers' kernels).
   */
  chunks: GPUBuffer;
}
