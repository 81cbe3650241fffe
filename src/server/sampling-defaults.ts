// The server's default generation settings: what a request gets for every field it
// leaves out, settable from the command line, and reported as-is by GET /props. One
// object, spelled as llama-server's /props spells it, so that a new sampler knob is one
// field here (plus its flag in ../cli-options.ts and its use in ./generation-params.ts).
import { PENALTY_WINDOW, XTC_THRESHOLD } from '../engine/types.js';
import type { LoopPolicy } from './loop-policy.js';

export interface SamplingDefaults {
  /** Token budget of a request that sets none; -1 = until the context is full. */
  n_predict: number;
  /** 0 = greedy. */
  temperature: number;
  /** 0 keeps every token. */
  top_k: number;
  /** 1 keeps every token. */
  top_p: number;
  min_p: number;
  repeat_penalty: number;
  repeat_last_n: number;
  /** -1 = a fresh random seed per request. */
  seed: number;
  frequency_penalty: number;
  presence_penalty: number;
  dry_multiplier: number;
  dry_base: number;
  dry_allowed_length: number;
  dry_penalty_last_n: number;
  xtc_probability: number;
  xtc_threshold: number;
  /** MLXCEL_LOOP_DETECTION (./loop-policy.ts); /props shows it resolved for the loaded model. */
  loop_detection: LoopPolicy;
  /** Prompt tokens (after BOS) a context shift keeps; -1 = the whole prompt (--keep). */
  n_keep: number;
  /** --context-shift: a generation that fills its context drops the older half of it and
   *  goes on, instead of stopping; a server switch, not a request field. */
  context_shift: boolean;
}

/**
 * llama-server's defaults, which suit local models better than OpenAI's (temperature 1, no
 * top-k): temperature 0.8, top_k 40, top_p 0.95, min_p 0.05; no penalties (repeat_penalty
 * 1, frequency/presence 0, dry_multiplier 0) and XTC off (xtc_probability 0).
 * repeat_last_n, dry_base, dry_allowed_length and xtc_threshold are llama-server's, inert
 * while their sampler is off; dry_penalty_last_n is 0 (the whole context) as in the
 * reference's /props example. p_less has no server-wide default (the REST reference).
 */
export const DEFAULT_SAMPLING: Readonly<SamplingDefaults> = Object.freeze({
  n_predict: -1,
  temperature: 0.8,
  top_k: 40,
  top_p: 0.95,
  min_p: 0.05,
  repeat_penalty: 1,
  repeat_last_n: PENALTY_WINDOW,
  seed: -1,
  frequency_penalty: 0,
  presence_penalty: 0,
  dry_multiplier: 0,
  dry_base: 1.75,
  dry_allowed_length: 2,
  dry_penalty_last_n: 0,
  xtc_probability: 0,
  xtc_threshold: XTC_THRESHOLD,
  loop_detection: 'auto',
  n_keep: 0,
  context_shift: false,
});

/** The defaults with the command line's settings on top. */
export function samplingDefaults(overrides: Partial<SamplingDefaults> = {}): SamplingDefaults {
  const defined = Object.entries(overrides).filter(([, v]) => v !== undefined);
  return { ...DEFAULT_SAMPLING, ...Object.fromEntries(defined) };
}

/**
 * The token budget of a request that asked for `requested` (undefined: nothing), before
 * the context cap: the server's n_predict fills in a missing value (the REST reference's
 * "when omitted, server defaults are used"); undefined means "until the context is full"
 * (with a context shift: no limit). Unlike llama-server's -n, it does not cap a request
 * that asks for more.
 */
export function tokenBudget(requested: number | undefined, nPredict: number): number | undefined {
  return requested ?? (nPredict < 0 ? undefined : nPredict);
}
