// Chat through the real server and engine with each mixture-of-experts family: a random
// Qwen3-MoE (dense and sparse layers) and a random Mixtral, both with stories260k's
// SentencePiece Llama tokenizer and its chat template (a 512-token vocabulary keeps the
// checkpoints and their load cheap; the template is the tokenizer's, not the family's). Random weights give random text, so each
// answer is checked against the engine run another way: streamed against not, and two
// concurrent conversations (decoded in one batch, whose tokens route to different experts)
// against each alone.
import type OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { useLive } from './helpers/live-server.js';
import type { RandomCheckpointOptions } from './helpers/random-checkpoint.js';

const tiny = { hidden: 64, layers: 2, heads: 4, kvHeads: 2, headDim: 16, intermediate: 128 };
const FAMILIES: Array<[string, RandomCheckpointOptions]> = [
  ['qwen3_moe', { ...tiny, arch: 'qwen3_moe', tokenizer: 'stories', layers: 3, seed: 31, extraConfig: { mlp_only_layers: [1] } }],
  ['mixtral', { ...tiny, arch: 'mixtral', tokenizer: 'stories', seed: 32 }],
];

for (const [family, model] of FAMILIES) {
  describe(`${family} chat`, () => {
    const live = useLive({ model, engine: { parallel: 2, contextSize: 512, batchSize: 64, warmup: false } });
    const ask = (content: string): OpenAI.ChatCompletionCreateParamsNonStreaming => ({
      model: family, messages: [{ role: 'user', content }], max_tokens: 12, temperature: 0,
    });

    it('answers, streamed as not, and two concurrent conversations as each alone', async () => {
      const first = await live.openai.chat.completions.create(ask('Tell me about the sea.'));
      expect(first.choices[0]!.message.role).toBe('assistant');
      expect(first.choices[0]!.finish_reason).toBe('length');
      expect(first.usage!.completion_tokens).toBe(12);
      const text = first.choices[0]!.message.content!;
      expect(text.length).toBeGreaterThan(0);

      let streamed = '';
      for await (const chunk of await live.openai.chat.completions.create({ ...ask('Tell me about the sea.'), stream: true })) streamed += chunk.choices[0]?.delta.content ?? '';
      expect(streamed).toBe(text);

      const second = (await live.openai.chat.completions.create(ask('Count to five, please.'))).choices[0]!.message.content;
      const together = await Promise.all([ask('Tell me about the sea.'), ask('Count to five, please.')].map((r) => live.openai.chat.completions.create(r)));
      expect(together.map((r) => r.choices[0]!.message.content)).toEqual([text, second]);
    });
  });
}
