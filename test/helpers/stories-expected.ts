// models/stories260k/expected.json: llama2.c's greedy outputs for the trained model, and the
// reference logits after one prompt (cross-checked by run.c, a numpy reference and llama.cpp).
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export interface StoriesCase {
  prompt: string;
  max_tokens: number;
  prompt_token_ids: number[];
  expected_token_ids: number[];
  expected_text: string;
}

export interface StoriesExpected {
  cases: StoriesCase[];
  /** Final-position logits after prompt_token_ids. */
  reference_logits: { prompt_token_ids: number[]; logits: number[] };
}

export const STORIES_DIR = fileURLToPath(new URL('../../models/stories260k', import.meta.url));

export const storiesExpected = JSON.parse(readFileSync(`${STORIES_DIR}/expected.json`, 'utf8')) as StoriesExpected;

export const storiesCases: StoriesCase[] = storiesExpected.cases;

export function storiesCase(prompt: string): StoriesCase {
  const found = storiesCases.find((c) => c.prompt === prompt);
  if (!found) throw new Error(`no expected.json case for ${JSON.stringify(prompt)}`);
  return found;
}
