// Host side of the penalty samplers: from a sequence's token history, the per-token logit
// changes that logit_bias.wgsl applies on the GPU. Only tokens present in the history or
// named by the request's logit_bias get an entry, so the list is short and the logits
// never leave the GPU.
import type { TokenPenalty } from './forward.js';
import { PENALTY_WINDOW, type DryParams, type SamplingParams } from './types.js';

/** Whether `sampling` turns on a penalty sampler or a logit bias, which then need entries each step. */
export function hasPenalties(sampling: SamplingParams): boolean {
  return readsHistory(sampling) || (sampling.logitBias?.size ?? 0) > 0;
}

/** Whether `sampling` turns on a penalty sampler that reads the sequence's history (a logit bias does not). */
export function readsHistory(sampling: SamplingParams): boolean {
  return hasRepetitionPenalty(sampling) || (sampling.dry !== undefined && sampling.dry.multiplier > 0);
}

function hasRepetitionPenalty(s: SamplingParams): boolean {
  return (s.repetitionPenalty ?? 1) !== 1 || (s.frequencyPenalty ?? 0) !== 0 || (s.presencePenalty ?? 0) !== 0;
}

/**
 * Repetition, frequency and presence penalties, then DRY, then the logit bias, merged per
 * token: the kernel subtracts `subtract`, so a bias b lowers it by b (-Infinity bans).
 */
export function penalties(history: number[], sampling: SamplingParams): Map<number, TokenPenalty> | undefined {
  const out = new Map<number, TokenPenalty>();
  const rp = sampling.repetitionPenalty ?? 1;
  const fp = sampling.frequencyPenalty ?? 0;
  const pp = sampling.presencePenalty ?? 0;
  if (hasRepetitionPenalty(sampling)) {
    const n = sampling.repetitionContextSize ?? PENALTY_WINDOW;
    const window = n < 0 ? history : n === 0 ? [] : history.slice(-n);
    const counts = new Map<number, number>();
    for (const t of window) counts.set(t, (counts.get(t) ?? 0) + 1);
    for (const [token, count] of counts) out.set(token, { repeat: rp, subtract: count * fp + pp });
  }
  if (sampling.dry && sampling.dry.multiplier > 0) {
    for (const [token, penalty] of dryPenalties(history, sampling.dry)) {
      const p = out.get(token) ?? { repeat: 1, subtract: 0 };
      p.subtract += penalty;
      out.set(token, p);
    }
  }
  for (const [token, bias] of sampling.logitBias ?? []) {
    const p = out.get(token) ?? { repeat: 1, subtract: 0 };
    p.subtract -= bias;
    out.set(token, p);
  }
  return out.size > 0 ? out : undefined;
}

/**
 * DRY ("don't repeat yourself"): if the history's tail repeats an earlier stretch of length
 * L >= allowedLength, the token that followed that stretch is penalised by
 * multiplier * base^(L - allowedLength); a sequence breaker ends any match. Match lengths
 * come from the Z-function of the reversed window, so one step is linear in the window.
 */
export function dryPenalties(history: number[], dry: DryParams): Map<number, number> {
  const window = dry.penaltyLastN > 0 ? history.slice(-dry.penaltyLastN) : history;
  const n = window.length;
  const out = new Map<number, number>();
  if (n < 2) return out;
  const breakers = new Set(dry.sequenceBreakers);
  // rev[i] = window[n-1-i]; z[i] = length of the common prefix of rev and rev[i..], i.e. of
  // the common suffix of the whole window and window[..n-1-i].
  const rev = window.slice().reverse();
  const z = zFunction(rev);
  // Matches stop at a breaker: the tail's own run without breakers bounds every match.
  let tailRun = 0;
  while (tailRun < n && !breakers.has(rev[tailRun])) tailRun++;
  for (let i = 1; i < n; i++) {
    // The stretch ending at window[n-1-i] is followed by window[n-i].
    const next = window[n - i];
    const len = Math.min(z[i], tailRun);
    if (len < dry.allowedLength || breakers.has(next)) continue;
    const penalty = dry.multiplier * Math.pow(dry.base, len - dry.allowedLength);
    out.set(next, Math.max(out.get(next) ?? 0, penalty));
  }
  return out;
}

function zFunction(s: number[]): number[] {
  const n = s.length;
  const z = new Array<number>(n).fill(0);
  let l = 0;
  let r = 0;
  for (let i = 1; i < n; i++) {
    if (i < r) z[i] = Math.min(r - i, z[i - l]);
    while (i + z[i] < n && s[z[i]] === s[i + z[i]]) z[i]++;
    if (i + z[i] > r) {
      l = i;
      r = i + z[i];
    }
  }
  return z;
}
