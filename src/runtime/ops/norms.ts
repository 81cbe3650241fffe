// RMSNorm (rmsnorm.wgsl) and LayerNorm (layernorm.wgsl) over rows.
import type { Dispatch } from '../program.js';
import { ceil, type Ops } from '../ops.js';


/** y = RMSNorm(x) * weight, or with `accumulate` y += it (a post-norm's residual add). */
export function rmsnorm(ops: Ops, label: string, x: GPUBuffer, weight: GPUBuffer, y: GPUBuffer, options: { width: number; eps: number; seqLast?: GPUBuffer; accumulate?: boolean }): Dispatch {
  const pipeline = ops.pipelines.get('rmsnorm');
  const perSeq = options.seqLast ? 1 : 0;
  const params = ops.params('rmsnorm', { width: options.width, per_seq: perSeq, eps: options.eps, accumulate: options.accumulate === true });
  return {
    label,
    pipeline,
    bindGroup: ops.bind(label, pipeline, params, { x, weight, y, seq_last: options.seqLast ?? ops.dummy }),
    workgroups: (s) => [ceil(perSeq ? s.seqs : s.tokens, 64)],
  };
}


/**
 * x = LayerNorm(x + res) * weight + bias in place (res optional): an encoder's norms
 * (layernorm.wgsl); with `out`, the result goes there and x is left as it was (a pre-norm).
 */
export function layernorm(ops: Ops, label: string, x: GPUBuffer, weight: GPUBuffer, bias: GPUBuffer, options: { width: number; eps: number; res?: GPUBuffer; out?: GPUBuffer }): Dispatch {
  const pipeline = ops.pipelines.get('layernorm', { OUT: options.out !== undefined });
  const params = ops.params('layernorm', { width: options.width, eps: options.eps, has_res: options.res !== undefined });
  return {
    label,
    pipeline,
    bindGroup: ops.bind(label, pipeline, params, { x, res: options.res ?? ops.dummy, weight, bias, ...(options.out ? { y: options.out } : {}) }),
    workgroups: (s) => [ceil(s.tokens, 64)],
  };
}
