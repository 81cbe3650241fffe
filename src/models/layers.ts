// The layer vocabulary the decoder families compose (src/models/<family>.ts), each layer
// recording its dispatches; the math is in src/kernels. A layer's spec names what varies
// between families: norms before and after a block, the activation, the RoPE (or none),
// soft-capping, scalar multipliers, biases, fused projections. Beside
// attention and the MLPs are the recurrent layers (Mamba-2, LFM2's short convolution), whose
// kernels continue each sequence from its state slot (BuildContext.state). Layers name
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

/** Where a family keeps an attention block's tensors, where not transformers' usual names. */
export interface AttentionNames {
  /** The block under the layer: self_attn by default (Nemotron-H's mixer). */
  block?: string;
  /** The output projection: o_proj by default (LFM2's out_proj). */
  out?: string;
  /** The per-head q and k norms: q_norm and k_norm by default (LFM2's q_layernorm, k_layernorm). */
  qNorm?: string;
  kNorm?: string;
}

export interface AttentionSpec {
  norms: Norms;
  names?: AttentionNames;
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
  /** Multimodal RoPE (Qwen2.5-VL): each pair turns by the position stream its section names (RopeOptions.mrope), positions from BuildContext.mropePositions. */
  mrope?: { sections: readonly [number, number]; positions: GPUBuffer };
}

export interface MlpSpec {
  norms: Norms;
  /** The RMSNorm before the block, or none. */
  inputNorm?: string;
  activation: Activation;
  /** gate and up from one fused `gate_up_proj`, gate rows first (Phi-3). */
  fusedGateUp?: boolean;
  /**
   * The block and its projections where not mlp.gate_proj / up_proj / down_proj, or
   * gate_up_proj with fusedGateUp (LFM2's feed_forward.w1 / w3 / w2, Granite 4.0-H's
   * shared_mlp.input_linear / output_linear).
   */
  names?: { block?: string; gate?: string; up?: string; down?: string; gateUp?: string };
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
  const p = attentionBlock(layer, spec);
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
 * norm (qkNorm 'head'), RoPE and KV-cache write in one kernel, then the attention kernel,
 * over the last positions the layer keeps where it is a sliding-window one (cfg.layerKv).
 */
export function attend(ctx: BuildContext, layer: number, spec: AttentionSpec, { q, k }: Pick<ProjectedQk, 'q' | 'k'>): Dispatch[] {
  const { ops, cfg, act, kv, meta } = ctx;
  const p = attentionBlock(layer, spec);
  const headNorm = spec.qkNorm === 'head'
    ? ctx.vector([spec.names?.qNorm ?? 'q_norm', spec.names?.kNorm ?? 'k_norm'].map((n) => ({ name: `${p}.${n}.weight`, length: cfg.headDim })), spec.norms.plusOne ? 1 : 0)
    : undefined;
  const rope = spec.rope ? ctx.rope(spec.rope) : { rotaryDim: 0 };
  const layerKv = cfg.layerKv[layer]!;
  const cache = kv.layers[layer];
  if (layerKv === 'none' || !cache) throw new Error(`layer ${layer} attends but declares no KV cache`);
  return ops.attention(p, {
    q, k, v: act.v, heads: cfg.heads, kvHeads: cfg.kvHeads, cache, blockSize: kv.blockSize,
  }, act.attn, {
    headDim: cfg.headDim, ...rope, headNorm, eps: spec.norms.eps, scale: spec.scale, window: layerKv === 'full' ? 0 : layerKv.window, softcap: spec.softcap,
    sinks: spec.sinks ? ctx.vector({ name: `${p}.sinks`, length: cfg.heads }) : undefined, mrope: spec.mrope,
  }, { ...meta, keyEnd: spec.keyEnd, ropePos: spec.mrope?.positions });
}

/** h += post(o_proj(act.attn)): without a post-norm the residual add is o_proj's accumulate. */
export function attentionOutput(ctx: BuildContext, layer: number, spec: AttentionSpec): Dispatch[] {
  const { cfg, act } = ctx;
  const out = `${attentionBlock(layer, spec)}.${spec.names?.out ?? 'o_proj'}`;
  const oProj = ctx.matrix({ prefix: out, rows: cfg.hidden, cols: cfg.heads * cfg.headDim });
  const bias = spec.oBias ? ctx.vector({ name: `${out}.bias`, length: cfg.hidden }) : undefined;
  return residual(ctx, out, oProj, act.attn, spec, postNorm(ctx, layer, spec), bias);
}

/** model.layers.N.<block> of an attention block. */
function attentionBlock(layer: number, spec: AttentionSpec): string {
  return `model.layers.${layer}.${spec.names?.block ?? 'self_attn'}`;
}

/**
 * h += post(down(act(gate(xn)) * up(xn))), xn = input_norm(h): gatedProjection, then the
 * down projection's residual. The block's norms load before its projections.
 */
export function mlp(ctx: BuildContext, layer: number, spec: MlpSpec): Dispatch[] {
  const p = `model.layers.${layer}.${spec.names?.block ?? 'mlp'}`;
  const norm = inputNorm(ctx, layer, spec);
  const post = postNorm(ctx, layer, spec);
  const gated = gatedProjection(ctx, layer, spec, norm);
  const downName = `${p}.${spec.names?.down ?? 'down_proj'}`;
  const down = ctx.matrix({ prefix: downName, rows: ctx.cfg.hidden, cols: ctx.cfg.intermediate });
  return [...gated, ...residual(ctx, downName, down, ctx.act.gate, spec, post)];
}

/**
 * act.gate = act(gate(xn)) * up(xn), xn = norm(h) (the block's inputNorm): gate and up
 * from one projection that applies the norm to its input itself (and the GLU to its
 * output, where the format allows: Ops.gatedLinear).
 */
export function gatedProjection(ctx: BuildContext, layer: number, spec: MlpSpec, norm: LinearNorm | undefined): Dispatch[] {
  const { ops, cfg, act } = ctx;
  const p = `model.layers.${layer}.${spec.names?.block ?? 'mlp'}`;
  const I = cfg.intermediate;
  const fusedHalf = (first: number): MatrixSource => ({ prefix: `${p}.${spec.names?.gateUp ?? 'gate_up_proj'}`, rows: 2 * I, cols: cfg.hidden, slice: { first, rows: I } });
  const gate = `${p}.${spec.names?.gate ?? 'gate_proj'}`;
  const up = `${p}.${spec.names?.up ?? 'up_proj'}`;
  const gateUp = spec.fusedGateUp
    ? ctx.gluMatrix(fusedHalf(0), fusedHalf(I))
    : ctx.gluMatrix({ prefix: gate, rows: I, cols: cfg.hidden }, { prefix: up, rows: I, cols: cfg.hidden });
  return ops.gatedLinear(`${p}.gate_up_proj`, gateUp, act.h, act.gate, act.up, { norm, activation: spec.activation });
}

/**
 * How a mixture-of-experts block routes and what its experts are. The block lives under
 * model.layers.N.<block>: the router `<block>.<router>` [experts, hidden], and the experts
 * either one by one as transformers writes them (`<block>.experts.E.<gate|up|down>`),
 * stacked with a leading expert dimension as mlx-lm does (`<block>.switch_mlp.gate_proj`,
 * `up_proj`, `down_proj`), or stacked with gate and up fused (`fused`: Granite's
 * input_linear [experts, 2 * intermediate, hidden], output_linear [experts, hidden, intermediate]).
 */
export interface MoeSpec {
  norms: Norms;
  /** The RMSNorm before the block. */
  inputNorm: string;
  block: string;
  router: string;
  /** The per-expert projections' names: Qwen's gate_proj / up_proj / down_proj, Mixtral's w1 / w3 / w2. */
  projections: { gate: string; up: string; down: string };
  /**
   * The experts as stored fused, where the checkpoint has them: `<block>.<gateUp>` holds each
   * expert's 2 * intermediate gate and up rows, alternating where `interleaved` (GPT-OSS's
   * experts.gate_up_proj) else gate rows then up rows (Granite's input_linear), and
   * `<block>.<down>` each expert's hidden rows; with expertBias, `<name>_bias` beside each
   * (GPT-OSS's names).
   */
  fused?: { gateUp: string; down: string; interleaved: boolean };
  /** The block's output times this before the residual add (Granite's residual_multiplier). */
  residualScale?: number;
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
    ops.moeCombine(`${p}.combine`, out, routes, act.h, cfg.hidden, spec.residualScale),
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
 * order; from where the checkpoint keeps them: fused (MoeSpec.fused) where it has those
 * tensors, one by one as transformers writes them (`experts.E.<gate>`), else stacked with a
 * leading expert dimension as mlx-lm writes them (`switch_mlp.gate_proj`, or for GPT-OSS
 * `experts.gate_proj`).
 */
function expertWeights(ctx: BuildContext, p: string, spec: MoeSpec): ExpertWeights {
  const H = ctx.cfg.hidden;
  const { experts: E, intermediate: I, projections, fused } = spec;
  const experts = Array.from({ length: E }, (_, e) => e);
  const biases = (sources: VectorSource[]) => (spec.expertBias ? ctx.vector(sources) : undefined);
  if (fused && (ctx.has(`${p}.${fused.gateUp}.weight`) || ctx.has(`${p}.${fused.gateUp}_blocks`))) {
    // Each expert's `rows` read as `parts` matrices in turn (gate then up where not interleaved).
    const stacked = (name: string, rows: number, cols: number, parts = 1): GpuWeight => ctx.experts(experts.map((e) => Array.from({ length: parts }, (_, j) => (
      { prefix: `${p}.${name}`, rows: E * rows, cols, slice: { first: e * rows + (j * rows) / parts, rows: rows / parts } }))));
    return {
      gateUp: stacked(fused.gateUp, 2 * I, H, fused.interleaved ? 1 : 2), down: stacked(fused.down, H, I), interleaved: fused.interleaved,
      gateUpBias: biases([{ name: `${p}.${fused.gateUp}_bias`, length: E * 2 * I }]),
      downBias: biases([{ name: `${p}.${fused.down}_bias`, length: E * H }]),
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

/** An MLP without a gate (Nemotron-H's): up_proj and down_proj under model.layers.N.<block>. */
export interface PlainMlpSpec {
  norms: Norms;
  inputNorm: string;
  block: string;
  activation: Activation;
}

/** h += down(act(up(input_norm(h)))). */
export function plainMlp(ctx: BuildContext, layer: number, spec: PlainMlpSpec): Dispatch[] {
  const { ops, cfg, act } = ctx;
  const p = `model.layers.${layer}.${spec.block}`;
  const norm = inputNorm(ctx, layer, spec);
  const up = ctx.matrix({ prefix: `${p}.up_proj`, rows: cfg.intermediate, cols: cfg.hidden });
  const down = ctx.matrix({ prefix: `${p}.down_proj`, rows: cfg.hidden, cols: cfg.intermediate });
  return [
    ...ops.linear(`${p}.up_proj`, up, act.h, act.gate, { norm }),
    ops.glu(act.gate, undefined, cfg.intermediate, spec.activation),
    ...ops.linear(`${p}.down_proj`, down, act.gate, act.h, { accumulate: true }),
  ];
}

/** A Mamba-2 mixer's sizes (transformers' Mamba2 / NemotronH / GraniteMoeHybrid config fields). */
export interface Mamba2Spec {
  norms: Norms;
  /** The RMSNorm before the block. */
  inputNorm: string;
  /** The mixer under the layer (mixer for Nemotron-H, mamba for Granite 4.0-H). */
  block: string;
  heads: number;
  headDim: number;
  groups: number;
  stateSize: number;
  convKernel: number;
  convBias: boolean;
  /** The gated RMSNorm's group: heads * headDim / groups (Nemotron-H), or all of it. */
  normGroup: number;
  /** out_proj's output times this before the residual add (Granite's residual_multiplier). */
  residualScale?: number;
}

/**
 * h += out_proj(gated_norm(scan(conv(xBC)), z)), [z | xBC | dt] = in_proj(input_norm(h)):
 * the causal depthwise conv over x, B and C with its cached last convKernel - 1 inputs and
 * SiLU (Ops.ssmConv), the selective scan per head from the sequence's SSM state (Ops.ssmScan:
 * softplus(dt + dt_bias), A = -exp(A_log), D skip), y * silu(z) normed per group
 * (Ops.rmsnormGated), the output projection into the residual.
 */
export function mamba2(ctx: BuildContext, layer: number, spec: Mamba2Spec): Dispatch[] {
  const { ops, cfg, act, meta } = ctx;
  const p = `model.layers.${layer}.${spec.block}`;
  const { heads: H, headDim: P, groups: G, stateSize: N, convKernel: K } = spec;
  const inner = H * P;
  const convDim = inner + 2 * G * N;
  const projWidth = 2 * inner + 2 * G * N + H;
  const norm = inputNorm(ctx, layer, spec);
  const inProj = ctx.matrix({ prefix: `${p}.in_proj`, rows: projWidth, cols: cfg.hidden });
  const convW = ctx.vector({ name: `${p}.conv1d.weight`, length: convDim * K, shape: [convDim, 1, K] });
  const convB = spec.convBias ? ctx.vector({ name: `${p}.conv1d.bias`, length: convDim }) : undefined;
  const weights = {
    aLog: ctx.vector({ name: `${p}.A_log`, length: H }),
    d: ctx.vector({ name: `${p}.D`, length: H }),
    dtBias: ctx.vector({ name: `${p}.dt_bias`, length: H }),
  };
  const normW = ctx.vector({ name: `${p}.norm.weight`, length: inner });
  const outProj = ctx.matrix({ prefix: `${p}.out_proj`, rows: cfg.hidden, cols: inner });
  // Buffers shared by every Mamba-2 layer (they run one after another).
  const proj = ctx.scratch('mamba2.in_proj', projWidth);
  const xbc = ctx.scratch('mamba2.xbc', convDim);
  const y = ctx.scratch('mamba2.y', inner);
  const convState = ctx.state(`${p}.conv_state`, (K - 1) * convDim);
  const ssmState = ctx.state(`${p}.ssm_state`, inner * N);
  return [
    ...ops.linear(`${p}.in_proj`, inProj, act.h, proj, { norm }),
    ops.ssmConv(`${p}.conv1d`, meta.chunks, proj, convW, convState, xbc, { channels: convDim, inStride: projWidth, inOffset: inner, kernel: K, gated: false, bias: convB }),
    ...ops.ssmScan(`${p}.scan`, meta.chunks, xbc, proj, weights, ssmState, y, {
      heads: H, headDim: P, groups: G, stateSize: N, convDim, projStride: projWidth, dtOffset: inner + convDim,
    }),
    ops.rmsnormGated(`${p}.norm`, y, proj, normW, { width: inner, group: spec.normGroup, zStride: projWidth, eps: spec.norms.eps }),
    ...ops.linear(`${p}.out_proj`, outProj, y, act.h, { accumulate: true, scale: spec.residualScale }),
  ];
}

/** LFM2's short convolution block under model.layers.N.conv. */
export interface ShortConvSpec {
  norms: Norms;
  inputNorm: string;
  /** conv_L_cache: the conv's kernel length. */
  kernel: number;
}

/**
 * h += out_proj(C * conv(B * x)), [B | C | x] = in_proj(input_norm(h)): a gated causal
 * depthwise conv over hidden channels with its cached last kernel - 1 inputs (Ops.ssmConv).
 */
export function shortConv(ctx: BuildContext, layer: number, spec: ShortConvSpec): Dispatch[] {
  const { ops, cfg, act, meta } = ctx;
  const p = `model.layers.${layer}.conv`;
  const H = cfg.hidden;
  const norm = inputNorm(ctx, layer, spec);
  const inProj = ctx.matrix({ prefix: `${p}.in_proj`, rows: 3 * H, cols: H });
  const convW = ctx.vector({ name: `${p}.conv.weight`, length: H * spec.kernel, shape: [H, 1, spec.kernel] });
  const outProj = ctx.matrix({ prefix: `${p}.out_proj`, rows: H, cols: H });
  const bcx = ctx.scratch('short_conv.in_proj', 3 * H);
  const y = ctx.scratch('short_conv.y', H);
  const state = ctx.state(`${p}.conv_state`, (spec.kernel - 1) * H);
  return [
    ...ops.linear(`${p}.in_proj`, inProj, act.h, bcx, { norm }),
    ops.ssmConv(`${p}.conv`, meta.chunks, bcx, convW, state, y, { channels: H, inStride: 3 * H, inOffset: 0, kernel: spec.kernel, gated: true }),
    ...ops.linear(`${p}.out_proj`, outProj, y, act.h, { accumulate: true }),
  ];
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
export function inputNorm(ctx: BuildContext, layer: number, spec: { inputNorm?: string; norms: Norms }): LinearNorm | undefined {
  if (!spec.inputNorm) return undefined;
  return { weight: normWeight(ctx, `model.layers.${layer}.${spec.inputNorm}`, spec.norms), eps: spec.norms.eps, out: ctx.act.xn };
}

export interface HeadSpec {
  norms: Norms;
  /** Logits times this (Granite's 1 / logits_scaling). */
  scale?: number;
  /** Final logit soft-capping (Gemma 2). */
  softcap?: number;
  /** The final norm's name: model.norm by default (LFM2's model.embedding_norm). */
  finalNorm?: string;
}

/**
 * Final norm, LM head (lm_head, or the tied embedding), penalties and sampling, for each
 * sequence's last token only: prefill never computes logits it would throw away. An
 * embedding model's head instead norms every token, pools each sequence's rows into one
 * vector and normalises it (BuildContext.pooled).
 */
export function head(ctx: BuildContext, spec: HeadSpec): Dispatch[] {
  const { ops, cfg, act, meta } = ctx;
  const norm = normWeight(ctx, spec.finalNorm ?? 'model.norm', spec.norms);
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
