// Speculative decoding's policy: how many tokens a sequence drafts each step, and when it
// stops drafting. A verify round feeds the last token and k drafted ones in one pass and
// samples at each of the k + 1 positions; the longest prefix of drafts that the samples
// reproduce is kept, plus the sample after it (a correction or a bonus token).
// With a deterministic drafter (prompt lookup) that rule is exact rejection sampling: a
// drafted x survives with probability p(x) under the whole sampler chain, and a rejected
// position's sample is distributed as p without x, renormalised. Each position draws from
// the request's own stream as plain decode would, and the stream is rewound past the draws
// of positions that were not kept, so a seeded request gives the same tokens either way.
//
// A draft model (./drafters/draft-model.ts) drafts its greedy continuation, so the same
// rule applies.
//
// Adaptivity, per sequence: acceptance is modelled as each drafted token surviving with
// probability a (estimated from its recent rounds), so k drafts yield
// 1 + a(1 - a^k)/(1 - a) tokens per round. A round costs (1 + (rho + delta) k) plain
// steps: rho the marginal cost of a verified token in a decode step relative to the whole
// step (StepCost measures it), delta what drafting a token costs (0 for prompt lookup; a
// draft model's pass over a plain step). Each round drafts the k that maximises tokens
// per cost; when no k beats plain decode the sequence stops drafting, and probes again
// after a back-off that doubles.
import { promptLookup } from './drafters/prompt-lookup.js';
import type { DraftStats } from './types.js';

export interface SpeculativeOptions {
  /**
   * The drafter: prompt lookup (n-gram matches in the sequence's own tokens), or a draft
   * model (a smaller model with the target's tokenizer).
   */
  kind: 'prompt-lookup' | 'draft-model';
  /** The most tokens drafted per round (--spec-draft-n-max). */
  nMax: number;
  /** Rounds drafting fewer tokens than this are skipped (--draft-min). */
  nMin: number;
  /** Longest n-gram prompt lookup matches (--spec-ngram-size-n). */
  ngram: number;
  /** The draft model's directory (kind 'draft-model'; --spec-draft-model, resolved). */
  draftModel?: string;
  /** Draft lengths follow acceptance and cost (below); false: every round drafts the most
   *  allowed, as llama-server does (--no-spec-adaptive). */
  adaptive: boolean;
}

export const SPECULATIVE_DEFAULTS = { nMax: 16, nMin: 0, ngram: 3, adaptive: true } as const;

/** Shortest n-gram prompt lookup matches: a single token recurs too often to predict much. */
const MIN_NGRAM = 2;
/** Weight of a sequence's older rounds in its acceptance estimate, per round. */
const DECAY = 0.9;
/** Decoded tokens a sequence waits before its first probe after drafting stopped paying. */
const BACKOFF = 16;

/** One sequence's drafter state and counters. */
export class Speculation {
  /** Decayed counts of drafted tokens kept and of rounds that ended in a rejection. */
  private kept = 0;
  private rejected = 0;
  private backoff = BACKOFF;
  /** No drafting before the sequence has generated this many tokens. */
  private pausedUntil = 0;
  private drafted = 0;
  private accepted = 0;
  private rounds = 0;

  constructor(private readonly options: SpeculativeOptions) {}

  /**
   * The tokens to verify after `tokens` this step: at most `room`, none while drafting is
   * paused or would not pay at marginal token cost `rho`.
   */
  draft(tokens: readonly number[], generated: number, rho: number, room: number): number[] {
    const k = this.draftLength(generated, rho, room);
    if (k === 0) return [];
    const drafts = promptLookup(tokens, this.options.ngram, Math.min(MIN_NGRAM, this.options.ngram), k);
    return drafts.length >= Math.max(1, this.options.nMin) ? drafts : [];
  }

  /**
   * How many tokens to draft this step at a cost of `cost` plain steps a drafted token
   * (rho, plus delta for a draft model): at most `room`, none below --draft-min, none
   * while drafting is paused or would not pay.
   */
  draftLength(generated: number, cost: number, room: number): number {
    const max = Math.min(room, this.options.nMax);
    if (!this.options.adaptive) return max >= Math.max(1, this.options.nMin) ? max : 0;
    if (generated < this.pausedUntil) return 0;
    const k = this.bestLength(cost, max);
    if (k === 0) {
      this.pausedUntil = generated + this.backoff;
      this.backoff *= 2;
      // The probe after the pause starts from a fresh, hopeful estimate.
      this.kept = this.rejected = 0;
      return 0;
    }
    return k >= Math.max(1, this.options.nMin) ? k : 0;
  }

  /** Counts a verify round: `drafted` tokens proposed, the first `accepted` of them kept. */
  record(drafted: number, accepted: number): void {
    this.drafted += drafted;
    this.accepted += accepted;
    this.rounds++;
    this.kept = this.kept * DECAY + accepted;
    this.rejected = this.rejected * DECAY + (accepted < drafted ? 1 : 0);
    if (accepted === drafted) this.backoff = BACKOFF;
  }

  /** llama-server's draft counters, once a round has run. */
  stats(): DraftStats | undefined {
    if (this.rounds === 0) return undefined;
    return { draft_n: this.drafted, draft_n_accepted: this.accepted, draft_rounds: this.rounds, draft_kind: this.options.kind };
  }

  /** The k in [0, max] with the most expected tokens per unit of step cost; 0 = plain decode. */
  private bestLength(cost: number, max: number): number {
    // Laplace's rule: an unmeasured sequence starts at a = 1/2.
    const a = (this.kept + 1) / (this.kept + this.rejected + 2);
    let best = 0;
    let bestRate = 1;
    let expected = 1;
    let ak = 1;
    for (let k = 1; k <= max; k++) {
      ak *= a;
      expected += ak;
      const rate = expected / (1 + cost * k);
      if (rate > bestRate) {
        best = k;
        bestRate = rate;
      }
    }
    return best;
  }
}

/**
 * The cost of a decode step as a line in its token count, fitted by decayed least squares
 * over the decode-only steps: ms = fixed + perToken * tokens. Only steps with different
 * token counts tell the two apart; until they have, a token is assumed to cost PRIOR_RHO
 * of a one-token step.
 */
export class StepCost {
  private n = 0;
  private sx = 0;
  private sy = 0;
  private sxx = 0;
  private sxy = 0;

  observe(tokens: number, ms: number): void {
    const d = 0.98;
    this.n = this.n * d + 1;
    this.sx = this.sx * d + tokens;
    this.sy = this.sy * d + ms;
    this.sxx = this.sxx * d + tokens * tokens;
    this.sxy = this.sxy * d + tokens * ms;
  }

  /** A plain decode step of `decoders` tokens, in ms; undefined before any step was seen. */
  stepMs(decoders: number): number | undefined {
    if (this.n < 1) return undefined;
    const fit = this.fit();
    return fit ? fit.fixed + fit.perToken * Math.max(decoders, 1) : this.sy / this.n;
  }

  /** A token's cost relative to a plain step of `decoders` tokens. */
  rho(decoders: number): number {
    const fit = this.fit();
    if (!fit) return PRIOR_RHO;
    const plain = fit.fixed + fit.perToken * Math.max(decoders, 1);
    if (!(plain > 0)) return PRIOR_RHO;
    return Math.min(Math.max(fit.perToken / plain, MIN_RHO), 1);
  }

  /** The line through the observed steps, once they differ enough in token count. */
  private fit(): { fixed: number; perToken: number } | undefined {
    const varX = this.sxx - (this.sx * this.sx) / Math.max(this.n, 1e-9);
    if (this.n < 4 || varX < 0.5) return undefined;
    const perToken = (this.sxy - (this.sx * this.sy) / this.n) / varX;
    return { fixed: (this.sy - perToken * this.sx) / this.n, perToken };
  }
}

const PRIOR_RHO = 0.1;
/** A token is never free: rounding noise must not make every draft length look worth it. */
const MIN_RHO = 0.005;
