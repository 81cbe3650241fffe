// The greedy cases of ../shared/models/stories260k/expected.json, keyed by prompt.
import { readFileSync } from 'node:fs';

export interface StoriesCase {
  prompt: string;
  max_tokens: number;
  prompt_token_ids: number[];
  expected_token_ids: number[];
  expected_text: string;
}

const expected = JSON.parse(readFileSync('../shared/models/stories260k/expected.json', 'utf8')) as { cases: StoriesCase[] };

export const storiesCases: StoriesCase[] = expected.cases;

export function storiesCase(prompt: string): StoriesCase {
  const found = expected.cases.find((c) => c.prompt === prompt);
  if (!found) throw new Error(`no expected.json case for ${JSON.stringify(prompt)}`);
  return found;
}
