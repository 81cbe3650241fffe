// SmolLM3: the Llama decoder in which some layers attend without positions (NoPE):
// no_rope_layers[i] = 0, by default every no_rope_layer_interval-th layer (4th).
import { Program } from '../runtime/program.js';
import { oneRope } from './config.js';
import { attention, embed, head, mlp } from './layers.js';
import type { Family } from './model.js';

export const smollm3: Family = {
  name: 'smollm3',
  configure(c, cfg) {
    c.oneOf('hidden_act', ['silu'], 'silu');
    c.oneOf('attention_bias', [false], false);
    c.oneOf('mlp_bias', [false], false);
    c.oneOf('use_sliding_window', [false], false);
    oneRope(cfg, c.file);
    const interval = c.count('no_rope_layer_interval', 4);
    const given = c.raw.no_rope_layers;
    if (given != null && (!Array.isArray(given) || given.length !== cfg.layers || !given.every((v) => v === 0 || v === 1))) {
      c.fail('no_rope_layers', `must be 0 or 1 for each of the ${cfg.layers} layers`);
    }
    const usesRope = (i: number) => (given == null ? (i + 1) % interval !== 0 : (given as number[])[i] === 1);
    const norms = { eps: cfg.rmsEps };
    return (ctx) => {
      const program = new Program();
      program.add(...embed(ctx));
      for (let i = 0; i < cfg.layers; i++) {
        program.add(...attention(ctx, i, { norms, inputNorm: 'input_layernorm', rope: usesRope(i) ? cfg : undefined, scale: cfg.headDim ** -0.5 }));
        program.add(...mlp(ctx, i, { norms, inputNorm: 'post_attention_layernorm', activation: 'silu' }));
      }
      program.add(...head(ctx, { norms }));
      return program;
    };
  },
};
