// Granite 3.x: the Llama decoder with scalar multipliers: embeddings times
// embedding_multiplier, q times attention_multiplier (instead of 1 / sqrt(head_dim)), each
// block's output times residual_multiplier, logits divided by logits_scaling.
import { Program } from '../runtime/program.js';
import { oneRope } from './config.js';
import { attention, embed, head, mlp } from './layers.js';
import type { Family } from './model.js';

export const granite: Family = {
  name: 'granite',
  configure(c, cfg) {
    c.oneOf('hidden_act', ['silu'], 'silu');
    c.oneOf('attention_bias', [false], false);
    c.oneOf('mlp_bias', [false], false);
    oneRope(cfg, c.file);
    const embedding = c.number('embedding_multiplier', 1);
    const scale = c.number('attention_multiplier', 1);
    const residualScale = c.number('residual_multiplier', 1);
    const logits = c.positive('logits_scaling', 1);
    const norms = { eps: cfg.rmsEps };
    return (ctx) => {
      const program = new Program();
      program.add(...embed(ctx, embedding));
      for (let i = 0; i < cfg.layers; i++) {
        program.add(...attention(ctx, i, { norms, inputNorm: 'input_layernorm', rope: cfg, scale, residualScale }));
        program.add(...mlp(ctx, i, { norms, inputNorm: 'post_attention_layernorm', activation: 'silu', residualScale }));
      }
      program.add(...head(ctx, { norms, scale: 1 / logits }));
      return program;
    };
  },
};
