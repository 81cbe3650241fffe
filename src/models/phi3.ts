// Phi-3, Phi-3.5 and Phi-4-mini: the Llama decoder with q, k and v in one fused qkv_proj
// and gate and up in one gate_up_proj, RoPE over the first partial_rotary_factor of each
// head (Phi-4-mini: 3/4) with longrope scaling for long contexts, and sliding-window
// attention where sliding_window is set.
import { Program } from '../runtime/program.js';
import { oneRope } from './config.js';
import { attention, embed, head, mlp } from './layers.js';
import type { Family } from './model.js';

export const phi3: Family = {
  name: 'phi3',
  configure(c, cfg) {
    c.oneOf('hidden_act', ['silu'], 'silu');
    c.oneOf('attention_bias', [false], false);
    oneRope(cfg, c.file);
    if (c.raw.sliding_window != null) cfg.layerKv.fill({ window: c.count('sliding_window') });
    const norms = { eps: cfg.rmsEps };
    return (ctx) => {
      const program = new Program();
      program.add(...embed(ctx));
      for (let i = 0; i < cfg.layers; i++) {
        program.add(...attention(ctx, i, { norms, inputNorm: 'input_layernorm', fusedQkv: true, rope: cfg, scale: cfg.headDim ** -0.5 }));
        program.add(...mlp(ctx, i, { norms, inputNorm: 'post_attention_layernorm', fusedGateUp: true, activation: 'silu' }));
      }
      program.add(...head(ctx, { norms }));
      return program;
    };
  },
};
