// Qwen2.5-VL's language model (Qwen2_5_VLForConditionalGeneration's decoder): Qwen2's layers
// (biases on q, k and v) with multimodal RoPE: each token has three positions (t, h, w)
// and each head's rotary pairs split into rope_scaling.mrope_section's three runs, each
// turning by one of them. Text tokens have all three at the same position; an image's tokens
// get (first, first + row, first + column) over its merged patch grid, and the text after it
// goes on from the largest of those + 1 (the engine fills the positions: forward.ts). Its
// image encoder is ./qwen2-5-vl-vision.ts, whose rows replace the image pads' embeddings
// here. Checkpoints keep the decoder under model.language_model. (transformers 4.52+),
// language_model.model. (mlx-vlm) or model. (earlier transformers), the vision tower beside it.
import { Program } from '../runtime/program.js';
import { oneRope } from './config.js';
import { attention, embed, head, mlp } from './layers.js';
import type { Family } from './model.js';

export const qwen25Vl: Family = {
  name: 'qwen2_5_vl',
  layouts: [
    [['model.', 'model.language_model.'], ['lm_head', 'lm_head']],
    [['model.', 'language_model.model.'], ['lm_head', 'language_model.lm_head']],
    [['model.', 'model.'], ['lm_head', 'lm_head']],
  ],
  configure(c, cfg) {
    c.oneOf('hidden_act', ['silu'], 'silu');
    c.oneOf('use_sliding_window', [false], false);
    oneRope(cfg, c.file);
    const sections = mropeSections(c.raw.rope_scaling ?? c.raw.rope_parameters, cfg.rotaryDim / 2, c.file);
    const norms = { eps: cfg.rmsEps };
    const vision = c.raw.vision_config != null;
    return (ctx) => {
      const program = new Program();
      program.add(...embed(ctx));
      if (vision) {
        const images = ctx.imageInputs();
        program.add(ctx.ops.embedOverride(ctx.act.h, images.rows, images.flags, cfg.hidden));
      }
      const mrope = { sections, positions: ctx.mropePositions() };
      for (let i = 0; i < cfg.layers; i++) {
        program.add(...attention(ctx, i, { norms, inputNorm: 'input_layernorm', qkvBias: true, rope: cfg, scale: cfg.headDim ** -0.5, mrope }));
        program.add(...mlp(ctx, i, { norms, inputNorm: 'post_attention_layernorm', activation: 'silu' }));
      }
      program.add(...head(ctx, { norms }));
      return program;
    };
  },
};

/** mrope_section's first two runs (the third is the rest): three counts of rotary pairs that add up to `pairs`. */
function mropeSections(rope: unknown, pairs: number, file: string): readonly [number, number] {
  const section = (rope as { mrope_section?: unknown } | null | undefined)?.mrope_section;
  if (!Array.isArray(section) || section.length !== 3 || !section.every((n) => Number.isInteger(n) && n >= 0) || section[0] + section[1] + section[2] !== pairs) {
    throw new Error(`${file}: rope_scaling.mrope_section must be three counts of rotary pairs adding up to head_dim / 2 = ${pairs}, got ${JSON.stringify(section)}`);
  }
  return [section[0], section[1]];
}
