// BERT-style encoders (BERT, XLM-RoBERTa: all-MiniLM, bge, e5, gte, bge-reranker): the sum
// of word, absolute position and token-type embeddings, LayerNorm; per layer bidirectional
// attention with biased q/k/v/o projections, then a post-norm residual (h = LN(h + attn)),
// a GELU MLP, and another (h = LN(h + mlp)). No final norm: the head pools h. XLM-R's
// position table starts at pad_token_id + 1 (row 0 and 1 are padding), so its rows are
// read from there. Encoders are served as embedding models only (BuildContext.pooled).
import { Program, type Dispatch } from '../runtime/program.js';
import type { BuildContext, Family } from './model.js';

/** Where a checkpoint keeps the encoder: bare (sentence-transformers), or under its task model's prefix. */
const PREFIXES = ['', 'bert.', 'roberta.'];

export const bert: Family = {
  name: 'bert',
  configure(c, cfg) {
    c.oneOf('hidden_act', ['gelu'], 'gelu');
    c.oneOf('position_embedding_type', ['absolute'], 'absolute');
    const eps = c.positive('layer_norm_eps', 1e-12);
    // XLM-R: positions count from pad_token_id + 1, and the table's first rows are never read.
    const positionOffset = cfg.modelType === 'xlm-roberta' ? c.number('pad_token_id', 1) + 1 : 0;
    cfg.maxPositions -= positionOffset;
    return (ctx) => {
      const { ops, cfg: { hidden: H, intermediate: I, heads, headDim }, act, kv, meta } = ctx;
      if (!ctx.pooled) throw new Error(`${cfg.modelType} is an encoder: it serves embeddings (--embeddings or --embedding-model), not text generation`);
      const pooled = ctx.pooled;
      const p = PREFIXES.find((x) => ctx.has(`${x}embeddings.word_embeddings.weight`));
      if (p === undefined) throw new Error('no embeddings.word_embeddings.weight (bare, or under bert. or roberta.)');
      const layerNorm = (name: string, res?: GPUBuffer) =>
        ops.layernorm(name, act.h, ctx.vector(`${name}.weight`), ctx.vector(`${name}.bias`), { width: H, eps, res });
      const program = new Program();
      const e = `${p}embeddings`;
      // Every token has type 0: the type table's first row, gathered by an all-zeros id buffer.
      const typeIds = ctx.scratch('token_type_ids', 1);
      program.add(
        ...ops.embedding(ctx.matrix(`${e}.word_embeddings`), meta.tokens, act.h),
        ...ops.embedding(ctx.matrix({ prefix: `${e}.position_embeddings`, first: positionOffset, rows: cfg.maxPositions }), meta.tokenPos, act.h, 1, true),
        ...ops.embedding(ctx.matrix({ prefix: `${e}.token_type_embeddings`, first: 0, rows: 1 }), typeIds, act.h, 1, true),
        layerNorm(`${e}.LayerNorm`),
      );
      for (let i = 0; i < cfg.layers; i++) {
        const l = `${p}encoder.layer.${i}`;
        const qkvNames = ['query', 'key', 'value'].map((n) => `${l}.attention.self.${n}`);
        const linear = (name: string, x: GPUBuffer, y: GPUBuffer | GPUBuffer[], names = [name]) =>
          ops.linear(name, ctx.matrix(...names), x, y, { bias: ctx.vector(names.map((n) => `${n}.bias`)) });
        program.add(
          ...linear(`${l}.attention.self.qkv`, act.h, [act.q, act.k, act.v], qkvNames),
          ...ops.attention(`${l}.attention`, {
            q: act.q, k: act.k, v: act.v, heads, kvHeads: heads, kCache: kv.k[i]!, vCache: kv.v[i]!, blockSize: kv.blockSize,
          }, act.attn, { headDim, rotaryDim: 0, scale: headDim ** -0.5 }, { ...meta, keyEnd: pooled.keyEnd }),
          ...linear(`${l}.attention.output.dense`, act.attn, act.xn),
          layerNorm(`${l}.attention.output.LayerNorm`, act.xn),
          ...linear(`${l}.intermediate.dense`, act.h, act.gate),
          ops.glu(act.gate, undefined, I, 'gelu'),
          ...linear(`${l}.output.dense`, act.gate, act.xn),
          layerNorm(`${l}.output.LayerNorm`, act.xn),
        );
      }
      program.add(...poolHead(ctx, act.h));
      return program;
    };
  },
};

/**
 * Pools the final hidden states `x` and normalises each sequence's vector; a reranker
 * (rank) instead scores its first token with the sequence classifier's head,
 * out_proj(tanh(dense(x[CLS]))), one logit per sequence.
 */
function poolHead(ctx: BuildContext, x: GPUBuffer): Dispatch[] {
  const { ops, cfg, meta } = ctx;
  const { mode, out, norms } = ctx.pooled!;
  if (mode !== 'rank') return [ops.pool(x, meta.seqLast, out, cfg.hidden, mode), ops.embdNormalize(out, norms, cfg.hidden)];
  if (!ctx.has('classifier.out_proj.weight')) throw new Error(`${cfg.modelType}: no classifier head (classifier.dense, classifier.out_proj): not a reranker`);
  const first = ctx.scratch('cls_rows', cfg.hidden);
  const dense = ctx.scratch('classifier_dense', cfg.hidden);
  const head = (name: string) => ({ w: ctx.matrix(name), bias: ctx.vector(`${name}.bias`) });
  const d = head('classifier.dense');
  const o = head('classifier.out_proj');
  if (o.w.rows !== 1) throw new Error(`classifier.out_proj has ${o.w.rows} labels; a reranker has one`);
  return [
    ops.pool(x, meta.seqLast, first, cfg.hidden, 'cls'),
    ...ops.linear('classifier.dense', d.w, first, dense, { bias: d.bias, perSeq: true }),
    ops.glu(dense, undefined, cfg.hidden, 'tanh'),
    ...ops.linear('classifier.out_proj', o.w, dense, out, { bias: o.bias, perSeq: true }),
  ];
}
