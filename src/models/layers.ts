// The layer vocabulary the decoder families compose (src/models/<family>.ts), each layer
// recording its dispatches; the math is in src/kernels. A layer's spec names what varies
// between families: norms before and after a block, the activation, the RoPE (or none),
// a sliding window, soft-capping, scalar multipliers, biases, fused projections. Layers name
// their tensors as transformers' decoders do (model.embed_tokens, model.layers.N.self_attn.*,
// model.layers.N.mlp.*, model.norm, lm_head), each with the shape config.json gives it; a
// family's layouts (Family.layouts) say where other checkpoints keep them.
import type { Activation, LinearNorm } from '../runtime/ops/linear.js';
import type { MoeRoutes, MoeRouting } from '../runtime/ops/moe.js';
import type { Dispatch } from '../runtime/program.js';
import type { GpuWeight } from '../runtime/tensors.js';
import type { MatrixSource, VectorSource } from './checkpoint.js';
import type { ModelConfig, Rope } from './config.js';
import type { BuildContext } from './model.js';

/** How a family's RMSNorms scale: by w, or by (1 + w) (Gemma; the 1 is added at load). */
export interface Norms {
  eps: number;
  plusOne?: boolean;
}

export interface AttentionSpec {
  norms: Norms;
  /** The RMSNorm before the block (a weight name under the layer), or none (OLMo 2 norms after). */
  inputNorm?: string;
  /** q, k and v from one fused `qkv_proj` (Phi-3) instead of q_proj, k_proj, v_proj. */
  fusedQkv?: boolean;
  /** Biases on the q, k and v projections (Qwen2). */
  qkvBias?: boolean;
  /** RMSNorm of q and k: per head (Qwen3, Gemma 3) or across the whole projection (OLMo 2). */
  qkNorm?: 'head' | 'full';
  /** Absent: a NoPE layer (no rotary embedding). */
  rope?: Rope;
  /** Attend to the last `window` positions only (sliding-window layers). */
  window?: number;
  /** q's multiplier: 1 / sqrt(head_dim), or the family's (query_pre_attn_scalar, Granite's attention_multiplier). */
  scale: number;
  /** Attention-score soft-capping (Gemma 2's attn_logit_softcapping). */
  softcap?: number;
  /** A learned logit per head (`self_attn.sinks`) in each softmax's denominator (GPT-OSS). */
  sinks?: boolean;
  /** A bias on o_proj (GPT-OSS). */
  oBias?: boolean;
  /** o_proj's output times this before the residual add (Granite's residual_multiplier). */
  residualScale?: number;
  /** A norm of the block's output before the residual add (Gemma's post_attention_layernorm, OLMo 2's). */
  postNorm?: string;
  /** Each token attends up to its position here instead of its own (ImageInputs.keyEnd: Gemma 3's bidirectional images). */
  keyEnd?: GPUBuffer;
}

export interface MlpSpec {
  norms: Norms;
  /** The RMSNorm before the block, or none. */
  inputNorm?: string;
  activation: Activation;
  /** gate and up from one fused `gate_up_proj`, gate rows first (Phi-3). */
  fusedGateUp?: boolean;
  residualScale?: number;
  postNorm?: string;
}

/** The token embedding table, [vocab, hidden] (also the LM head where embeddings are tied). */
function embedTokens(cfg: ModelConfig): MatrixSource {
  return { prefix: 'model.embed_tokens', rows: cfg.vocab, cols: cfg.hidden };
}

/** Token embedding into the residual stream h, times `scale` (Gemma's sqrt(hidden), Granite's embedding_multiplier). */
export function embed(ctx: BuildContext, scale = 1): Dispatch[] {
  return ctx.ops.embedding(ctx.matrix(embedTokens(ctx.cfg)), ctx.meta.tokens, ctx.act.h, scale);
}

/**
 * h += post(o_proj(attention(rope(q), rope(k), v))), q, k, v = qkv_proj(input_norm(h))
 * (q and k normed first with qkNorm): qkvProjection, attend, then attentionOutput.
 */
export function attention(ctx: BuildContext, layer: number, spec: AttentionSpec): Dispatch[] {
  const qkv = qkvProjection(ctx, layer, spec);
  return [...qkv.dispatches, ...attend(ctx, layer, spec, qkv), ...attentionOutput(ctx, layer, spec)];
}

/** Where an attention block's q and k are after qkvProjection (v is act.v). */
export interface ProjectedQk {
  dispatches: Dispatch[];
  q: GPUBuffer;
  k: GPUBuffer;
}

/**
 * q, k, v = qkv_proj(input_norm(h)) into act.q, act.k, act.v, from one stacked projection
 * that applies the input norm itself; with qkNorm 'full' (OLMo 2), q and k then normed over
 * all heads into buffers of their own.
 */
export function qkvProjection(ctx: BuildContext, layer: number, spec: AttentionSpec): ProjectedQk {
  const { ops, cfg, act } = ctx;
  const p = `model.layers.${layer}.self_attn`;
  const qDim = cfg.heads * cfg.headDim;
  const kvDim = cfg.kvHeads * cfg.headDim;
  const dims = [qDim, kvDim, kvDim];
  const norm = inputNorm(ctx, layer, spec);
  const qkvNames = ['q_proj', 'k_proj', 'v_proj'].map((name) => `${p}.${name}`);
  const qkv = spec.fusedQkv
    ? fused(ctx, `${p}.qkv_proj`, dims)
    : ctx.matrix(...qkvNames.map((prefix, i) => ({ prefix, rows: dims[i]!, cols: cfg.hidden })));
  const bias = spec.qkvBias ? ctx.vector(qkvNames.map((name, i) => ({ name: `${name}.bias`, length: dims[i]! }))) : undefined;
  const dispatches: Dispatch[] = [...ops.linear(`${p}.qkv_proj`, qkv, act.h, [act.q, act.k, act.v], { bias, norm })];
  if (spec.qkNorm !== 'full') return { dispatches, q: act.q, k: act.k };
  // OLMo 2: one RMSNorm over all heads of q, and of k, before they split into heads.
  const q = ctx.scratch('q_normed', qDim);
  const k = ctx.scratch('k_normed', kvDim);
  dispatches.push(
    ops.rmsnorm(`${p}.q_norm`, act.q, normWeight(ctx, `${p}.q_norm`, spec.norms, qDim), q, { width: qDim, eps: spec.norms.eps }),
    ops.rmsnorm(`${p}.k_norm`, act.k, normWeight(ctx, `${p}.k_norm`, spec.norms, kvDim), k, { width: kvDim, eps: spec.norms.eps }),
  );
  return { dispatches, q, k };
}

/**
 * act.attn = attention(rope(q), rope(k), act.v) over the layer's KV cache: the per-head q/k
 * norm (qkNorm 'head'), RoPE and KV-cache write in one kernel, then the attention kernel.
 */
export function attend(ctx: BuildContext, layer: number, spec: AttentionSpec, { q, k }: Pick<ProjectedQk, 'q' | 'k'>): Dispatch[] {
  const { ops, cfg, act, kv, meta } = ctx;
  const p = `model.layers.${layer}.self_attn`;
  const headNorm = spec.qkNorm === 'head'
    ? ctx.vector(['q_norm', 'k_norm'].map((n) => ({ name: `${p}.${n}.weight`, length: cfg.headDim })), spec.norms.plusOne ? 1 : 0)
    : undefined;
  const rope = spec.rope ? ctx.rope(spec.rope) : { rotaryDim: 0 };
  return ops.attention(p, {
    q, k, v: act.v, heads: cfg.heads, kvHeads: cfg.kvHeads, kCache: kv.k[layer]!, vCache: kv.v[layer]!, blockSize: kv.blockSize,
  }, act.attn, {
    headDim: cfg.headDim, ...rope, headNorm, eps: spec.norms.eps, scale: spec.scale, window: spec.window, softcap: spec.softcap,
    sinks: spec.sinks ? ctx.vector({ name: `${p}.sinks`, length: cfg.heads }) : undefined,
  }, spec.keyEnd ? { ...meta, keyEnd: spec.keyEnd } : meta);
}

/** h += post(o_proj(act.attn)): without a post-norm the residual add is o_proj's accumulate. */
export function attentionOutput(ctx: BuildContext, layer: number, spec: AttentionSpec): Dispatch[] {
  const { cfg, act } = ctx;
  const p = `model.layers.${layer}.self_attn`;
  const oProj = ctx.matrix({ prefix: `${p}.o_proj`, rows: cfg.hidden, cols: cfg.heads * cfg.headDim });
  const bias = spec.oBias ? ctx.vector({ name: `${p}.o_proj.bias`, length: cfg.hidden }) : undefined;
  return residual(ctx, `${p}.o_proj`, oProj, act.attn, spec, postNorm(ctx, layer, spec), bias);
}

/**
 * h += post(down(act(gate(xn)) * up(xn))), xn = input_norm(h): gatedProjection, then the
 * down projection's residual. The block's norms load before its projections.
 */
export function mlp(ctx: BuildContext, layer: number, spec: MlpSpec): Dispatch[] {
  const p = `model.layers.${layer}.mlp`;
  const norm = inputNorm(ctx, layer, spec);
  const post = postNorm(ctx, layer, spec);
  const gated = gatedProjection(ctx, layer, spec, norm);
  const down = ctx.matrix({ prefix: `${p}.down_proj`, rows: ctx.cfg.hidden, cols: ctx.cfg.intermediate });
  return [...gated, ...residual(ctx, `${p}.down_proj`, down, ctx.act.gate, spec, post)];
}

/**
 * act.gate = act(gate(xn)) * up(xn), xn = norm(h) (the block's inputNorm): gate and up
 * from one projection that applies the norm to its input itself (and the GLU to its
 * output, where the format allows: Ops.gatedLinear).
 */
export function gatedProjection(ctx: BuildContext, layer: number, spec: MlpSpec, norm: LinearNorm | undefined): Dispatch[] {
  const { ops, cfg, act } = ctx;
  const p = `model.layers.${layer}.mlp`;
  const I = cfg.intermediate;
  const fusedHalf = (first: number): MatrixSource => ({ prefix: `${p}.gate_up_proj`, rows: 2 * I, cols: cfg.hidden, slice: { first, rows: I } });
  const gateUp = spec.fusedGateUp
    ? ctx.gluMatrix(fusedHalf(0), fusedHalf(I))
    : ctx.gluMatrix({ prefix: `${p}.gate_proj`, rows: I, cols: cfg.hidden }, { prefix: `${p}.up_proj`, rows: I, cols: cfg.hidden });
  return ops.gatedLinear(`${p}.gate_up_proj`, gateUp, act.h, act.gate, act.up, { norm, activation: spec.activation });
}

/**
 * How a mixture-of-experts block routes and what its experts are. The block lives under
 * model.layers.N.<block>: the router `<block>.<router>` [experts, hidden], and the experts
 * either one by one as transformers writes them (`<block>.experts.E.<gate|up|down>`) or
 * stacked with a leading expert dimension as mlx-lm does (`<block>.switch_mlp.gate_proj`,
 * `up_proj`, `down_proj`).
 */
export interface MoeSpec {
  norms: Norms;
  /** The RMSNorm before the block. */
  inputNorm: string;
  block: string;
  router: string;
  /** The per-expert projections' names: Qwen's gate_proj / up_proj / down_proj, Mixtral's w1 / w3 / w2. */
  projections: { gate: string; up: string; down: string };
  experts: number;
  topK: number;
  /** Each expert's intermediate size. */
  intermediate: number;
  /**
   * How the chosen experts' weights come from the router logits: softmax over all experts
   * then the top k ('softmax_topk'; with `renormalize` divided by their sum), or the top k
   * logits then a softmax over them ('topk_softmax').
   */
  routing: MoeRouting;
  renormalize: boolean;
  activation: Activation;
  /** A bias on the router (`<block>.<router>.bias`: GPT-OSS). */
  routerBias?: boolean;
  /** A bias on each expert's projections (GPT-OSS), beside its weights (expertWeights). */
  expertBias?: boolean;
  /** The experts may be stored fused as GPT-OSS publishes them (expertWeights). */
  fusedExperts?: boolean;
  /** GPT-OSS's clamped GLU: act(min(gate, limit)) * (clamp(up, -limit, limit) + 1). */
  gluLimit?: number;
}

/**
 * h += sum over the token's top-k experts e of weight_e * down_e(act(gate_e(xn)) * up_e(xn)),
 * xn = input_norm(h). The router's logits, the top-k choice and the weights, and the
 * grouping of the (token, expert) pairs by expert are computed on the GPU (Ops.moeRoute);
 * each expert's projections then run over its own tokens only, reading its weights once
 * per tile of tokens and never for an expert no token chose (Ops.moeMatmul); the weighted
 * sum adds into h (Ops.moeCombine).
 */
export function moe(ctx: BuildContext, layer: number, spec: MoeSpec): Dispatch[] {
  const { ops, cfg, act } = ctx;
  const p = `model.layers.${layer}.${spec.block}`;
  const { experts, topK, intermediate: I } = spec;
  const normName = `model.layers.${layer}.${spec.inputNorm}`;
  const norm = normWeight(ctx, normName, spec.norms);
  const router = ctx.matrix({ prefix: `${p}.${spec.router}`, rows: experts, cols: cfg.hidden });
  const routerBias = spec.routerBias ? ctx.vector({ name: `${p}.${spec.router}.bias`, length: experts }) : undefined;
  const { gateUp, down, gateUpBias, downBias, interleaved } = expertWeights(ctx, p, spec);
  // Buffers shared by every MoE layer (they run one after another).
  const logits = ctx.scratch('moe.router_logits', experts);
  const routes: MoeRoutes = {
    experts, topK, ranges: ctx.scratch('moe.ranges', 2 * experts, 1), slots: ctx.scratch('moe.slots', 2 * topK), weights: ctx.scratch('moe.weights', topK),
  };
  const hidden = ctx.scratch('moe.hidden', topK * I);
  const out = ctx.scratch('moe.out', topK * cfg.hidden);
  return [
    ops.rmsnorm(normName, act.h, norm, act.xn, { width: cfg.hidden, eps: spec.norms.eps }),
    ...ops.linear(`${p}.${spec.router}`, router, act.xn, logits, { bias: routerBias }),
    ops.moeRoute(`${p}.route`, logits, routes, { routing: spec.routing, renormalize: spec.renormalize }),
    ...ops.moeMatmul(`${p}.experts.gate_up`, gateUp, act.xn, hidden, routes, {
      glu: spec.activation, bias: gateUpBias, interleaved, limit: spec.gluLimit,
    }),
    ...ops.moeMatmul(`${p}.experts.down`, down, hidden, out, routes, { perSlot: true, bias: downBias }),
    ops.moeCombine(`${p}.combine`, out, routes, act.h, cfg.hidden),
  ];
}

/** The experts' weights as Ops.moeMatmul takes them, and their biases (MoeSpec.expertBias). */
interface ExpertWeights {
  gateUp: GpuWeight;
  down: GpuWeight;
  gateUpBias?: GPUBuffer;
  downBias?: GPUBuffer;
  /** gateUp's gate and up rows alternate (GPT-OSS's gate_up_proj). */
  interleaved: boolean;
}

/**
 * The experts' matrices stacked over the experts (Ops.moeMatmul): each expert's gate rows
 * then its up rows, and the down projections, with their biases [experts, rows] in the same
 * order; from where the checkpoint keeps them: one by one as transformers writes them
 * (`experts.E.<gate>`), stacked with a leading expert dimension as mlx-lm writes them
 * (`switch_mlp.gate_proj`, or for GPT-OSS `experts.gate_proj`), or with fusedExperts as
 * GPT-OSS publishes them (`experts.gate_up_proj` MXFP4 with gate and up rows alternating,
 * `experts.down_proj`, `_bias` beside each).
 */
function expertWeights(ctx: BuildContext, p: string, spec: MoeSpec): ExpertWeights {
  const H = ctx.cfg.hidden;
  const { experts: E, intermediate: I, projections } = spec;
  const experts = Array.from({ length: E }, (_, e) => e);
  const biases = (sources: VectorSource[]) => (spec.expertBias ? ctx.vector(sources) : undefined);
  if (spec.fusedExperts && ctx.has(`${p}.experts.gate_up_proj_blocks`)) {
    const fused = (name: string, rows: number, cols: number) =>
      ctx.experts(experts.map((e) => [{ prefix: `${p}.experts.${name}`, rows: E * rows, cols, slice: { first: e * rows, rows } }]));
    return {
      gateUp: fused('gate_up_proj', 2 * I, H), down: fused('down_proj', H, I), interleaved: true,
      gateUpBias: biases([{ name: `${p}.experts.gate_up_proj_bias`, length: E * 2 * I }]),
      downBias: biases([{ name: `${p}.experts.down_proj_bias`, length: E * H }]),
    };
  }
  const perExpert = ctx.has(`${p}.experts.0.${projections.gate}.weight`);
  const under = ctx.has(`${p}.experts.gate_proj.weight`) ? 'experts' : 'switch_mlp';
  const prefix = (e: number, name: 'gate' | 'up' | 'down') => (perExpert ? `${p}.experts.${e}.${projections[name]}` : `${p}.${under}.${name}_proj`);
  const source = (e: number, name: 'gate' | 'up' | 'down', rows: number, cols: number): MatrixSource => (perExpert
    ? { prefix: prefix(e, name), rows, cols }
    : { prefix: prefix(e, name), rows: E * rows, cols, slice: { first: e * rows, rows } });
  const bias = (e: number, name: 'gate' | 'up' | 'down', rows: number): VectorSource => (perExpert
    ? { name: `${prefix(e, name)}.bias`, length: rows }
    : { name: `${prefix(e, name)}.bias`, length: E * rows, slice: { first: e * rows, length: rows } });
  return {
    gateUp: ctx.experts(experts.map((e) => [source(e, 'gate', I, H), source(e, 'up', I, H)])),
    down: ctx.experts(experts.map((e) => [source(e, 'down', H, I)])),
    gateUpBias: biases(experts.flatMap((e) => [bias(e, 'gate', I), bias(e, 'up', I)])),
    downBias: biases(experts.map((e) => bias(e, 'down', H))),
    interleaved: false,
  };
}

/** A block's norm of its output before the residual add, if it has one. */
function postNorm(ctx: BuildContext, layer: number, spec: AttentionSpec | MlpSpec): { name: string; weight: GPUBuffer } | undefined {
  if (!spec.postNorm) return undefined;
  const name = `model.layers.${layer}.${spec.postNorm}`;
  return { name, weight: normWeight(ctx, name, spec.norms) };
}

/**
 * h += post(x W^T + bias) * scale: with a post-norm, the projection into xn and the norm's
 * accumulate into h; without, the projection's own accumulate.
 */
export function residual(ctx: BuildContext, label: string, w: GpuWeight, x: GPUBuffer, spec: AttentionSpec | MlpSpec, post?: { name: string; weight: GPUBuffer }, bias?: GPUBuffer): Dispatch[] {
  const { ops, cfg, act } = ctx;
  if (!post) return ops.linear(label, w, x, act.h, { accumulate: true, scale: spec.residualScale, bias });
  return [
    ...ops.linear(label, w, x, act.xn, { scale: spec.residualScale, bias }),
    ops.rmsnorm(post.name, act.xn, post.weight, act.h, { width: cfg.hidden, eps: spec.norms.eps, accumulate: true }),
  ];
}

/** One fused projection's rows as the matrices it stacks (segments: their row counts). */
function fused(ctx: BuildContext, prefix: string, segments: number[]): GpuWeight {
  const rows = segments.reduce((a, b) => a + b, 0);
  let first = 0;
  return ctx.matrix(...segments.map((n) => ({ prefix, rows, cols: ctx.cfg.hidden, slice: { first: (first += n) - n, rows: n } })));
}

/** The weight of RMSNorm `name` over `width` values (default: hidden). */
function normWeight(ctx: BuildContext, name: string, norms: Norms, width = ctx.cfg.hidden): GPUBuffer {
  return ctx.vector({ name: `${name}.weight`, length: width }, norms.plusOne ? 1 : 0);
}

/** The RMSNorm before a block (its inputNorm), for the block's first projection to apply. */
export function inputNorm(ctx: BuildContext, layer: number, spec: AttentionSpec | MlpSpec): LinearNorm | undefined {
  if (!spec.inputNorm) return undefined;
  return { weight: normWeight(ctx, `model.layers.${layer}.${spec.inputNorm}`, spec.norms), eps: spec.norms.eps, out: ctx.act.xn };
}

export interface HeadSpec {
  norms: Norms;
  /** Logits times this (Granite's 1 / logits_scaling). */
  scale?: number;
  /** Final logit soft-capping (Gemma 2). */
  softcap?: number;
}

/**
 * Final norm, LM head (lm_head, or the tied embedding), penalties and sampling, for each
 * sequence's last token only: prefill never computes logits it would throw away. An
 * embedding model's head instead norms every token, pools each sequence's rows into one
 * vector and normalises it (BuildContext.pooled).
 */
export function head(ctx: BuildContext, spec: HeadSpec): Dispatch[] {
  const { ops, cfg, act, meta } = ctx;
  const norm = normWeight(ctx, 'model.norm', spec.norms);
  const lmHead = !cfg.tieEmbeddings && ctx.has('lm_head.weight') ? { prefix: 'lm_head', rows: cfg.vocab, cols: cfg.hidden } : embedTokens(cfg);
  if (ctx.pooled?.mode === 'rank') {
    // A generative reranker (Qwen3-Reranker): logit(yes) - logit(no) at each sequence's last
    // token, whose sigmoid is P(yes) over the pair; two one-row slices of the LM head.
    const { out, rankTokens } = ctx.pooled;
    if (!rankTokens) throw new Error(`${cfg.modelType}: a generative reranker needs its yes/no token ids`);
    const row = (id: number) => ctx.matrix({ ...lmHead, slice: { first: id, rows: 1 } });
    return [
      ops.rmsnorm('model.norm', act.h, norm, act.headIn, { width: cfg.hidden, eps: spec.norms.eps, seqLast: meta.seqLast }),
      ...ops.linear('rank.yes', row(rankTokens.yes), act.headIn, out, { perSeq: true, scale: spec.scale, softcap: spec.softcap }),
      ...ops.linear('rank.no', row(rankTokens.no), act.headIn, out, { perSeq: true, scale: -(spec.scale ?? 1), softcap: spec.softcap, accumulate: true }),
    ];
  }
  if (ctx.pooled) {
    const { mode, out, norms } = ctx.pooled;
    return [
      ops.rmsnorm('model.norm', act.h, norm, act.xn, { width: cfg.hidden, eps: spec.norms.eps }),
      ops.pool(act.xn, meta.seqLast, out, cfg.hidden, mode),
      ops.embdNormalize(out, norms, cfg.hidden),
    ];
  }
  return [
    ops.rmsnorm('model.norm', act.h, norm, act.headIn, { width: cfg.hidden, eps: spec.norms.eps, seqLast: meta.seqLast }),
    ...ops.linear('lm_head', ctx.matrix(lmHead), act.headIn, act.logits, { perSeq: true, scale: spec.scale, softcap: spec.softcap }),
    ops.logitBias(act.logits, cfg.vocab, meta.biasEntries),
    ops.sample(act.logits, cfg.vocab, meta),
  ];
}
