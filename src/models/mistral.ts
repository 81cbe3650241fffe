// Mistral: the Llama decoder with sliding-window attention on every layer (sliding_window;
// null for v0.2 and later, transformers' default 4096 where config.json leaves it out).
import { Program } from '../runtime/program.js';
import { oneRope } from './config.js';
import { attention, embed, head, mlp } from './layers.js';
import type { Family } from './model.js';

export const mistral: Family = {
  name: 'mistral',
  configure(c, cfg) {
    c.oneOf('hidden_act', ['silu'], 'silu');
    oneRope(cfg, c.file);
    const window = 'sliding_window' in c.raw ? (c.raw.sliding_window === null ? undefined : c.count('sliding_window')) : 4096;
    if (window !== undefined) cfg.layerKv.fill({ window });
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
