// Fill-in-the-middle prompts, for code completion (llama-server's /infill): the model's FIM
// tokens, found by their spellings among its added tokens, and the prompt laid out
// prefix-suffix-middle, as llama-server lays it out for every FIM family (or, with `spm`,
// suffix-prefix-middle: <fim_suffix> SUFFIX <fim_prefix> PREFIX):
//
//   [<repo_name> "repo\n"]  (<file_sep> "name\n" TEXT)*   extra files, when the model has <file_sep>
//   <fim_prefix> PREFIX  <fim_suffix> SUFFIX  <fim_middle> PROMPT
//
// The input is cut to fit `budget` tokens: the suffix keeps at most a quarter of it, from
// its start; the prefix what is left after the suffix and the prompt, from its end (the
// text nearest the cursor); extra files whole, in order, while they fit.
import type { TextTokenizer } from '../models/tokenizer.js';

export interface FimTokens {
  /** The texts of all of them, which request text must not contain. */
  markers: string[];
  prefix: number;
  suffix: number;
  middle: number;
  /** Starts a repository name before the extra files (Qwen2.5-Coder, StarCoder). */
  repo?: number;
  /** Starts each extra file. */
  fileSep?: number;
}

/** Prefix, suffix and middle spellings, per family. */
export const FIM_SPELLINGS: ReadonlyArray<readonly [string, string, string]> = [
  ['<|fim_prefix|>', '<|fim_suffix|>', '<|fim_middle|>'], // Qwen2.5-Coder, Qwen3, CodeGemma
  ['<fim_prefix>', '<fim_suffix>', '<fim_middle>'], // StarCoder, Granite Code
  ['<｜fim▁begin｜>', '<｜fim▁hole｜>', '<｜fim▁end｜>'], // DeepSeek-Coder
  ['▁<PRE>', '▁<SUF>', '▁<MID>'], // CodeLlama
  ['[PREFIX]', '[SUFFIX]', '[MIDDLE]'], // Codestral
];
const REPO_SPELLINGS = ['<|repo_name|>', '<repo_name>'];
const FILE_SEP_SPELLINGS = ['<|file_sep|>', '<|file_separator|>', '<file_sep>'];

/** The model's FIM tokens, or undefined when it has none. */
export function fimTokens(tokenizer: TextTokenizer): FimTokens | undefined {
  const first = (spellings: readonly string[]) => spellings.find((t) => tokenizer.tokenId(t) !== undefined);
  for (const spelling of FIM_SPELLINGS) {
    const [prefix, suffix, middle] = spelling.map((t) => tokenizer.tokenId(t));
    if (prefix === undefined || suffix === undefined || middle === undefined) continue;
    const repo = first(REPO_SPELLINGS);
    const fileSep = first(FILE_SEP_SPELLINGS);
    return {
      markers: [...spelling, ...(repo === undefined ? [] : [repo]), ...(fileSep === undefined ? [] : [fileSep])],
      prefix,
      suffix,
      middle,
      ...(repo === undefined ? {} : { repo: tokenizer.tokenId(repo)! }),
      ...(fileSep === undefined ? {} : { fileSep: tokenizer.tokenId(fileSep)! }),
    };
  }
  return undefined;
}

/** The parts of an infill request, tokenized (without specials). */
export interface InfillParts {
  prefix: number[];
  suffix: number[];
  /** Text already typed at the cursor: the start of the middle. */
  prompt: number[];
  /** Other files for context: the tokens of "name\n" and of the text. */
  extra: Array<{ name: number[]; text: number[] }>;
  /** "repo\n", used when the model has a repository token and there are extra files. */
  repoName: number[];
}

/** The FIM prompt of at most `budget` tokens (more only if the prompt alone is longer). */
export function infillPrompt(fim: FimTokens, parts: InfillParts, budget: number, spm = false): number[] {
  const suffix = parts.suffix.slice(0, Math.floor(budget / 4));
  const room = Math.max(0, budget - 3 - suffix.length - parts.prompt.length);
  const prefix = parts.prefix.slice(Math.max(0, parts.prefix.length - room));
  let left = room - prefix.length;
  const context: number[] = [];
  if (fim.fileSep !== undefined && parts.extra.length > 0) {
    if (fim.repo !== undefined && 1 + parts.repoName.length <= left) {
      context.push(fim.repo, ...parts.repoName);
      left -= 1 + parts.repoName.length;
    }
    for (const file of parts.extra) {
      const size = 1 + file.name.length + file.text.length;
      if (size > left) break;
      context.push(fim.fileSep, ...file.name, ...file.text);
      left -= size;
    }
  }
  const around = spm ? [fim.suffix, ...suffix, fim.prefix, ...prefix] : [fim.prefix, ...prefix, fim.suffix, ...suffix];
  return [...context, ...around, fim.middle, ...parts.prompt];
}
