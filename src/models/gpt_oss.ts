// GPT-OSS: attention with q/k/v/o biases and a learned sink logit per head, sliding-window
// (sliding_window) and full layers as layer_types says (alternating, sliding first, by
// default), YaRN RoPE; in place of the MLP a mixture of num_local_experts experts, the top
// num_experts_per_tok of the router's logits (router bias included) weighted by a softmax
// over those k, each expert a clamped SwiGLU x sigmoid(1.702 x) of gate and up (limit
// swiglu_limit) with biases, its gate and up rows alternating in one gate_up_proj. The
// experts load MXFP4 as published (quantization_config quant_method mxfp4), or as mlx-lm
// converts them (gate_proj, up_proj, down_proj stacked under mlp.experts, MLX's mxfp4 or
// affine quantization).
import { Program } from '../runtime/program.js';
import { oneRope } from './config.js';
import { gemmaLayerTypes } from './gemma3.js';
import { attention, embed, head, moe } from './layers.js';
import type { Family } from './model.js';

export const gptOss: Family = {
  name: 'gpt_oss',
  configure(c, cfg) {
    c.oneOf('hidden_act', ['silu'], 'silu');
    c.oneOf('attention_bias', [true], true);
    oneRope(cfg, c.file);
    const experts = c.count('num_local_experts');
    const topK = c.count('num_experts_per_tok');
    if (topK > experts) c.fail('num_experts_per_tok', `${topK} exceeds num_local_experts ${experts}`);
    if (c.raw.experts_per_token != null && c.raw.experts_per_token !== topK) c.fail('experts_per_token', `${JSON.stringify(c.raw.experts_per_token)} disagrees with num_experts_per_tok ${topK}`);
    const types = gemmaLayerTypes(c, cfg.layers, (i) => i % 2 === 0);
    if (types.includes('sliding_attention')) {
      const window = c.count('sliding_window');
      cfg.layerKv = types.map((t) => (t === 'sliding_attention' ? { window } : 'full'));
    }
    const gluLimit = c.positive('swiglu_limit', 7);
    const norms = { eps: cfg.rmsEps };
    return (ctx) => {
      const program = new Program();
      program.add(...embed(ctx));
      for (let i = 0; i < cfg.layers; i++) {
        program.add(...attention(ctx, i, {
          norms, inputNorm: 'input_layernorm', qkvBias: true, oBias: true, sinks: true, rope: cfg, scale: cfg.headDim ** -0.5,
        }));
        program.add(...moe(ctx, i, {
          norms, inputNorm: 'post_attention_layernorm', block: 'mlp', router: 'router', projections: { gate: 'gate_proj', up: 'up_proj', down: 'down_proj' },
          experts, topK, intermediate: cfg.intermediate, routing: 'topk_softmax', renormalize: false, activation: 'gelu_quick',
          routerBias: true, expertBias: true, fused: { gateUp: 'experts.gate_up_proj', down: 'experts.down_proj', interleaved: true }, gluLimit,
        }));
      }
      program.add(...head(ctx, { norms }));
      return program;
    };
  },
};
