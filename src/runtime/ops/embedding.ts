// The token embedding gather (embedding.wgsl), in every weight format.
import type { Dispatch, StepShape } from '../program.js';
import type { GpuWeight } from '../tensors.js';
import { ceil, type Ops } from '../ops.js';


/** out = W[tokens] * scale, or out += it with `accumulate`. */
export function embedding(ops: Ops, w: GpuWeight, tokens: GPUBuffer, out: GPUBuffer, scale = 1, accumulate = false): Dispatch[] {
  const pipeline = ops.pipelines.get('embedding', ops.weightVariant(w), ops.weightConstants(w));
  return w.parts.map((part) => {
    const params = ops.params('embedding', { K: w.cols, row_start: part.rowStart, row_count: part.rows, scale, accumulate });
    return {
      label: 'embedding',
      pipeline,
      bindGroup: ops.bind('embedding', pipeline, params, { ...ops.weightBindings(part), tokens, out }),
      workgroups: (s: StepShape) => [ceil(w.cols / 4, 64), s.tokens],
    };
  });
}
