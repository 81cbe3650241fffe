// The layer vocabulary the decoder families compose (src/models/<family>.ts), each layer
// recording its dispatches; the math is in src/kernels. A layer's spec names what varies
// between families: norms before and after a block, the activation, the RoPE (or none),
// a sliding window, soft-capping, scalar multipliers, biases, fused projections. Layers name
// their tensors as transformers' decoders do (model.embed_tokens, model.layers.N.self_attn.*,
// model.layers.N.mlp.*, model.norm, lm_head), each with the shape config.json gives it; a
// family's layouts (Family.layouts) say where other checkpoints keep them.
import type { Activation, LinearNorm } from '../runtime/ops/linear.js';
import type { Dispatch } from '../runtime/program.js';
import type { GpuWeight } from '../runtime/tensors.js';
import type { MatrixSource } from './checkpoint.js';
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
  /** o_proj's output times this before the residual add (Granite's residual_multiplier). */
  residualScale?: number;
  /** A norm of the block's output before the residual add (Gemma's post_attention_layernorm, OLMo 2's). */
  postNorm?: string;
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
 * (q and k normed first with qkNorm). q, k and v come from one stacked projection, which
 * applies the input norm itself; the per-head q/k norm, RoPE and KV-cache write are one
 * kernel; without a post-norm the residual add is o_proj's accumulate.
 */
export function attention(ctx: BuildContext, layer: number, spec: AttentionSpec): Dispatch[] {
  const { ops, cfg, act, kv, meta } = ctx;
  const p = `model.layers.${layer}.self_attn`;
  const qDim = cfg.heads * cfg.headDim;
  const kvDim = cfg.kvHeads * cfg.headDim;
  const dims = [qDim, kvDim, kvDim];
  const norm = spec.inputNorm ? linearNorm(ctx, `model.layers.${layer}.${spec.inputNorm}`, spec.norms) : undefined;
  const qkvNames = ['q_proj', 'k_proj', 'v_proj'].map((name) => `${p}.${name}`);
  const qkv = spec.fusedQkv
    ? fused(ctx, `${p}.qkv_proj`, dims)
    : ctx.matrix(...qkvNames.map((prefix, i) => ({ prefix, rows: dims[i]!, cols: cfg.hidden })));
  const bias = spec.qkvBias ? ctx.vector(qkvNames.map((name, i) => ({ name: `${name}.bias`, length: dims[i]! }))) : undefined;
  const d: Dispatch[] = [...ops.linear(`${p}.qkv_proj`, qkv, act.h, [act.q, act.k, act.v], { bias, norm })];
  let { q, k } = act;
  if (spec.qkNorm === 'full') {
    // OLMo 2: one RMSNorm over all heads of q, and of k, before they split into heads.
    const qn = ctx.scratch('q_normed', qDim);
    const kn = ctx.scratch('k_normed', kvDim);
    d.push(
      ops.rmsnorm(`${p}.q_norm`, q, normWeight(ctx, `${p}.q_norm`, spec.norms, qDim), qn, { width: qDim, eps: spec.norms.eps }),
      ops.rmsnorm(`${p}.k_norm`, k, normWeight(ctx, `${p}.k_norm`, spec.norms, kvDim), kn, { width: kvDim, eps: spec.norms.eps }),
    );
    [q, k] = [qn, kn];
  }
  const headNorm = spec.qkNorm === 'head'
    ? ctx.vector(['q_norm', 'k_norm'].map((n) => ({ name: `${p}.${n}.weight`, length: cfg.headDim })), spec.norms.plusOne ? 1 : 0)
    : undefined;
  const rope = spec.rope ? ctx.rope(spec.rope) : { rotaryDim: 0 };
  d.push(...ops.attention(p, {
    q, k, v: act.v, heads: cfg.heads, kvHeads: cfg.kvHeads, cache: kv.layers[layer]!, blockSize: kv.blockSize,
  }, act.attn, {
    headDim: cfg.headDim, ...rope, headNorm, eps: spec.norms.eps, scale: spec.scale, window: spec.window, softcap: spec.softcap,
  }, meta));
  const oProj = ctx.matrix({ prefix: `${p}.o_proj`, rows: cfg.hidden, cols: qDim });
  d.push(...residual(ctx, `${p}.o_proj`, oProj, act.attn, spec, postNorm(ctx, layer, spec)));
  return d;
}

/**
 * h += post(down(act(gate(xn)) * up(xn))), xn = input_norm(h); gate and up from one
 * projection that applies the norm to its input itself (and the GLU to its output, where
 * the format allows: Ops.gatedLinear). The block's norms load before its projections.
 */
export function mlp(ctx: BuildContext, layer: number, spec: MlpSpec): Dispatch[] {
  const { ops, cfg, act } = ctx;
  const p = `model.layers.${layer}.mlp`;
  const I = cfg.intermediate;
  const norm = spec.inputNorm ? linearNorm(ctx, `model.layers.${layer}.${spec.inputNorm}`, spec.norms) : undefined;
  const post = postNorm(ctx, layer, spec);
  const fusedHalf = (first: number): MatrixSource => ({ prefix: `${p}.gate_up_proj`, rows: 2 * I, cols: cfg.hidden, slice: { first, rows: I } });
  const gateUp = spec.fusedGateUp
    ? ctx.gluMatrix(fusedHalf(0), fusedHalf(I))
    : ctx.gluMatrix({ prefix: `${p}.gate_proj`, rows: I, cols: cfg.hidden }, { prefix: `${p}.up_proj`, rows: I, cols: cfg.hidden });
  const down = ctx.matrix({ prefix: `${p}.down_proj`, rows: cfg.hidden, cols: I });
  return [
    ...ops.gatedLinear(`${p}.gate_up_proj`, gateUp, act.h, act.gate, act.up, { norm, activation: spec.activation }),
    ...residual(ctx, `${p}.down_proj`, down, act.gate, spec, post),
  ];
}

/** A block's norm of its output before the residual add, if it has one. */
function postNorm(ctx: BuildContext, layer: number, spec: AttentionSpec | MlpSpec): { name: string; weight: GPUBuffer } | undefined {
  if (!spec.postNorm) return undefined;
  const name = `model.layers.${layer}.${spec.postNorm}`;
  return { name, weight: normWeight(ctx, name, spec.norms) };
}

/**
 * h += post(x W^T) * scale: with a post-norm, the projection into xn and the norm's
 * accumulate into h; without, the projection's own accumulate.
 */
function residual(ctx: BuildContext, label: string, w: GpuWeight, x: GPUBuffer, spec: AttentionSpec | MlpSpec, post?: { name: string; weight: GPUBuffer }): Dispatch[] {
  const { ops, cfg, act } = ctx;
  if (!post) return ops.linear(label, w, x, act.h, { accumulate: true, scale: spec.residualScale });
  return [
    ...ops.linear(label, w, x, act.xn, { scale: spec.residualScale }),
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

/** The RMSNorm `name` before a block, for the block's first projection to apply. */
function linearNorm(ctx: BuildContext, name: string, norms: Norms): LinearNorm {
  return { weight: normWeight(ctx, name, norms), eps: norms.eps, out: ctx.act.xn };
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
