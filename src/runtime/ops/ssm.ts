// The recurrent layers' kernels: the causal depthwise convolution with its state
// (ssm_conv.wgsl: Mamba-2's and LFM2's gated short convolution), Mamba-2's selective scan
// (ssm_scan.wgsl; on a GPU ssm_scan_chunk.wgsl takes the chunks of several tokens) and its
// gated grouped RMSNorm (rmsnorm_gated.wgsl). The conv and scan
// run one workgroup row per sequence chunk of the step (BatchMeta.chunks), each continuing
// from its sequence's state slot.
import type { Dispatch } from '../program.js';
import { ceil, type Ops } from '../ops.js';
import { kernelEnum } from '../kernel-source.js';

/** Head channels per workgroup of ssm_scan_chunk.wgsl. */
const SCAN = kernelEnum('ssm_scan_chunk', 'SCAN', ['channels']);

/** The longest convolution ssm_conv.wgsl holds (MAX_KERNEL). */
export const MAX_CONV_KERNEL = 8;

export interface ConvOptions {
  channels: number;
  /** Values per row of x, and where the conv's input starts in it. */
  inStride: number;
  inOffset: number;
  kernel: number;
  /** LFM2: x holds B | C | x', the input B * x' and the output C * conv (no bias, no SiLU). */
  gated: boolean;
  bias?: GPUBuffer;
}

/** y = conv(x) per chunk from and into the chunks' slots of `state` [slots, kernel - 1, channels]; w [channels, kernel]. */
export function ssmConv(ops: Ops, label: string, chunks: GPUBuffer, x: GPUBuffer, w: GPUBuffer, state: GPUBuffer, y: GPUBuffer, o: ConvOptions): Dispatch {
  if (o.kernel < 2 || o.kernel > MAX_CONV_KERNEL) throw new Error(`${label}: conv kernel ${o.kernel} outside 2..${MAX_CONV_KERNEL}`);
  const pipeline = ops.pipelines.get('ssm_conv', { GATED: o.gated });
  const params = ops.params('ssm_conv', { channels: o.channels, in_stride: o.inStride, in_offset: o.inOffset, kernel: o.kernel, has_bias: o.bias !== undefined });
  return {
    label,
    pipeline,
    bindGroup: ops.bind(label, pipeline, params, { chunks, x, w, bias: o.bias ?? ops.dummy, state, y }),
    workgroups: (s) => [ceil(o.channels, 64), s.chunks ?? 0],
  };
}

export interface ScanShape {
  heads: number;
  headDim: number;
  groups: number;
  stateSize: number;
  /** Values per row of xbc: heads * headDim + 2 * groups * stateSize. */
  convDim: number;
  /** Values per row of proj (in_proj's output) and where dt starts in it. */
  projStride: number;
  dtOffset: number;
}

/**
 * y = the selective scan of xbc with dt from proj, per chunk from and into its slot of
 * `state` [slots, heads, headDim, stateSize]. A CPU adapter walks every chunk's positions
 * in order (ssm_scan.wgsl); a GPU scans the chunks of several tokens in parallel over their
 * positions (ssm_scan_chunk.wgsl, dispatched in steps that hold one) and walks the decode
 * steps.
 */
export function ssmScan(ops: Ops, label: string, chunks: GPUBuffer, xbc: GPUBuffer, proj: GPUBuffer, weights: { aLog: GPUBuffer; dtBias: GPUBuffer; d: GPUBuffer }, state: GPUBuffer, y: GPUBuffer, shape: ScanShape): Dispatch[] {
  const buffers = { chunks, xbc, proj, a_log: weights.aLog, dt_bias: weights.dtBias, d: weights.d, state, y };
  const values = { head_dim: shape.headDim, heads: shape.heads, groups: shape.groups, conv_dim: shape.convDim, proj_stride: shape.projStride, dt_offset: shape.dtOffset };
  const variant = { D_STATE: shape.stateSize };
  const cpu = ops.gpu.isCpu;
  const walk = ops.pipelines.get('ssm_scan', variant);
  const steps: Dispatch = {
    label,
    pipeline: walk,
    bindGroup: ops.bind(label, walk, ops.params('ssm_scan', { ...values, steps_only: !cpu }), buffers),
    workgroups: (s) => [ceil(shape.headDim, 64), shape.heads, s.chunks ?? 0],
  };
  if (cpu) return [steps];
  const chunked = ops.pipelines.get('ssm_scan_chunk', variant);
  return [
    {
      label: `${label}.chunks`,
      pipeline: chunked,
      bindGroup: ops.bind(`${label}.chunks`, chunked, ops.params('ssm_scan_chunk', values), buffers),
      // A step of decode steps alone (a token per chunk) has no chunk for it.
      workgroups: (s) => [ceil(shape.headDim, SCAN.channels), shape.heads, s.tokens > (s.chunks ?? 0) ? s.chunks ?? 0 : 0],
    },
    steps,
  ];
}

/** y = RMSNorm(y * silu(z)) * weight over groups of `group` values, in place; z at column 0 of rows of zStride. */
export function rmsnormGated(ops: Ops, label: string, y: GPUBuffer, z: GPUBuffer, weight: GPUBuffer, o: { width: number; group: number; zStride: number; eps: number }): Dispatch {
  const pipeline = ops.pipelines.get('rmsnorm_gated');
  const params = ops.params('rmsnorm_gated', { width: o.width, group: o.group, z_stride: o.zStride, eps: o.eps });
  return {
    label,
    pipeline,
    bindGroup: ops.bind(label, pipeline, params, { y, z, weight }),
    workgroups: (s) => [ceil(s.tokens * (o.width / o.group), 64)],
  };
}
