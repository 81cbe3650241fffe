// BERT-style encoders (BERT, XLM-RoBERTa: all-MiniLM, bge, e5, gte, bge-reranker): the sum
// of word, absolute position and token-type embeddings, LayerNorm; per layer bidirectional
// attention with biased q/k/v/o projections, then a post-norm residual (h = LN(h + attn)),
// a GELU MLP, and another (h = LN(h + mlp)). No final norm: the head pools h. XLM-R's
// position table starts at pad_token_id + 1 (row 0 and 1 are padding), so its rows are
// read from there. Encoders are served as embedding models only (BuildContext.pooled).
import { Program, type Dispatch } from '../runtime/program.js';
import type { BuildContext, Family, TensorLayout } from './model.js';

/**
 * The encoder under its task model's prefix (BertModel, XLMRobertaForSequenceClassification,
 * whose classifier head stays at the top); bare in sentence-transformers' checkpoints.
 */
const under = (prefix: string): TensorLayout => [['embeddings.', `${prefix}embeddings.`], ['encoder.', `${prefix}encoder.`], ['classifier.', 'classifier.']];

export const bert: Family = {
  name: 'bert',
  layouts: [under('bert.'), under('roberta.')],
  configure(c, cfg) {
    c.oneOf('hidden_act', ['gelu'], 'gelu');
    c.oneOf('position_embedding_type', ['absolute'], 'absolute');
    const eps = c.positive('layer_norm_eps', 1e-12);
    // XLM-R: positions count from pad_token_id + 1, and the table's first rows are never read.
    const positionOffset = cfg.modelType === 'xlm-roberta' ? c.number('pad_token_id', 1) + 1 : 0;
    const positionRows = cfg.maxPositions;
    cfg.maxPositions -= positionOffset;
    const typeRows = c.count('type_vocab_size', 2);
    return (ctx) => {
      const { ops, cfg: { hidden: H, intermediate: I, heads, headDim }, act, kv, meta } = ctx;
      if (!ctx.pooled) throw new Error(`${cfg.modelType} is an encoder: it serves embeddings (--embeddings or --embedding-model), not text generation`);
      const pooled = ctx.pooled;
      const layerNorm = (name: string, res?: GPUBuffer) =>
        ops.layernorm(name, act.h, ctx.vector({ name: `${name}.weight`, length: H }), ctx.vector({ name: `${name}.bias`, length: H }), { width: H, eps, res });
      const table = (prefix: string, rows: number, slice?: { first: number; rows: number }) => ctx.matrix({ prefix: `embeddings.${prefix}`, rows, cols: H, slice });
      const program = new Program();
      // Every token has type 0: the type table's first row, gathered by an all-zeros id buffer.
      const typeIds = ctx.scratch('token_type_ids', 1);
      program.add(
        ...ops.embedding(table('word_embeddings', cfg.vocab), meta.tokens, act.h),
        ...ops.embedding(table('position_embeddings', positionRows, { first: positionOffset, rows: cfg.maxPositions }), meta.tokenPos, act.h, 1, true),
        ...ops.embedding(table('token_type_embeddings', typeRows, { first: 0, rows: 1 }), typeIds, act.h, 1, true),
        layerNorm('embeddings.LayerNorm'),
      );
      for (let i = 0; i < cfg.layers; i++) {
        const l = `encoder.layer.${i}`;
        const qkvNames = ['query', 'key', 'value'].map((n) => `${l}.attention.self.${n}`);
        // A biased projection of [rows, cols]; several (q, k, v) stack into one.
        const linear = (name: string, x: GPUBuffer, y: GPUBuffer | GPUBuffer[], [rows, cols]: [number, number], names = [name]) =>
          ops.linear(name, ctx.matrix(...names.map((prefix) => ({ prefix, rows, cols }))), x, y, {
            bias: ctx.vector(names.map((n) => ({ name: `${n}.bias`, length: rows }))),
          });
        program.add(
          ...linear(`${l}.attention.self.qkv`, act.h, [act.q, act.k, act.v], [H, H], qkvNames),
          ...ops.attention(`${l}.attention`, {
            q: act.q, k: act.k, v: act.v, heads, kvHeads: heads, cache: kv.layers[i]!, blockSize: kv.blockSize,
          }, act.attn, { headDim, rotaryDim: 0, scale: headDim ** -0.5 }, { ...meta, keyEnd: pooled.keyEnd }),
          ...linear(`${l}.attention.output.dense`, act.attn, act.xn, [H, H]),
          layerNorm(`${l}.attention.output.LayerNorm`, act.xn),
          ...linear(`${l}.intermediate.dense`, act.h, act.gate, [I, H]),
          ops.glu(act.gate, undefined, I, 'gelu'),
          ...linear(`${l}.output.dense`, act.gate, act.xn, [H, I]),
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
  // out_proj has one row: a reranker's one label.
  const head = (name: string, rows: number) => ({ w: ctx.matrix({ prefix: name, rows, cols: cfg.hidden }), bias: ctx.vector({ name: `${name}.bias`, length: rows }) });
  const d = head('classifier.dense', cfg.hidden);
  const o = head('classifier.out_proj', 1);
  return [
    ops.pool(x, meta.seqLast, first, cfg.hidden, 'cls'),
    ...ops.linear('classifier.dense', d.w, first, dense, { bias: d.bias, perSeq: true }),
    ops.glu(dense, undefined, cfg.hidden, 'tanh'),
    ...ops.linear('classifier.out_proj', o.w, dense, out, { bias: o.bias, perSeq: true }),
  ];
}
