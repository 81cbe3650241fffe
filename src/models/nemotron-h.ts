// Nemotron-H (Nemotron Nano 2): a stack of single-mixer blocks, h += mixer(norm(h)), the
// mixer of layer i named by hybrid_override_pattern[i]: M a Mamba-2 mixer (mamba_num_heads
// heads of mamba_head_dim, n_groups groups of ssm_state_size, conv_kernel, the gated norm per
// group), * attention without positional encoding, - a squared-ReLU MLP (up_proj,
// down_proj). Checkpoints keep the decoder under backbone. (embeddings, layers.N.norm,
// layers.N.mixer, norm_f).
import { Program } from '../runtime/program.js';
import { attention, embed, head, mamba2, plainMlp } from './layers.js';
import type { Family, TensorLayout } from './model.js';
import { MAX_CONV_KERNEL } from '../runtime/ops/ssm.js';

/** Which block each hybrid_override_pattern character is. */
const BLOCKS = { M: 'mamba', '*': 'attention', '-': 'mlp' } as const;

const LAYERS = 256;
/** transformers' names: backbone.*, and each layer's attention under mixer. */
const BACKBONE: TensorLayout = [
  ...Array.from({ length: LAYERS }, (_, i) => [`model.layers.${i}.self_attn.`, `backbone.layers.${i}.mixer.`] as const),
  ['model.layers.', 'backbone.layers.'],
  ['model.embed_tokens.', 'backbone.embeddings.'],
  ['model.norm.', 'backbone.norm_f.'],
];

export const nemotronH: Family = {
  name: 'nemotron_h',
  configure(c, cfg) {
    const pattern = c.raw.hybrid_override_pattern;
    if (typeof pattern !== 'string' || pattern.length !== cfg.layers) {
      c.fail('hybrid_override_pattern', `must be a string of num_hidden_layers (${cfg.layers}) characters, got ${JSON.stringify(pattern)}`);
    }
    const blocks = [...(pattern as string)].map((ch) => {
      const block = BLOCKS[ch as keyof typeof BLOCKS];
      if (!block) c.fail('hybrid_override_pattern', `"${ch}" is not supported (M: Mamba-2, *: attention, -: MLP)`);
      return block;
    });
    if (cfg.layers > LAYERS) c.fail('num_hidden_layers', `${cfg.layers} exceeds ${LAYERS}`);
    c.oneOf('mamba_hidden_act', ['silu'], 'silu');
    c.oneOf('mlp_hidden_act', ['relu2'], 'relu2');
    c.oneOf('use_bias', [false], false);
    c.oneOf('mlp_bias', [false], false);
    c.oneOf('attention_bias', [false], false);
    const limit = c.raw.time_step_limit;
    if (limit != null && !(Array.isArray(limit) && limit.length === 2 && limit[0] === 0 && (limit[1] === null || limit[1] === Infinity || limit[1] === 'Infinity'))) {
      c.fail('time_step_limit', `${JSON.stringify(limit)} is not supported (only (0, inf): no clamp)`);
    }
    cfg.rmsEps = c.positive('layer_norm_epsilon', 1e-5);
    const heads = c.count('mamba_num_heads');
    const headDim = c.count('mamba_head_dim');
    const groups = c.count('n_groups', 1);
    if (heads % groups !== 0) c.fail('n_groups', `${groups} does not divide mamba_num_heads ${heads}`);
    const stateSize = c.count('ssm_state_size');
    const convKernel = c.count('conv_kernel', 4);
    if (convKernel < 2 || convKernel > MAX_CONV_KERNEL) c.fail('conv_kernel', `${convKernel} is not supported (2 to ${MAX_CONV_KERNEL})`);
    const convBias = c.bool('use_conv_bias', true);
    if (blocks.includes('mamba')) cfg.recurrent = true;
    cfg.layerKv = blocks.map((b) => (b === 'attention' ? 'full' : 'none'));
    const norms = { eps: cfg.rmsEps };
    const mamba = { norms, inputNorm: 'norm', block: 'mixer', heads, headDim, groups, stateSize, convKernel, convBias, normGroup: (heads * headDim) / groups };
    return (ctx) => {
      const program = new Program();
      program.add(...embed(ctx));
      blocks.forEach((block, i) => {
        if (block === 'mamba') program.add(...mamba2(ctx, i, mamba));
        else if (block === 'mlp') program.add(...plainMlp(ctx, i, { norms, inputNorm: 'norm', block: 'mixer', activation: 'relu2' }));
        else program.add(...attention(ctx, i, { norms, inputNorm: 'norm', scale: cfg.headDim ** -0.5 }));
      });
      program.add(...head(ctx, { norms }));
      return program;
    };
  },
  layouts: [BACKBONE],
};
