// Gemma 3 (gemma3_text, and the text part of gemma3's text_config): Gemma 2's layout with
// a per-head (1 + w) RMSNorm of q and k, five sliding-window layers to one global
// (sliding_window_pattern, or layer_types), and per-layer RoPE: rope_local_base_freq
// unscaled on sliding layers, rope_theta with rope_scaling on global ones (v5 spells both
// as rope_parameters per layer type). A multimodal checkpoint (Gemma3ForConditionalGeneration)
// keeps the decoder under language_model.model. (as published, and as mlx-vlm saves it) or
// model.language_model. (as transformers 4.52+ saves it); its image encoder is
// ./gemma3-vision.ts, whose soft tokens replace the image tokens' embeddings here, and
// the tokens of one image attend to each other both ways (ImageInputs).
import { Program } from '../runtime/program.js';
import type { ConfigReader, Rope } from './config.js';
import { attention, embed, head, mlp } from './layers.js';
import type { Activation } from '../runtime/ops/linear.js';
import type { Family } from './model.js';

export const gemma3: Family = {
  name: 'gemma3',
  layouts: [
    [['model.', 'language_model.model.'], ['lm_head', 'language_model.lm_head']],
    [['model.', 'model.language_model.']],
  ],
  configure(c, cfg) {
    const activation = gemmaActivation(c);
    c.oneOf('attention_bias', [false], false);
    const pattern = c.count('sliding_window_pattern', 6);
    const types = gemmaLayerTypes(c, cfg.layers, (i) => (i + 1) % pattern !== 0);
    const window = c.count('sliding_window', 4096);
    cfg.layerKv = types.map((t) => (t === 'sliding_attention' ? { window } : 'full'));
    const scale = c.positive('query_pre_attn_scalar', 256) ** -0.5;
    const softcap = c.optional('attn_logit_softcapping');
    const finalSoftcap = c.optional('final_logit_softcapping');
    const global: Rope = cfg.layerRopes?.full_attention ?? cfg;
    const local: Rope = cfg.layerRopes?.sliding_attention ?? { ropeTheta: c.positive('rope_local_base_freq', 10000) };
    const norms = { eps: cfg.rmsEps, plusOne: true };
    const vision = c.raw.vision_config != null;
    return (ctx) => {
      const program = new Program();
      program.add(...embed(ctx, Math.sqrt(cfg.hidden)));
      const images = vision ? ctx.imageInputs() : undefined;
      if (images) program.add(ctx.ops.embedOverride(ctx.act.h, images.rows, images.flags, cfg.hidden));
      for (let i = 0; i < cfg.layers; i++) {
        const sliding = types[i] === 'sliding_attention';
        program.add(...attention(ctx, i, {
          norms, inputNorm: 'input_layernorm', postNorm: 'post_attention_layernorm', qkNorm: 'head',
          rope: sliding ? local : global, scale, softcap, keyEnd: images?.keyEnd,
        }));
        program.add(...mlp(ctx, i, { norms, inputNorm: 'pre_feedforward_layernorm', postNorm: 'post_feedforward_layernorm', activation }));
      }
      program.add(...head(ctx, { norms, softcap: finalSoftcap }));
      return program;
    };
  },
};

/** Gemma's hidden_activation (hidden_act in older configs): gelu_pytorch_tanh, or exact gelu. */
export function gemmaActivation(c: ConfigReader): Activation {
  const key = c.raw.hidden_activation != null ? 'hidden_activation' : 'hidden_act';
  const act = c.oneOf(key, ['gelu_pytorch_tanh', 'gelu_new', 'gelu'], 'gelu_pytorch_tanh');
  return act === 'gelu' ? 'gelu' : 'gelu_tanh';
}

/** layer_types from config.json, else `sliding(i)` for each layer. */
export function gemmaLayerTypes(c: ConfigReader, layers: number, sliding: (i: number) => boolean): string[] {
  const given = c.raw.layer_types;
  if (given == null) return Array.from({ length: layers }, (_, i) => (sliding(i) ? 'sliding_attention' : 'full_attention'));
  if (!Array.isArray(given) || given.length !== layers || !given.every((t) => t === 'sliding_attention' || t === 'full_attention')) {
    return c.fail('layer_types', `must list sliding_attention or full_attention for each of the ${layers} layers`);
  }
  return given as string[];
}
