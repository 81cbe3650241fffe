// Mixtral: the Mistral decoder (sliding-window attention where sliding_window is set) with a
// mixture of num_local_experts experts in every layer's block_sparse_moe: the router's
// softmax, the top num_experts_per_tok, their probabilities renormalised to sum 1; each
// expert a SwiGLU of w1 (gate), w3 (up) and w2 (down), intermediate_size wide.
import { Program } from '../runtime/program.js';
import { oneRope } from './config.js';
import { attention, embed, head, moe } from './layers.js';
import type { Family } from './model.js';

export const mixtral: Family = {
  name: 'mixtral',
  configure(c, cfg) {
    c.oneOf('hidden_act', ['silu'], 'silu');
    oneRope(cfg, c.file);
    if (c.raw.sliding_window != null) cfg.layerKv.fill({ window: c.count('sliding_window') });
    const experts = c.count('num_local_experts');
    const topK = c.count('num_experts_per_tok');
    if (topK > experts) c.fail('num_experts_per_tok', `${topK} exceeds num_local_experts ${experts}`);
    const norms = { eps: cfg.rmsEps };
    return (ctx) => {
      const program = new Program();
      program.add(...embed(ctx));
      for (let i = 0; i < cfg.layers; i++) {
        program.add(...attention(ctx, i, { norms, inputNorm: 'input_layernorm', rope: cfg, scale: cfg.headDim ** -0.5 }));
        program.add(...moe(ctx, i, {
          norms, inputNorm: 'post_attention_layernorm', block: 'block_sparse_moe', router: 'gate', projections: { gate: 'w1', up: 'w3', down: 'w2' },
          experts, topK, intermediate: cfg.intermediate, routing: 'softmax_topk', renormalize: true, activation: 'silu',
        }));
      }
      program.add(...head(ctx, { norms }));
      return program;
    };
  },
};
