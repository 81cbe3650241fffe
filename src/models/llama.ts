// Llama (2, 3.x incl. llama3 rope scaling, Mistral, TinyStories): pre-norm decoder with
// grouped-query attention and a SwiGLU MLP. Qwen2 and Qwen3 reuse it with options.
import { Program } from '../runtime/program.js';
import { embed, headAndSample, selfAttention, swigluMlp, type AttentionOptions } from './layers.js';
import type { BuildContext, Family } from './model.js';

export function llamaLike(name: string, attention: AttentionOptions = {}): Family {
  return {
    name,
    build(ctx: BuildContext): Program {
      const program = new Program();
      program.add(...embed(ctx));
      for (let i = 0; i < ctx.cfg.layers; i++) {
        program.add(...selfAttention(ctx, i, attention));
        program.add(...swigluMlp(ctx, i));
      }
      program.add(...headAndSample(ctx));
      return program;
    },
  };
}

export const llama = llamaLike('llama');
