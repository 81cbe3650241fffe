// A mixture-of-experts block's kernels: the routing (moe_route.wgsl), the experts'
// projections over the tokens routed to them (moe_matmul.wgsl) and the weighted sum into
// the residual stream (moe_combine.wgsl).
import type { Dispatch } from '../program.js';
import { isAffine, kernelEnum } from '../kernel-source.js';
import type { GpuWeight } from '../tensors.js';
import { ceil, type Ops } from '../ops.js';
import { ACTIVATION_CODE, type Activation } from './linear.js';

/** How the chosen experts' weights come from the router logits (moe_route.wgsl ROUTING_*). */
export type MoeRouting = 'softmax_topk' | 'topk_softmax';
const ROUTING_CODE = kernelEnum<MoeRouting>('moe_route', 'ROUTING', ['softmax_topk', 'topk_softmax']);

/** Slots per moe_matmul invocation (moe_matmul.wgsl TM): one in single-token steps, else this many. */
const MATMUL_TILE_SLOTS = 4;
/** Output rows per moe_matmul workgroup: 64 invocations of 8 rows (affine formats) or of one. */
const rowsPerWorkgroup = (affine: boolean) => (affine ? 64 * 8 : 64);

/**
 * One step's routing as moe_route.wgsl leaves it: per expert its slot count and start
 * (ranges [2 * experts] u32), the slots grouped by expert and each slot's expert (slots
 * [max tokens * topK * 2] u32), each slot's weight (weights [max tokens * topK] f32).
 */
export interface MoeRoutes {
  experts: number;
  topK: number;
  ranges: GPUBuffer;
  slots: GPUBuffer;
  weights: GPUBuffer;
}

export interface MoeMatmulOptions {
  glu?: Activation;
  perSlot?: boolean;
  bias?: GPUBuffer;
  interleaved?: boolean;
  limit?: number;
}

/** Routes every token of the step from its router logits [tokens, experts]: top-k experts, their weights, the slots grouped by expert. */
export function moeRoute(ops: Ops, label: string, logits: GPUBuffer, routes: MoeRoutes, opts: { routing: MoeRouting; renormalize: boolean }): Dispatch {
  const pipeline = ops.pipelines.get('moe_route');
  const params = ops.params('moe_route', { experts: routes.experts, top_k: routes.topK, routing: ROUTING_CODE[opts.routing], renormalize: opts.renormalize });
  return {
    label,
    pipeline,
    bindGroup: ops.bind(label, pipeline, params, { logits, ranges: routes.ranges, slots: routes.slots, weights: routes.weights }),
    workgroups: () => [1],
  };
}

/**
 * y[slot] = x[row] W_e^T for each slot routed to expert e, W stacked over the experts
 * (expert e's rows after expert e - 1's; each part of the weight whole experts). The row of
 * x is the slot's token, or with `perSlot` the slot itself (the down projection's input).
 * With `glu`, each expert's rows are its gate's then its up's (with `interleaved`, gate and
 * up rows alternating), and y = act(gate) * up; with `limit`, GPT-OSS's clamped GLU
 * (moe_matmul.wgsl). `bias` ([experts, rows per expert]) is added to each row's output first.
 * Dispatched once per weight part over all its experts; those no token chose exit at once.
 */
export function moeMatmul(ops: Ops, label: string, w: GpuWeight, x: GPUBuffer, y: GPUBuffer, routes: MoeRoutes, opts: MoeMatmulOptions): Dispatch[] {
  if (w.cols % (isAffine(w.format) ? 32 : 4) !== 0) throw new Error(`${label}: input width ${w.cols} is not a multiple of ${isAffine(w.format) ? 32 : 4}`);
  const perExpert = w.rows / routes.experts;
  if (!Number.isInteger(perExpert)) throw new Error(`${label}: ${w.rows} rows are not ${routes.experts} experts' worth`);
  const N = opts.glu ? perExpert / 2 : perExpert;
  // Two recorded kernels: one slot per invocation for single-token steps, a tile of
  // MATMUL_TILE_SLOTS for the rest; each step runs the one its token count suits.
  const variants = [1, MATMUL_TILE_SLOTS].map((tm) => ({
    tm,
    pipeline: ops.pipelines.get('moe_matmul', { ...ops.weightVariant(w), TM: tm }, { ...ops.weightConstants(w), GLU: opts.glu !== undefined }),
  }));
  const perWorkgroup = rowsPerWorkgroup(isAffine(w.format));
  return w.parts.flatMap((part) => {
    if (part.rowStart % perExpert !== 0 || part.rows % perExpert !== 0) throw new Error(`${label}: a weight part splits an expert`);
    const params = ops.params('moe_matmul', {
      K: w.cols, N, expert0: part.rowStart / perExpert, experts: routes.experts, top_k: routes.topK, per_slot: opts.perSlot === true, act: ACTIVATION_CODE[opts.glu ?? 'silu'],
      has_bias: opts.bias !== undefined, interleaved: opts.interleaved === true, limit: opts.limit ?? 0,
    });
    return variants.map(({ tm, pipeline }): Dispatch => ({
      label,
      pipeline,
      bindGroup: ops.bind(label, pipeline, params, { ...ops.weightBindings(part), x, y, ranges: routes.ranges, slots: routes.slots, bias: opts.bias ?? ops.dummy }),
      workgroups: (s) => ((s.tokens === 1) === (tm === 1) ? [ceil(N, perWorkgroup), ceil(s.tokens, tm), part.rows / perExpert] : [0]),
    }));
  });
}

/** h[t] += scale * sum_j weights[t, j] * y[t * topK + j]: the experts' outputs weighted into the residual stream. */
export function moeCombine(ops: Ops, label: string, y: GPUBuffer, routes: MoeRoutes, h: GPUBuffer, width: number, scale = 1): Dispatch {
  if (width % 4 !== 0) throw new Error(`${label}: width ${width} is not a multiple of 4`);
  const pipeline = ops.pipelines.get('moe_combine');
  const params = ops.params('moe_combine', { width4: width / 4, top_k: routes.topK, scale });
  return {
    label,
    pipeline,
    bindGroup: ops.bind(label, pipeline, params, { y, weights: routes.weights, h }),
    workgroups: (s) => [ceil((s.tokens * width) / 4, 64)],
  };
}
