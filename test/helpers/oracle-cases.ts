// The random checkpoints compared with llama.cpp (test/oracle-engine.test.ts: the GGUF
// writer, the HF reference and our engine against it), and the prompt the oracle tests share.
import type { RandomCheckpointOptions } from './random-checkpoint.js';

const shape = { hidden: 64, layers: 2, heads: 4, kvHeads: 2, headDim: 16, intermediate: 128 };
const llama3Rope = { rope_type: 'llama3', factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 64 };

export type OracleCase = RandomCheckpointOptions & { special: string };

// Seeds picked for wide greedy margins: the smallest top1-top2 logit gap over the 32 steps,
// measured with llama.cpp, is 0.50, 0.20 and 0.33 (hot-token logit std 8). Over seeds 1-12
// the median is ~0.1 and the worst ~0.01.
export const ORACLE_CASES: OracleCase[] = [
  { ...shape, arch: 'llama', tokenizer: 'llama3_1', seed: 2, ropeScaling: llama3Rope, special: '<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>' },
  { ...shape, arch: 'qwen2', tokenizer: 'qwen3', seed: 11, dtype: 'F16', special: '<|im_start|>user\nHi<|im_end|>\n<think>\n</think>' },
  { ...shape, arch: 'qwen3', tokenizer: 'qwen3', seed: 9, dtype: 'BF16', tie: true, special: '<|im_start|>user\nHi<|im_end|>\n<tool_call>' },
];

export const ORACLE_STORY = 'Once upon a time, in a small village, there lived a curious cat named Mia.';

export function caseName(c: OracleCase): string {
  return `${c.arch} (${c.tokenizer} tokenizer, ${c.dtype ?? 'F32'}${c.tie ? ', tied' : ''}${c.ropeScaling ? ', llama3 rope' : ''})`;
}
