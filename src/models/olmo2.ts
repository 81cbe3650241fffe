// OLMo 2: norms after each block instead of before (post_attention_layernorm,
// post_feedforward_layernorm on the block's output, before the residual add), and an
// RMSNorm of q and of k over the whole projection (all heads) before RoPE.
import { Program } from '../runtime/program.js';
import { oneRope } from './config.js';
import { attention, embed, head, mlp } from './layers.js';
import type { Family } from './model.js';

export const olmo2: Family = {
  name: 'olmo2',
  configure(c, cfg) {
    c.oneOf('hidden_act', ['silu'], 'silu');
    c.oneOf('attention_bias', [false], false);
    oneRope(cfg, c.file);
    const norms = { eps: cfg.rmsEps };
    return (ctx) => {
      const program = new Program();
      program.add(...embed(ctx));
      for (let i = 0; i < cfg.layers; i++) {
        program.add(...attention(ctx, i, { norms, qkNorm: 'full', postNorm: 'post_attention_layernorm', rope: cfg, scale: cfg.headDim ** -0.5 }));
        program.add(...mlp(ctx, i, { norms, postNorm: 'post_feedforward_layernorm', activation: 'silu' }));
      }
      program.add(...head(ctx, { norms }));
      return program;
    };
  },
};
