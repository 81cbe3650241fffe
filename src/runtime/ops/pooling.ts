// An embedding model's pooling (pool.wgsl) and its vectors' normalisation
// (embd_normalize.wgsl); a vision tower's patch-grid pooling (patch_pool.wgsl).
import type { Dispatch } from '../program.js';
import { kernelEnum, kernelStruct } from '../kernel-source.js';
import { packArray } from '../wgsl-struct.js';
import { ceil, type Ops } from '../ops.js';

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


/** out[s, :] = the mean, first or last of x's rows of sequence s (pool.wgsl), for the step's sequences. */
export function pool(ops: Ops, x: GPUBuffer, seqLast: GPUBuffer, out: GPUBuffer, width: number, mode: Pooling): Dispatch {
  const pipeline = ops.pipelines.get('pool');
  const params = ops.params('pool', { width, mode: POOLING_CODE[mode] });
  return {
    label: 'pool',
    pipeline,
    bindGroup: ops.bind('pool', pipeline, params, { x, seq_last: seqLast, out }),
    workgroups: (s) => [ceil(s.seqs * width, 64)],
  };
}


/** x[s, :dims] normalised in place by each sequence's SeqNorm (embd_normalize.wgsl). */
export function embdNormalize(ops: Ops, x: GPUBuffer, norms: GPUBuffer, width: number): Dispatch {
  const pipeline = ops.pipelines.get('embd_normalize');
  const params = ops.params('embd_normalize', { width });
  return {
    label: 'embd_normalize',
    pipeline,
    bindGroup: ops.bind('embd_normalize', pipeline, params, { x, norms }),
    workgroups: (s) => [ceil(s.seqs, 64)],
  };
}


/** out = the means of x's k x k windows of a side x side patch grid, rows in grid order, in a step of (side / k)^2 rows (patch_pool.wgsl). */
export function patchPool(ops: Ops, x: GPUBuffer, out: GPUBuffer, grid: { width: number; side: number; k: number }): Dispatch {
  if (grid.side % grid.k !== 0) throw new Error(`a ${grid.side} x ${grid.side} patch grid does not pool by ${grid.k}`);
  const pipeline = ops.pipelines.get('patch_pool');
  const params = ops.params('patch_pool', grid);
  return {
    label: 'patch_pool',
    pipeline,
    bindGroup: ops.bind('patch_pool', pipeline, params, { x, out }),
    workgroups: (s) => [ceil(s.tokens * grid.width, 64)],
  };
}
