// LFM2: blocks of an operator and a SwiGLU MLP, each after its RMSNorm (operator_norm,
// ffn_norm); the operator is attention (per-head q/k RMSNorm q_layernorm / k_layernorm,
// RoPE, out_proj) on the layers layer_types names full_attention, else a gated short
// convolution (conv.in_proj into B, C, x; y = C * conv(B * x) over conv_L_cache inputs;
// conv.out_proj). The final norm is embedding_norm; embeddings are tied unless the config
// says otherwise. The MLP's width is block_ff_dim (intermediate_size) adjusted as
// transformers' Lfm2MLP does when block_auto_adjust_ff_dim is set.
import { Program } from '../runtime/program.js';
import { MAX_CONV_KERNEL } from '../runtime/ops/ssm.js';
import { oneRope } from './config.js';
import { attention, embed, head, mlp, shortConv } from './layers.js';
import type { Family } from './model.js';

export const lfm2: Family = {
  name: 'lfm2',
  configure(c, cfg) {
    oneRope(cfg, c.file);
    c.oneOf('conv_bias', [false], false);
    const types = c.raw.layer_types;
    const full = c.raw.full_attn_idxs;
    let attentionLayers: boolean[];
    if (Array.isArray(types)) {
      if (types.length !== cfg.layers || !types.every((t) => t === 'full_attention' || t === 'conv')) {
        c.fail('layer_types', `must list num_hidden_layers (${cfg.layers}) of "full_attention" and "conv", got ${JSON.stringify(types)}`);
      }
      attentionLayers = (types as string[]).map((t) => t === 'full_attention');
    } else if (Array.isArray(full) && full.every((i) => Number.isInteger(i) && i >= 0 && i < cfg.layers)) {
      attentionLayers = Array.from({ length: cfg.layers }, (_, i) => (full as number[]).includes(i));
    } else {
      return c.fail('layer_types', 'is missing (and full_attn_idxs is not a list of layer indices)');
    }
    if (attentionLayers.includes(false)) cfg.recurrent = true;
    cfg.layerKv = attentionLayers.map((a) => (a ? 'full' : 'none'));
    cfg.rmsEps = c.positive('norm_eps', 1e-5);
    const tie = c.raw.tie_word_embeddings ?? c.raw.tie_embedding ?? true;
    if (typeof tie !== 'boolean') c.fail('tie_embedding', `must be true or false, got ${JSON.stringify(tie)}`);
    cfg.tieEmbeddings = tie as boolean;
    let ff = c.count('block_ff_dim', cfg.intermediate);
    if (c.bool('block_auto_adjust_ff_dim', false)) {
      ff = Math.floor((2 * ff) / 3);
      const multiplier = c.optional('block_ffn_dim_multiplier');
      if (multiplier !== undefined) ff = Math.floor(multiplier * ff);
      const multipleOf = c.count('block_multiple_of', 256);
      ff = multipleOf * Math.ceil(ff / multipleOf);
    }
    cfg.intermediate = ff;
    const kernel = c.count('conv_L_cache', 3);
    if (kernel < 2 || kernel > MAX_CONV_KERNEL) c.fail('conv_L_cache', `${kernel} is not supported (2 to ${MAX_CONV_KERNEL})`);
    const norms = { eps: cfg.rmsEps };
    const names = { out: 'out_proj', qNorm: 'q_layernorm', kNorm: 'k_layernorm' };
    return (ctx) => {
      const program = new Program();
      program.add(...embed(ctx));
      attentionLayers.forEach((isAttention, i) => {
        program.add(...(isAttention
          ? attention(ctx, i, { norms, names, inputNorm: 'operator_norm', qkNorm: 'head', rope: cfg, scale: cfg.headDim ** -0.5 })
          : shortConv(ctx, i, { norms, inputNorm: 'operator_norm', kernel })));
        program.add(...mlp(ctx, i, { norms, inputNorm: 'ffn_norm', activation: 'silu', names: { block: 'feed_forward', gate: 'w1', up: 'w3', down: 'w2' } }));
      });
      program.add(...head(ctx, { norms, finalNorm: 'model.embedding_norm' }));
      return program;
    };
  },
};
