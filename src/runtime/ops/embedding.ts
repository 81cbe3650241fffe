// The token embedding gather (embedding.wgsl), in every weight format, and the image
// soft tokens that replace placeholder embeddings (embed_override.wgsl).
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


/** h[t] = rows[t] for the tokens whose flag is set (embed_override.wgsl). */
export function embedOverride(ops: Ops, h: GPUBuffer, rows: GPUBuffer, flags: GPUBuffer, width: number): Dispatch {
  const pipeline = ops.pipelines.get('embed_override');
  const params = ops.params('embed_override', { width });
  return {
    label: 'embed_override',
    pipeline,
    bindGroup: ops.bind('embed_override', pipeline, params, { h, rows, flags }),
    workgroups: (s) => [ceil(s.tokens * width, 64)],
  };
}
