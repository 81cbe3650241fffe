// Llama (2, 3.x incl. llama3 rope scaling, TinyStories): pre-norm decoder, grouped-query
// attention with RoPE, SwiGLU MLP.
import { Program } from '../runtime/program.js';
import { oneRope } from './config.js';
import { attention, embed, head, mlp } from './layers.js';
import type { Family } from './model.js';

export const llama: Family = {
  name: 'llama',
  configure(c, cfg) {
    c.oneOf('hidden_act', ['silu'], 'silu');
    c.oneOf('attention_bias', [false], false);
    c.oneOf('mlp_bias', [false], false);
    oneRope(cfg, c.file);
    const norms = { eps: cfg.rmsEps };
    return (ctx) => {
      const program = new Program();
      program.add(...embed(ctx));
      for (let i = 0; i < cfg.layers; i++) {
        program.add(...attention(ctx, i, { norms, inputNorm: 'input_layernorm', rope: cfg, scale: cfg.headDim ** -0.5 }));
        program.add(...mlp(ctx, i, { norms, inputNorm: 'post_attention_layernorm', activation: 'silu' }));
      }
      program.add(...head(ctx, { norms }));
      return program;
    };
  },
};
