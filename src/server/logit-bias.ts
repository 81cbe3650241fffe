// logit_bias in OpenAI's form (a map of token id -> bias) and llama-server's (that map,
// also keyed by text, or an array of [id or text, bias] pairs; a bias of false bans the
// token), as the engine's map of token -> additive bias. Text is tokenized without special
// tokens and the bias applies to each of its tokens; a token named twice gets the sum, as
// llama-server applies every pair. ignore_eos adds a ban of every end-of-generation token.
import type { Engine } from '../engine/engine.js';
import { MAX_LOGIT_BIAS_TOKENS } from '../engine/types.js';
import { badRequest } from './errors.js';

export type LogitBiasValue = number | false;
export type LogitBias = Record<string, LogitBiasValue> | Array<[number | string, LogitBiasValue]>;

/** The request's logit_bias as token -> bias, undefined when it names no token; 400 for an id out of the vocabulary. */
export function logitBiasFrom(engine: Engine, logitBias: LogitBias | null | undefined): Map<number, number> | undefined {
  if (logitBias == null) return undefined;
  const pairs = Array.isArray(logitBias) ? logitBias : Object.entries(logitBias).map(([key, bias]): [number | string, LogitBiasValue] => [/^[0-9]+$/.test(key) ? Number(key) : key, bias]);
  const vocabSize = engine.info.vocabSize;
  const out = new Map<number, number>();
  for (const [key, value] of pairs) {
    const bias = value === false ? -Infinity : value;
    const tokens = typeof key === 'string' ? engine.tokenizer.encode(key, false) : [key];
    for (const token of tokens) {
      if (token < 0 || token >= vocabSize) throw badRequest(`logit_bias token id ${token} is out of vocabulary range (vocab_size ${vocabSize})`);
      out.set(token, (out.get(token) ?? 0) + bias);
    }
  }
  checkSize(out);
  return out.size > 0 ? out : undefined;
}

/**
 * llama-server's ignore_eos: the logit bias with every end-of-generation token of the
 * vocabulary (`eogIds`: eos, eot, im_end-like ids that end generation) at -Infinity, so
 * that generation runs to its token limit.
 */
export function banEndOfGeneration(logitBias: Map<number, number> | undefined, eogIds: readonly number[]): Map<number, number> {
  const out = new Map(logitBias);
  for (const id of eogIds) out.set(id, -Infinity);
  checkSize(out);
  return out;
}

function checkSize(bias: Map<number, number>): void {
  if (bias.size > MAX_LOGIT_BIAS_TOKENS) throw badRequest(`logit_bias names ${bias.size} tokens; at most ${MAX_LOGIT_BIAS_TOKENS} are allowed`);
}
