// The random checkpoints compared with llama.cpp (test/oracle-engine.test.ts: the GGUF
// writer, the HF reference and our engine against it), the prompt the oracle tests share, and
// the family oracle tests' comparison (test/oracle-families.test.ts, test/oracle-hybrid.test.ts).
import { expect } from 'vitest';
import type { KvTypes } from '../../src/models/model.js';
import { TextTokenizer } from '../../src/models/tokenizer.js';
import { writeGgufFromHf } from './gguf-writer.js';
import { logSoftmax, maxLogProbDiff, oracleGreedy, type OracleResult } from './llama-oracle.js';
import { greedy, openRunner } from './model-harness.js';
import { makeRandomCheckpoint, type RandomCheckpointOptions } from './random-checkpoint.js';

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

export interface FamilyComparison {
  /** Prepend the tokenizer's BOS to the prompt. */
  bos: boolean;
  steps: number;
  /** Of the prompt's next-token log-probs. */
  tolerance: number;
  /** Our pass's token capacity: the prefill chunk (default openRunner's). */
  maxTokens?: number;
  /** Our KV cache's types (default openRunner's: the server's). */
  kvTypes?: KvTypes;
  /** llama.cpp's run (default oracleGreedy; a test may share runs between cases). */
  oracle?: (gguf: string, prompt: number[]) => Promise<OracleResult>;
}

/**
 * Writes random checkpoint `c` to `dir` and its GGUF beside it (GPT-OSS's MXFP4 experts as
 * f32 holding the same values), runs both greedily on the prompt (BOS, then ORACLE_STORY) and
 * asserts equal tokens and the prompt's next-token log-probs within the tolerance; returns
 * the prompt and our run.
 */
export async function expectMatchesLlamaCpp(
  c: RandomCheckpointOptions, dir: string, o: FamilyComparison,
): Promise<{ prompt: number[]; ours: { tokens: number[]; promptLogits: Float32Array } }> {
  const ck = makeRandomCheckpoint(c, dir);
  const gguf = `${dir}.gguf`;
  // Not the folder's name: llama.cpp gives a model named like phi3 / phi-3 Phi-3's token
  // attributes, which look up SentencePiece tokens (</s>, <unk>) our tokenizers lack.
  writeGgufFromHf(dir, gguf, { name: 'random checkpoint', experts: 'f32' });
  const tokenizer = await TextTokenizer.load(dir);
  const prompt = [...(o.bos ? [ck.bosId] : []), ...tokenizer.encode(ORACLE_STORY, false)];
  const expected = await (o.oracle ?? ((g, p) => oracleGreedy(g, p, o.steps)))(gguf, prompt);
  const ours = await greedy(await openRunner(dir, 256, { maxTokens: o.maxTokens, kvTypes: o.kvTypes }), prompt, o.steps);
  const diff = maxLogProbDiff(ours.promptLogits, expected.firstLogProbs);
  if (process.env.ORACLE_VERBOSE) console.info(`${c.arch}: max log-prob diff ${diff.toExponential(2)}`);
  expect(ours.tokens).toEqual(expected.tokens);
  expect(diff).toBeLessThan(o.tolerance);
  const top = expected.tokens[0]!;
  expect(Math.abs(logSoftmax(ours.promptLogits)[top]! - expected.firstLogProbs[top]!)).toBeLessThan(o.tolerance);
  return { prompt, ours };
}
