// Gemma 2: RMSNorms scaling by (1 + w) before and after both blocks, GELU-tanh GLU,
// embeddings times sqrt(hidden), sliding-window attention on alternate layers (even ones,
// or as layer_types says), q scaled by query_pre_attn_scalar^-1/2, and tanh soft-capping
// of attention scores and final logits.
import { Program } from '../runtime/program.js';
import { oneRope } from './config.js';
import { gemmaActivation, gemmaLayerTypes } from './gemma3.js';
import { attention, embed, head, mlp } from './layers.js';
import type { Family } from './model.js';

export const gemma2: Family = {
  name: 'gemma2',
  configure(c, cfg) {
    const activation = gemmaActivation(c);
    oneRope(cfg, c.file);
    c.oneOf('attention_bias', [false], false);
    const types = gemmaLayerTypes(c, cfg.layers, (i) => i % 2 === 0);
    const window = c.count('sliding_window', 4096);
    cfg.layerKv = types.map((t) => (t === 'sliding_attention' ? { window } : 'full'));
    const scale = c.positive('query_pre_attn_scalar', 256) ** -0.5;
    const softcap = c.optional('attn_logit_softcapping');
    const finalSoftcap = c.optional('final_logit_softcapping');
    const norms = { eps: cfg.rmsEps, plusOne: true };
    return (ctx) => {
      const program = new Program();
      program.add(...embed(ctx, Math.sqrt(cfg.hidden)));
      for (let i = 0; i < cfg.layers; i++) {
        program.add(...attention(ctx, i, { norms, inputNorm: 'input_layernorm', postNorm: 'post_attention_layernorm', rope: cfg, scale, softcap }));
        program.add(...mlp(ctx, i, { norms, inputNorm: 'pre_feedforward_layernorm', postNorm: 'post_feedforward_layernorm', activation }));
      }
      program.add(...head(ctx, { norms, softcap: finalSoftcap }));
      return program;
    };
  },
};
