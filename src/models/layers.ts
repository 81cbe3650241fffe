// The layers every decoder family here shares, each recording its dispatches. Families
// compose them (see llama.ts); the math is in src/kernels.
import type { LinearNorm } from '../runtime/ops.js';
import type { Dispatch } from '../runtime/program.js';
import type { BuildContext } from './model.js';

export interface AttentionOptions {
  /** q/k/v projections carry a bias (Qwen2). */
  qkvBias?: boolean;
  /** Per-head RMSNorm of q and k before RoPE (Qwen3). */
  qkNorm?: boolean;
}

/** Token embedding into the residual stream h. */
export function embed(ctx: BuildContext): Dispatch[] {
  return ctx.ops.embedding(ctx.matrix('model.embed_tokens'), ctx.meta.tokens, ctx.act.h);
}

/**
 * h += o_proj(attention(rope(q), rope(k), v)) over input_layernorm(h) (q and k per-head
 * normed first with qkNorm). q, k and v come from one stacked projection, which applies
 * the norm to its input itself.
 */
export function selfAttention(ctx: BuildContext, layer: number, options: AttentionOptions = {}): Dispatch[] {
  const { ops, cfg, act, kv, meta } = ctx;
  const p = `model.layers.${layer}.self_attn`;
  const qkv = ['q_proj', 'k_proj', 'v_proj'].map((name) => `${p}.${name}`);
  const bias = options.qkvBias ? ctx.vector(...qkv.map((name) => `${name}.bias`)) : undefined;
  const inputNorm = norm(ctx, `model.layers.${layer}.input_layernorm`);
  const d: Dispatch[] = [...ops.linear(`${p}.qkv_proj`, ctx.matrix(...qkv), act.h, [act.q, act.k, act.v], { bias, norm: inputNorm })];
  const headNorm = options.qkNorm ? ctx.vector(`${p}.q_norm.weight`, `${p}.k_norm.weight`) : undefined;
  d.push(
    ...ops.attention(p, {
      q: act.q, k: act.k, v: act.v, heads: cfg.heads, kvHeads: cfg.kvHeads, kCache: kv.k[layer], vCache: kv.v[layer], blockSize: kv.blockSize,
    }, act.attn, { headDim: cfg.headDim, invFreq: ctx.invFreq, headNorm, eps: cfg.rmsEps, scale: 1 / Math.sqrt(cfg.headDim) }, meta),
    ...ops.linear(`${p}.o_proj`, ctx.matrix(`${p}.o_proj`), act.attn, act.h, { accumulate: true }),
  );
  return d;
}

/**
 * h += down(silu(gate(xn)) * up(xn)), xn = post_attention_layernorm(h), gate and up from
 * one projection that applies the norm to its input itself (and the SwiGLU to its output,
 * where the format allows: Ops.gatedLinear).
 */
export function swigluMlp(ctx: BuildContext, layer: number): Dispatch[] {
  const { ops, act } = ctx;
  const p = `model.layers.${layer}.mlp`;
  const inputNorm = norm(ctx, `model.layers.${layer}.post_attention_layernorm`);
  return [
    ...ops.gatedLinear(`${p}.gate_up_proj`, ctx.gluMatrix(`${p}.gate_proj`, `${p}.up_proj`), act.h, act.gate, act.up, { norm: inputNorm }),
    ...ops.linear(`${p}.down_proj`, ctx.matrix(`${p}.down_proj`), act.gate, act.h, { accumulate: true }),
  ];
}

/** The RMSNorm `name` before a block, for the block's first projection to apply. */
function norm(ctx: BuildContext, name: string): LinearNorm {
  return { weight: ctx.vector(`${name}.weight`), eps: ctx.cfg.rmsEps, out: ctx.act.xn };
}

/**
 * Final norm, LM head, penalties and sampling, for each sequence's last token only:
 * prefill never computes logits it would throw away.
 */
export function headAndSample(ctx: BuildContext): Dispatch[] {
  const { ops, cfg, act, meta } = ctx;
  const lmHead = ctx.has('lm_head.weight') ? ctx.matrix('lm_head') : ctx.matrix('model.embed_tokens');
  return [
    ops.rmsnorm('model.norm', act.h, ctx.vector('model.norm.weight'), act.headIn, { width: cfg.hidden, eps: cfg.rmsEps, seqLast: meta.seqLast }),
    ...ops.linear('lm_head', lmHead, act.headIn, act.logits, { perSeq: true }),
    ops.logitBias(act.logits, cfg.vocab, meta.biasEntries),
    ops.sample(act.logits, cfg.vocab, meta),
  ];
}
