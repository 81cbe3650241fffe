// Which loop detection (the engine's early stop on a repeating tail, ../engine/loop-detection.ts)
// a request gets. Precedence, as the REST reference words it:
//  1. any of max_pattern_size / min_pattern_size / min_count in the request: the request's
//     values, the fields it leaves out taken from the server policy's thresholds (or from
//     STANDARD_LOOP_THRESHOLDS when the policy is off); an explicit max_pattern_size 0, or a
//     min_count below 2, disables detection for that request;
//  2. otherwise the operator's MLXCEL_LOOP_DETECTION, when set (see parseLoopPolicy);
//  3. otherwise the per-family default for the model's config.json model_type (on for the
//     Gemma 4 family at min 1, max 20, count 4), else off.
import type { LoopDetection } from '../engine/types.js';

/** 'auto': the per-family default; 'off': never, unless a request asks. */
export type LoopPolicy = 'auto' | 'off' | LoopDetection;

/** The REST reference's Gemma 4 thresholds; also what a request that sets only some fields starts from. */
export const STANDARD_LOOP_THRESHOLDS: Readonly<LoopDetection> = Object.freeze({ minPatternSize: 1, maxPatternSize: 20, minCount: 4 });

/** Families that fall into loops often enough to want detection on by default, by model_type. */
export const FAMILY_LOOP_DEFAULTS: Readonly<Record<string, Readonly<LoopDetection>>> = Object.freeze({
  gemma4: STANDARD_LOOP_THRESHOLDS,
  gemma4_text: STANDARD_LOOP_THRESHOLDS,
});

export const LOOP_POLICY_HELP = 'MLXCEL_LOOP_DETECTION: loop detection for requests that set none of max_pattern_size/min_pattern_size/min_count: "auto" (default: per model family, on for Gemma 4 at 1,20,4), "off", "on" (1,20,4 for every model), or "MIN,MAX,COUNT" (e.g. "1,8,3")';

/**
 * MLXCEL_LOOP_DETECTION's value: auto | off (also 0, false, no, none, disabled) | on (also
 * 1, true, yes, enabled) | MIN,MAX,COUNT with MIN <= MAX (MAX 0 or COUNT < 2 reads as off).
 * Throws on anything else.
 */
export function parseLoopPolicy(text: string): LoopPolicy {
  const word = text.trim().toLowerCase();
  if (word === '' || word === 'auto') return 'auto';
  if (['off', '0', 'false', 'no', 'none', 'disabled'].includes(word)) return 'off';
  if (['on', '1', 'true', 'yes', 'enabled'].includes(word)) return { ...STANDARD_LOOP_THRESHOLDS };
  const m = /^(\d+)\s*,\s*(\d+)\s*,\s*(\d+)$/.exec(word);
  if (!m) throw new Error(`MLXCEL_LOOP_DETECTION must be auto, off, on or MIN,MAX,COUNT (e.g. 1,20,4), got "${text}"`);
  const [minPatternSize, maxPatternSize, minCount] = [m[1], m[2], m[3]].map(Number) as [number, number, number];
  if (maxPatternSize > 0 && minPatternSize > maxPatternSize) {
    throw new Error(`MLXCEL_LOOP_DETECTION: MIN (${minPatternSize}) must not exceed MAX (${maxPatternSize})`);
  }
  return active({ minPatternSize, maxPatternSize, minCount }) ? { minPatternSize, maxPatternSize, minCount } : 'off';
}

/** What the server applies to a request that sets no loop-detection field; undefined = off. */
export function serverLoopDetection(policy: LoopPolicy, modelType: string): LoopDetection | undefined {
  if (policy === 'off') return undefined;
  if (policy === 'auto') {
    const family = FAMILY_LOOP_DEFAULTS[modelType];
    return family ? { ...family } : undefined;
  }
  return active(policy) ? { ...policy } : undefined;
}

export interface LoopFields {
  max_pattern_size?: number | null;
  min_pattern_size?: number | null;
  min_count?: number | null;
}

/** The request's loop detection after the precedence above; undefined = off. */
export function requestLoopDetection(fields: LoopFields, policy: LoopPolicy, modelType: string): LoopDetection | undefined {
  const server = serverLoopDetection(policy, modelType);
  if (fields.max_pattern_size == null && fields.min_pattern_size == null && fields.min_count == null) return server;
  const base = server ?? STANDARD_LOOP_THRESHOLDS;
  const d: LoopDetection = {
    minPatternSize: fields.min_pattern_size ?? base.minPatternSize,
    maxPatternSize: fields.max_pattern_size ?? base.maxPatternSize,
    minCount: fields.min_count ?? base.minCount,
  };
  return active(d) ? d : undefined;
}

/** Detection happens at all: some pattern size to scan and at least two repeats. */
function active(d: LoopDetection): boolean {
  return d.maxPatternSize > 0 && d.minCount >= 2 && Math.max(1, d.minPatternSize) <= d.maxPatternSize;
}
