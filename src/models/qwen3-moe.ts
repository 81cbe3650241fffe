// Qwen3-MoE: Qwen3's attention (per-head q/k RMSNorm, explicit head_dim) with a mixture of
// experts in place of the MLP on the sparse layers: every decoder_sparse_step-th layer not
// in mlp_only_layers. The router's softmax over num_experts, the top num_experts_per_tok,
// their probabilities renormalised to sum 1 where norm_topk_prob says so; the dense layers'
// MLP is intermediate_size wide, each expert's moe_intermediate_size.
import { Program } from '../runtime/program.js';
import { oneRope } from './config.js';
import { attention, embed, head, mlp, moe } from './layers.js';
import type { Family } from './model.js';

export const qwen3Moe: Family = {
  name: 'qwen3_moe',
  configure(c, cfg) {
    c.oneOf('hidden_act', ['silu'], 'silu');
    c.oneOf('use_sliding_window', [false], false);
    c.oneOf('attention_bias', [false], false);
    oneRope(cfg, c.file);
    const experts = c.count('num_experts');
    const topK = c.count('num_experts_per_tok');
    if (topK > experts) c.fail('num_experts_per_tok', `${topK} exceeds num_experts ${experts}`);
    const intermediate = c.count('moe_intermediate_size');
    const renormalize = c.bool('norm_topk_prob', false);
    const sparseStep = c.count('decoder_sparse_step', 1);
    const dense = c.raw.mlp_only_layers ?? [];
    if (!Array.isArray(dense) || !dense.every((l) => Number.isInteger(l) && l >= 0 && l < cfg.layers)) {
      c.fail('mlp_only_layers', `must be a list of layer indices below ${cfg.layers}, got ${JSON.stringify(dense)}`);
    }
    const sparse = (layer: number) => !(dense as number[]).includes(layer) && (layer + 1) % sparseStep === 0;
    const norms = { eps: cfg.rmsEps };
    return (ctx) => {
      const program = new Program();
      program.add(...embed(ctx));
      for (let i = 0; i < cfg.layers; i++) {
        program.add(...attention(ctx, i, { norms, inputNorm: 'input_layernorm', qkNorm: 'head', rope: cfg, scale: cfg.headDim ** -0.5 }));
        program.add(...(sparse(i)
          ? moe(ctx, i, {
            norms, inputNorm: 'post_attention_layernorm', block: 'mlp', router: 'gate', projections: { gate: 'gate_proj', up: 'up_proj', down: 'down_proj' },
            experts, topK, intermediate, routing: 'softmax_topk', renormalize, activation: 'silu',
          })
          : mlp(ctx, i, { norms, inputNorm: 'post_attention_layernorm', activation: 'silu' })));
      }
      program.add(...head(ctx, { norms }));
      return program;
    };
  },
};
