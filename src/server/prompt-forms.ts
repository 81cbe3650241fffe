// The prompt forms of the completion routes, as llama-server reads them (and, for
// /v1/completions, OpenAI's batches):
//   "text"                          one prompt
//   [12, 34, 56]                    one prompt of token ids
//   [12, "text", 34]                one prompt, ids and text mixed (ids and strings both present)
//   {"prompt_string": "text"}       one prompt (multimodal_data is refused: text-only models)
//   [p1, p2, ...]                   several prompts, each any of the forms above: a batch
// Text gets the tokenizer's special tokens (BOS) when it starts the prompt, as llama-server
// and vLLM do; ids a client sent are checked, since the engine indexes embeddings with them.
import type { Engine } from '../engine/engine.js';
import { badRequest } from './errors.js';
import { tokenizeText } from './generation-params.js';

/** One prompt: text, token ids, or both mixed. */
export type PromptPieces = string | Array<string | number>;

const isId = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v);

/**
 * The prompts of a request's `prompt` field (already known to be a string, an array or an
 * object) and whether it was a batch. 400 for a shape none of the forms has.
 */
export function promptList(prompt: unknown): { prompts: PromptPieces[]; batch: boolean } {
  const single = onePrompt(prompt);
  if (single !== undefined) return { prompts: [single], batch: false };
  if (!Array.isArray(prompt) || prompt.length === 0) throw badRequest('prompt must be a string, token ids, a {"prompt_string"} object, or an array of prompts');
  return {
    prompts: prompt.map((p, i) => {
      const one = onePrompt(p);
      if (one === undefined) throw badRequest(`prompt[${i}] must be a string, token ids, ids mixed with strings, or a {"prompt_string"} object`);
      return one;
    }),
    batch: true,
  };
}

/** A single prompt in any of its forms, or undefined when `value` is not one (a batch, or nothing valid). */
function onePrompt(value: unknown): PromptPieces | undefined {
  if (typeof value === 'string') return value;
  if (Array.isArray(value)) return tokenPieces(value);
  if (typeof value === 'object' && value !== null) {
    const { prompt_string: text, multimodal_data: media } = value as { prompt_string?: unknown; multimodal_data?: unknown };
    // Any media (an array of base64 strings, or one string) is refused; an empty list is none.
    if (media != null && !(Array.isArray(media) && media.length === 0)) throw badRequest('the loaded model takes text only; multimodal_data is not supported');
    if (typeof text !== 'string') throw badRequest('a prompt object needs a "prompt_string" string');
    return text;
  }
  return undefined;
}

/** Token ids, or ids mixed with text (both kinds present, nothing else): one prompt's pieces; undefined for any other array. */
export function tokenPieces(value: unknown[]): Array<string | number> | undefined {
  if (value.length > 0 && value.every(isId)) return value;
  if (value.some(isId) && value.some((v) => typeof v === 'string') && value.every((v) => isId(v) || typeof v === 'string')) return value as Array<string | number>;
  return undefined;
}

/**
 * A prompt as token ids: text pieces tokenized off the event loop (the first with the
 * tokenizer's specials; ./generation-params.ts tokenizeText bounds each by the context),
 * ids checked.
 */
export async function tokenizePrompt(engine: Engine, prompt: PromptPieces): Promise<number[]> {
  const pieces = typeof prompt === 'string' ? [prompt] : prompt;
  const vocabSize = engine.info.vocabSize;
  const ids: number[] = [];
  for (const [i, piece] of pieces.entries()) {
    if (typeof piece === 'string') {
      ids.push(...(await tokenizeText(engine, piece, i === 0)));
      continue;
    }
    if (piece < 0 || piece >= vocabSize) throw badRequest(`prompt token id ${piece} is out of vocabulary range (vocab_size ${vocabSize})`);
    ids.push(piece);
  }
  return ids;
}
