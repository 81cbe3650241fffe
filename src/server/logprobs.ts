// Logprobs on the wire, from the engine's per-token lists (the chosen token's logprob
// first, then the top ones, sorted). They are of the distribution after the penalties and
// the grammar mask, at temperature 1 and before any truncation (what OpenAI reports; see
// ../kernels/sample.wgsl). Three shapes: OpenAI chat (choices[].logprobs.content[]), OpenAI
// legacy completions ({tokens, token_logprobs, top_logprobs, text_offset}) and
// llama-server's completion_probabilities, also in its post_sampling_probs form (the
// engine then reports the distribution each token was drawn from).
import type { GeneratedToken } from '../chat/text-generation.js';
import type { TextTokenizer } from '../models/tokenizer.js';
import { badRequest } from './errors.js';
import type { ChatCompletionBody } from './schemas.js';
import { tokenBytes, tokenText, tokenTextValidPrefix } from './token-pieces.js';

/** JSON has no -Infinity (a token the mask ruled out); OpenAI writes -9999 for "impossible". */
const finite = (logprob: number) => (Number.isFinite(logprob) ? logprob : -9999);

function chosenLogprob(token: GeneratedToken): number {
  return finite(token.logprobs?.[0]?.logprob ?? -Infinity);
}

function topOf(token: GeneratedToken) {
  return (token.logprobs ?? []).slice(1);
}

/**
 * The chat request's top-logprob count: `logprobs: true` with `top_logprobs` (0-20,
 * default 0); undefined when logprobs are off. `top_logprobs` without `logprobs: true` is
 * refused, as OpenAI does.
 */
export function chatLogprobCount(body: Pick<ChatCompletionBody, 'logprobs' | 'top_logprobs'>): number | undefined {
  if (body.top_logprobs != null && body.logprobs !== true) throw badRequest('top_logprobs requires logprobs to be true');
  return body.logprobs === true ? (body.top_logprobs ?? 0) : undefined;
}

export interface ChatTokenLogprob {
  token: string;
  logprob: number;
  bytes: number[];
  top_logprobs: Array<{ token: string; logprob: number; bytes: number[] }>;
}

/** One entry of OpenAI's choices[].logprobs.content. */
export function chatLogprobEntry(tokenizer: TextTokenizer, token: GeneratedToken): ChatTokenLogprob {
  const item = (id: number, logprob: number) => ({ token: tokenText(tokenizer, id), logprob: finite(logprob), bytes: [...tokenBytes(tokenizer, id)] });
  return { ...item(token.id, chosenLogprob(token)), top_logprobs: topOf(token).map((t) => item(t.token, t.logprob)) };
}

/**
 * choices[].logprobs of a chat completion (or of one chunk of its stream); with
 * `postSampling` (llama-server's post_sampling_probs) the entries are its prob/top_probs ones.
 */
export function chatLogprobs(tokenizer: TextTokenizer, tokens: readonly GeneratedToken[], postSampling = false) {
  return { content: postSampling ? postSamplingProbabilities(tokenizer, tokens) : tokens.map((t) => chatLogprobEntry(tokenizer, t)), refusal: null };
}

export interface CompletionLogprobs {
  tokens: string[];
  token_logprobs: number[];
  /** The top tokens, and the chosen one, by text (so up to N + 1 entries). */
  top_logprobs: Array<Record<string, number>>;
  /** Each token's character offset in the completion text. */
  text_offset: number[];
}

/**
 * OpenAI's legacy completions shape, built token by token so that a stream's chunks carry
 * running text offsets.
 */
export class CompletionLogprobsBuilder {
  private offset = 0;

  constructor(private readonly tokenizer: TextTokenizer) {}

  add(tokens: readonly GeneratedToken[]): CompletionLogprobs {
    const out: CompletionLogprobs = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
    for (const token of tokens) {
      const text = tokenText(this.tokenizer, token.id);
      const chosen = chosenLogprob(token);
      const top: Record<string, number> = {};
      for (const t of topOf(token)) {
        const key = tokenText(this.tokenizer, t.token);
        if (!(key in top)) top[key] = finite(t.logprob);
      }
      if (!(text in top)) top[text] = chosen;
      out.tokens.push(text);
      out.token_logprobs.push(chosen);
      out.top_logprobs.push(top);
      out.text_offset.push(this.offset);
      this.offset += text.length;
    }
    return out;
  }
}

export interface NativeTokenProbability {
  id: number;
  token: string;
  bytes: number[];
  logprob: number;
  top_logprobs: Array<{ id: number; token: string; bytes: number[]; logprob: number }>;
}

interface NativePostSamplingProbability {
  id: number;
  token: string;
  bytes: number[];
  prob: number;
  top_probs: Array<{ id: number; token: string; bytes: number[]; prob: number }>;
}

/** llama-server's completion_probabilities entries (its token text stops before a cut-off character). */
export function completionProbabilities(tokenizer: TextTokenizer, tokens: readonly GeneratedToken[]): NativeTokenProbability[] {
  const item = (id: number, logprob: number) => ({
    id,
    token: tokenTextValidPrefix(tokenizer, id),
    bytes: [...tokenBytes(tokenizer, id)],
    logprob: finite(logprob),
  });
  return tokens.map((t) => ({ ...item(t.id, chosenLogprob(t)), top_logprobs: topOf(t).map((p) => item(p.token, p.logprob)) }));
}

/**
 * llama-server's completion_probabilities with post_sampling_probs, for tokens generated
 * with postSamplingProbs (their logprobs are of the distribution each was drawn from):
 * `prob` and `top_probs` (the kept tokens, so possibly fewer than asked for).
 */
export function postSamplingProbabilities(tokenizer: TextTokenizer, tokens: readonly GeneratedToken[]): NativePostSamplingProbability[] {
  const item = (id: number, logprob: number) => ({ id, token: tokenTextValidPrefix(tokenizer, id), bytes: [...tokenBytes(tokenizer, id)], prob: Math.exp(logprob) });
  return tokens.map((t) => ({ ...item(t.id, t.logprobs?.[0]?.logprob ?? -Infinity), top_probs: topOf(t).map((p) => item(p.token, p.logprob)) }));
}
