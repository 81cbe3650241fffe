// The server's default generation settings: what a request gets for every field it
// leaves out, settable from the command line, and reported as-is by GET /props. One
// object, spelled as llama-server's /props spells it, so that a new sampler knob is one
// field here (plus its flag in ../cli-options.ts and its use in ./generation-params.ts).

export interface SamplingDefaults {
  /** Token budget of a request that sets none; -1 = until the context is full. A value
   *  >= 0 also caps what a request may ask for, as llama-server's -n does. */
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
}

/**
 * temperature/top_k/top_p are llama-server's defaults, which suit local models better
 * than OpenAI's (temperature 1, no top-k). The knobs the engine does not apply yet are
 * at their neutral values, so /props describes what actually happens: min_p 0 (off),
 * repeat_penalty 1 and frequency/presence 0 (no penalty), dry_multiplier 0 (DRY off).
 * repeat_last_n, dry_base and dry_allowed_length are llama-server's, inert while their
 * penalty is off; dry_penalty_last_n is 0 as in the reference's /props example.
 */
export const DEFAULT_SAMPLING: Readonly<SamplingDefaults> = Object.freeze({
  n_predict: -1,
  temperature: 0.8,
  top_k: 40,
  top_p: 0.95,
  min_p: 0,
  repeat_penalty: 1,
  repeat_last_n: 64,
  seed: -1,
  frequency_penalty: 0,
  presence_penalty: 0,
  dry_multiplier: 0,
  dry_base: 1.75,
  dry_allowed_length: 2,
  dry_penalty_last_n: 0,
});

/** The defaults with the command line's settings on top. */
export function samplingDefaults(overrides: Partial<SamplingDefaults> = {}): SamplingDefaults {
  const defined = Object.entries(overrides).filter(([, v]) => v !== undefined);
  return { ...DEFAULT_SAMPLING, ...Object.fromEntries(defined) };
}

/**
 * The token budget of a request that asked for `requested` (undefined: nothing), before
 * the context cap. Mirrors llama-server: the server's n_predict fills in a missing value
 * and caps a larger one; undefined means "until the context is full".
 */
export function tokenBudget(requested: number | undefined, nPredict: number): number | undefined {
  if (nPredict < 0) return requested;
  return requested === undefined ? nPredict : Math.min(requested, nPredict);
}
