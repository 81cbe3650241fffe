// Granite 4.0-H (GraniteMoeHybrid): Granite's multipliers over a stack of blocks, each
// h += m * mixer(input_layernorm(h)) then h += m * shared_mlp(post_attention_layernorm(h))
// (m: residual_multiplier); the mixer of layer i is layer_types[i]: a Mamba-2 mixer under
// mamba (mamba_n_heads heads of mamba_d_head, mamba_n_groups groups of mamba_d_state,
// mamba_d_conv; its gated norm over the whole inner width, as transformers' does), or
// attention with q times attention_multiplier, RoPE only where position_embedding_type is
// "rope". The shared MLP is a SwiGLU with gate and up fused in input_linear; with
// num_local_experts > 0 (Granite 4.0-H tiny and small) a mixture of experts beside it on the
// same normed input: block_sparse_moe's router.layer, the top num_experts_per_tok by a
// softmax over their logits, experts stacked in input_linear (gate then up rows) and
// output_linear of intermediate_size each. Embeddings times embedding_multiplier, logits
// divided by logits_scaling.
import { Program } from '../runtime/program.js';
import { MAX_CONV_KERNEL } from '../runtime/ops/ssm.js';
import { oneRope } from './config.js';
import { attention, embed, head, mamba2, mlp, moe, type MoeSpec } from './layers.js';
import type { Family } from './model.js';

export const granitemoehybrid: Family = {
  name: 'granitemoehybrid',
  configure(c, cfg) {
    c.oneOf('hidden_act', ['silu'], 'silu');
    c.oneOf('attention_bias', [false], false);
    c.oneOf('mamba_proj_bias', [false], false);
    c.oneOf('normalization_function', ['rmsnorm'], 'rmsnorm');
    const rope = c.oneOf('position_embedding_type', ['nope', 'rope'], 'nope') === 'rope';
    if (rope) oneRope(cfg, c.file);
    const types = c.raw.layer_types;
    if (!Array.isArray(types) || types.length !== cfg.layers || !types.every((t) => t === 'mamba' || t === 'attention')) {
      c.fail('layer_types', `must list num_hidden_layers (${cfg.layers}) of "mamba" and "attention", got ${JSON.stringify(types)}`);
    }
    const experts = c.raw.num_local_experts ?? 0;
    let sparse: Omit<MoeSpec, 'residualScale'> | undefined;
    if (experts !== 0) {
      const count = c.count('num_local_experts');
      const topK = c.count('num_experts_per_tok');
      if (topK > count) c.fail('num_experts_per_tok', `${topK} exceeds num_local_experts ${count}`);
      sparse = {
        norms: { eps: cfg.rmsEps }, inputNorm: 'post_attention_layernorm', block: 'block_sparse_moe', router: 'router.layer',
        projections: { gate: 'gate', up: 'up', down: 'down' }, fused: { gateUp: 'input_linear', down: 'output_linear', interleaved: false },
        experts: count, topK, intermediate: cfg.intermediate, routing: 'topk_softmax', renormalize: false, activation: 'silu',
      };
    }
    cfg.intermediate = c.count('shared_intermediate_size');
    if ((types as string[]).includes('mamba')) cfg.recurrent = true;
    cfg.layerKv = (types as string[]).map((t) => (t === 'attention' ? 'full' : 'none'));
    const heads = c.count('mamba_n_heads');
    const headDim = c.count('mamba_d_head');
    const expand = c.count('mamba_expand', 2);
    if (heads * headDim !== expand * cfg.hidden) c.fail('mamba_expand', `${expand} * hidden_size ${cfg.hidden} is not mamba_n_heads * mamba_d_head (${heads * headDim})`);
    const groups = c.count('mamba_n_groups', 1);
    if (heads % groups !== 0) c.fail('mamba_n_groups', `${groups} does not divide mamba_n_heads ${heads}`);
    const convKernel = c.count('mamba_d_conv', 4);
    if (convKernel < 2 || convKernel > MAX_CONV_KERNEL) c.fail('mamba_d_conv', `${convKernel} is not supported (2 to ${MAX_CONV_KERNEL})`);
    const embedding = c.number('embedding_multiplier', 1);
    const scale = c.number('attention_multiplier', 1);
    const residualScale = c.number('residual_multiplier', 1);
    const logits = c.positive('logits_scaling', 1);
    const norms = { eps: cfg.rmsEps };
    const mamba = {
      norms, inputNorm: 'input_layernorm', block: 'mamba', heads, headDim, groups, stateSize: c.count('mamba_d_state'), convKernel,
      convBias: c.bool('mamba_conv_bias', true), normGroup: heads * headDim, residualScale,
    };
    return (ctx) => {
      const program = new Program();
      program.add(...embed(ctx, embedding));
      (types as string[]).forEach((type, i) => {
        program.add(...(type === 'mamba'
          ? mamba2(ctx, i, mamba)
          : attention(ctx, i, { norms, inputNorm: 'input_layernorm', scale, residualScale, ...(rope ? { rope: cfg } : {}) })));
        const shared = mlp(ctx, i, {
          norms, inputNorm: 'post_attention_layernorm', activation: 'silu', fusedGateUp: true, residualScale,
          names: { block: 'shared_mlp', gateUp: 'input_linear', down: 'output_linear' },
        });
        if (!sparse) {
          program.add(...shared);
          return;
        }
        // Both read the same h: the shared MLP runs before the experts' combine (moe's last
        // dispatch) adds into it.
        const experts = moe(ctx, i, { ...sparse, residualScale });
        program.add(...experts.slice(0, -1), ...shared, experts.at(-1)!);
      });
      program.add(...head(ctx, { norms, scale: 1 / logits }));
      return program;
    };
  },
};
