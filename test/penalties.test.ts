// Host side of the sampler (no GPU): the penalty entries src/engine/penalties.ts hands to
// logit_bias.wgsl (repetition / frequency / presence over a window, DRY via the
// Z-function, merged per token), loop detection (src/engine/loop-detection.ts) and the
// per-request RNG (src/engine/rng.ts).
//
// DRY's semantics as penalties.ts documents them (text-generation-webui / llama.cpp): if
// the history's tail repeats an earlier stretch of length L >= allowed_length, the token
// that followed that stretch is penalised by multiplier * base^(L - allowed_length), the
// largest over all such stretches; no match may contain a sequence breaker, and a breaker
// is never the penalised token; only the last penalty_last_n tokens are scanned (0 = all).
// Besides hand-computed cases, a brute-force O(n^2) longest-common-suffix reference is
// compared with the Z-function implementation on random token sequences.
//
// The RNG's uniformity checks use Pearson's chi-square at alpha = 0.001 (critical value
// for the degrees of freedom from test/helpers/chi-square.ts).
import { describe, expect, it } from 'vitest';
import { isLooping } from '../src/engine/loop-detection.js';
import { dryPenalties, penalties } from '../src/engine/penalties.js';
import { Rng } from '../src/engine/rng.js';
import type { DryParams, LoopDetection, SamplingParams } from '../src/engine/types.js';
import { chiSquare } from './helpers/chi-square.js';
import { rng } from './kernels/harness.js';

const BASE: SamplingParams = { temperature: 1, topK: 0, topP: 1 };

/** A penalty map as sorted [token, repeat, subtract] rows (subtract rounded to 1e-12). */
function rows(m: Map<number, { repeat: number; subtract: number }> | undefined): [number, number, number][] | undefined {
  if (!m) return undefined;
  return [...m].sort((a, b) => a[0] - b[0]).map(([t, p]) => [t, p.repeat, Math.round(p.subtract * 1e12) / 1e12]);
}

function dry(over: Partial<DryParams> = {}): DryParams {
  return { multiplier: 1, base: 2, allowedLength: 2, penaltyLastN: 0, sequenceBreakers: [], ...over };
}

const sorted = (m: Map<number, number>) => [...m].sort((a, b) => a[0] - b[0]);

describe('logit bias', () => {
  it('adds to the penalties per token, alone or on top of them; -Infinity bans', () => {
    const logitBias = new Map([[5, 2], [4, -Infinity], [8, -1.5]]);
    expect(rows(penalties([], { ...BASE, logitBias }))).toEqual([[4, 1, Infinity], [5, 1, -2], [8, 1, 1.5]]);
    // 5 seen twice: frequency 0.5 * 2 + presence 0.25, then the bias 2.
    expect(rows(penalties([5, 5, 7], { ...BASE, repetitionPenalty: 1.2, frequencyPenalty: 0.5, presencePenalty: 0.25, logitBias }))).toEqual([
      [4, 1, Infinity], [5, 1.2, -0.75], [7, 1.2, 0.75], [8, 1, 1.5],
    ]);
  });
});

describe('repetition / frequency / presence penalties', () => {
  // counts over the whole history: 5 x3, 3 x2, 7 x1, 9 x1.
  const history = [5, 3, 5, 7, 5, 3, 9];
  const s: SamplingParams = { ...BASE, repetitionPenalty: 1.3, frequencyPenalty: 0.5, presencePenalty: 0.2 };

  it('window -1: the whole history (subtract = count * frequency + presence)', () => {
    expect(rows(penalties(history, { ...s, repetitionContextSize: -1 }))).toEqual([
      [3, 1.3, 1.2], [5, 1.3, 1.7], [7, 1.3, 0.7], [9, 1.3, 0.7],
    ]);
  });

  it('window 0: nothing is penalised', () => {
    expect(penalties(history, { ...s, repetitionContextSize: 0 })).toBeUndefined();
  });

  it('window N: the last N tokens only', () => {
    // Last 3: [5, 3, 9].
    expect(rows(penalties(history, { ...s, repetitionContextSize: 3 }))).toEqual([[3, 1.3, 0.7], [5, 1.3, 0.7], [9, 1.3, 0.7]]);
    // Last 1: [9].
    expect(rows(penalties(history, { ...s, repetitionContextSize: 1 }))).toEqual([[9, 1.3, 0.7]]);
    // Longer than the history: all of it.
    expect(rows(penalties(history, { ...s, repetitionContextSize: 100 }))).toEqual(rows(penalties(history, { ...s, repetitionContextSize: -1 })));
  });

  it('the default window is the last 64 tokens', () => {
    const long = [...new Array<number>(36).fill(11), ...new Array<number>(64).fill(12)];
    expect(rows(penalties(long, { ...BASE, presencePenalty: 1 }))).toEqual([[12, 1, 1]]);
    expect(rows(penalties([11, ...long.slice(37)], { ...BASE, presencePenalty: 1 }))).toEqual([[11, 1, 1], [12, 1, 1]]);
  });

  it('each penalty alone; all off gives no entries', () => {
    expect(rows(penalties(history, { ...BASE, repetitionPenalty: 1.1, repetitionContextSize: -1 }))).toEqual([[3, 1.1, 0], [5, 1.1, 0], [7, 1.1, 0], [9, 1.1, 0]]);
    expect(rows(penalties(history, { ...BASE, frequencyPenalty: -0.5, repetitionContextSize: -1 }))).toEqual([[3, 1, -1], [5, 1, -1.5], [7, 1, -0.5], [9, 1, -0.5]]);
    expect(rows(penalties(history, { ...BASE, presencePenalty: 0.4, repetitionContextSize: 2 }))).toEqual([[3, 1, 0.4], [9, 1, 0.4]]);
    expect(penalties(history, BASE)).toBeUndefined();
    expect(penalties(history, { ...BASE, repetitionPenalty: 1, frequencyPenalty: 0, presencePenalty: 0, dry: dry({ multiplier: 0 }) })).toBeUndefined();
    expect(penalties([], s)).toBeUndefined();
  });

  it('DRY merges into the same entry per token; DRY-only tokens get repeat 1', () => {
    // DRY on [1, 2, 3, 4, 1, 2, 3] (allowed 2, 0.8 * 1.75^(3 - 2) = 1.4) penalises 4.
    const h = [1, 2, 3, 4, 1, 2, 3];
    const d = dry({ multiplier: 0.8, base: 1.75, allowedLength: 2 });
    const all = { ...BASE, repetitionPenalty: 1.2, frequencyPenalty: 0.1, presencePenalty: 0.3, dry: d };
    expect(rows(penalties(h, { ...all, repetitionContextSize: -1 }))).toEqual([
      [1, 1.2, 0.5], [2, 1.2, 0.5], [3, 1.2, 0.5], [4, 1.2, 1.8],
    ]);
    // The repetition window (last 3: [1, 2, 3]) does not contain 4; DRY scans all.
    expect(rows(penalties(h, { ...all, repetitionContextSize: 3 }))).toEqual([
      [1, 1.2, 0.4], [2, 1.2, 0.4], [3, 1.2, 0.4], [4, 1, 1.4],
    ]);
    // DRY alone.
    expect(rows(penalties(h, { ...BASE, dry: d }))).toEqual([[4, 1, 1.4]]);
    // Every (sequence, token) at most once: logit_bias.wgsl relies on it.
    const m = penalties(h, { ...all, repetitionContextSize: -1 })!;
    expect(new Set(m.keys()).size).toBe(m.size);
  });
});

describe('DRY, hand-computed', () => {
  it('allowed length: a 3-token repeat of [1, 2, 3] penalises the 4 that followed it', () => {
    const h = [1, 2, 3, 4, 1, 2, 3];
    expect(sorted(dryPenalties(h, dry({ multiplier: 0.8, base: 1.75, allowedLength: 2 })))).toEqual([[4, 0.8 * 1.75]]);
    expect(sorted(dryPenalties(h, dry({ multiplier: 0.8, base: 1.75, allowedLength: 3 })))).toEqual([[4, 0.8]]);
    expect(sorted(dryPenalties(h, dry({ multiplier: 0.8, base: 1.75, allowedLength: 4 })))).toEqual([]);
  });

  it('base / multiplier growth: multiplier * base^(L - allowed) for L = 2..7', () => {
    for (let L = 2; L <= 7; L++) {
      const run = Array.from({ length: L }, (_, i) => i + 1);
      const got = dryPenalties([...run, 99, ...run], dry({ multiplier: 0.5, base: 1.5, allowedLength: 2 }));
      expect(sorted(got), `L = ${L}`).toEqual([[99, 0.5 * 1.5 ** (L - 2)]]);
    }
  });

  it('sequence breakers end matches: in the tail, and as the following token', () => {
    const h = [1, 2, 3, 4, 1, 2, 3];
    // The tail's breaker-free run is [3]: a match of 1 < 2.
    expect(sorted(dryPenalties(h, dry({ multiplier: 0.8, base: 1.75, sequenceBreakers: [2] })))).toEqual([]);
    expect(sorted(dryPenalties(h, dry({ multiplier: 0.8, base: 1.75, allowedLength: 1, sequenceBreakers: [2] })))).toEqual([[4, 0.8]]);
    // A breaker inside the repeated stretch: [4, 9, 5, 6] repeats, but only [5, 6] counts.
    const g = [4, 9, 5, 6, 8, 4, 9, 5, 6];
    expect(sorted(dryPenalties(g, dry()))).toEqual([[8, 4]]);
    expect(sorted(dryPenalties(g, dry({ sequenceBreakers: [9] })))).toEqual([[8, 1]]);
    // The token after the earlier stretch is a breaker: never penalised.
    expect(sorted(dryPenalties([1, 2, 9, 5, 1, 2], dry()))).toEqual([[9, 1]]);
    expect(sorted(dryPenalties([1, 2, 9, 5, 1, 2], dry({ sequenceBreakers: [9] })))).toEqual([]);
  });

  it('the max over occurrences of the same following token', () => {
    // [5, 1, 2] then 9 (L 3), [6, 1, 2] then 9 (L 2): 2^1.
    expect(sorted(dryPenalties([5, 1, 2, 9, 6, 1, 2, 9, 3, 5, 1, 2], dry()))).toEqual([[9, 2]]);
    // The longer match second.
    expect(sorted(dryPenalties([6, 1, 2, 9, 5, 1, 2, 9, 3, 5, 1, 2], dry()))).toEqual([[9, 2]]);
  });

  it('different following tokens each get their own match length', () => {
    // [1, 2, 3] then 7 (L 3: 2), [7, 2, 3] then 8 (L 2: 1).
    expect(sorted(dryPenalties([1, 2, 3, 7, 2, 3, 8, 1, 2, 3], dry()))).toEqual([[7, 2], [8, 1]]);
  });

  it('penalty_last_n: only the last N tokens are scanned (0 = all)', () => {
    const h = [1, 2, 3, 7, 2, 3, 8, 1, 2, 3];
    // Last 6: [2, 3, 8, 1, 2, 3]: [2, 3] then 8 (L 2, cut by the window start).
    expect(sorted(dryPenalties(h, dry({ penaltyLastN: 6 })))).toEqual([[8, 1]]);
    expect(sorted(dryPenalties(h, dry({ penaltyLastN: 0 })))).toEqual([[7, 2], [8, 1]]);
    expect(sorted(dryPenalties(h, dry({ penaltyLastN: 100 })))).toEqual([[7, 2], [8, 1]]);
    // Last 3: [1, 2, 3] has no earlier stretch.
    expect(sorted(dryPenalties(h, dry({ penaltyLastN: 3 })))).toEqual([]);
  });

  it('overlapping self-repeats and tiny histories', () => {
    // [4, 4, 4, 4]: the stretch of 3 fours is followed by a four: 2^(3 - 2).
    expect(sorted(dryPenalties([4, 4, 4, 4], dry()))).toEqual([[4, 2]]);
    expect(sorted(dryPenalties([], dry()))).toEqual([]);
    expect(sorted(dryPenalties([4], dry({ allowedLength: 0 })))).toEqual([]);
    expect(sorted(dryPenalties([4, 4], dry({ allowedLength: 1 })))).toEqual([[4, 1]]);
  });
});

/** O(n^2) DRY: for every earlier end position, the longest common suffix with the tail. */
function dryBrute(history: number[], d: DryParams): Map<number, number> {
  const w = d.penaltyLastN > 0 ? history.slice(-d.penaltyLastN) : history;
  const n = w.length;
  const breakers = new Set(d.sequenceBreakers);
  const out = new Map<number, number>();
  for (let j = 0; j + 1 < n; j++) {
    const next = w[j + 1]!;
    if (breakers.has(next)) continue;
    let len = 0;
    while (len <= j && w[j - len] === w[n - 1 - len] && !breakers.has(w[n - 1 - len]!)) len++;
    if (len < d.allowedLength) continue;
    const p = d.multiplier * Math.pow(d.base, len - d.allowedLength);
    out.set(next, Math.max(out.get(next) ?? 0, p));
  }
  return out;
}

describe('DRY: Z-function implementation = brute-force longest common suffix', () => {
  it('500 random histories (small alphabets for long repeats, random breakers, windows, allowed lengths)', () => {
    const rand = rng(1234);
    const pick = <T>(xs: T[]) => xs[Math.floor(rand() * xs.length)]!;
    let nonEmpty = 0;
    for (let c = 0; c < 500; c++) {
      const alphabet = 2 + Math.floor(rand() * 5);
      const n = Math.floor(rand() * 70);
      // Periodic stretches now and then, for long matches.
      const h: number[] = [];
      while (h.length < n) {
        if (rand() < 0.3 && h.length > 4) {
          const k = 1 + Math.floor(rand() * 4);
          const from = h.length - k;
          for (let i = 0; i < k * (1 + Math.floor(rand() * 4)) && h.length < n; i++) h.push(h[from + (i % k)]!);
        } else h.push(Math.floor(rand() * alphabet));
      }
      const breakers = Array.from({ length: Math.floor(rand() * 3) }, () => Math.floor(rand() * alphabet));
      const d: DryParams = {
        multiplier: pick([0.8, 1, 2.5]),
        base: pick([1.75, 2, 1.1]),
        allowedLength: pick([0, 1, 2, 3, 4]),
        penaltyLastN: pick([0, -1, 3, 10, 25, 1000]),
        sequenceBreakers: breakers,
      };
      const want = dryBrute(h, d);
      if (want.size > 0) nonEmpty++;
      expect(sorted(dryPenalties(h, d)), `case ${c}: history [${h}], ${JSON.stringify(d)}`).toEqual(sorted(want));
    }
    expect(nonEmpty, 'many random cases penalise something').toBeGreaterThan(200);
  });
});

describe('loop detection (isLooping)', () => {
  const d = (minPatternSize: number, maxPatternSize: number, minCount: number): LoopDetection => ({ minPatternSize, maxPatternSize, minCount });

  it('a pattern repeated min_count times at the tail', () => {
    expect(isLooping([1, 2, 3, 1, 2, 3], d(1, 3, 2))).toBe(true);
    expect(isLooping([9, 5, 1, 2, 3, 1, 2, 3], d(1, 3, 2))).toBe(true);
    expect(isLooping([1, 2, 3, 1, 2, 3], d(1, 3, 3))).toBe(false);
    expect(isLooping([1, 2, 3, 1, 2, 3, 1, 2, 3], d(1, 3, 3))).toBe(true);
    expect(isLooping([1, 2, 3, 1, 2, 4], d(1, 3, 2))).toBe(false);
    // The repeat must end at the tail.
    expect(isLooping([1, 2, 3, 1, 2, 3, 4], d(1, 3, 2))).toBe(false);
  });

  it('pattern sizes outside [min, max] do not count', () => {
    expect(isLooping([1, 2, 3, 1, 2, 3], d(1, 2, 2))).toBe(false);
    expect(isLooping([1, 2, 3, 1, 2, 3], d(4, 6, 2))).toBe(false);
    expect(isLooping([1, 2, 3, 1, 2, 3], d(3, 3, 2))).toBe(true);
    expect(isLooping([9, 9, 9, 9], d(1, 1, 4))).toBe(true);
    expect(isLooping([9, 9, 9, 9], d(1, 1, 5))).toBe(false);
    // min_pattern_size 0 reads as 1.
    expect(isLooping([7, 7], d(0, 1, 2))).toBe(true);
  });

  it('Gemma 4 defaults (min 1, max 20, count 4): 20-token pattern x4 stops, 21-token does not', () => {
    const pat = (k: number) => Array.from({ length: k }, (_, i) => 100 + i);
    const rep = (k: number, times: number) => Array.from({ length: times }, () => pat(k)).flat();
    expect(isLooping([1, 2, ...rep(20, 4)], d(1, 20, 4))).toBe(true);
    expect(isLooping([1, 2, ...rep(21, 4)], d(1, 20, 4))).toBe(false);
    expect(isLooping(rep(20, 3), d(1, 20, 4))).toBe(false);
  });

  it('min_count < 2 or max_pattern_size <= 0 disables detection; short histories never loop', () => {
    const loop = [7, 7, 7, 7, 7, 7];
    expect(isLooping(loop, d(1, 3, 1))).toBe(false);
    expect(isLooping(loop, d(1, 3, 0))).toBe(false);
    expect(isLooping(loop, d(1, 3, -1))).toBe(false);
    expect(isLooping(loop, d(1, 0, 2))).toBe(false);
    expect(isLooping([], d(1, 3, 2))).toBe(false);
    expect(isLooping([7], d(1, 3, 2))).toBe(false);
  });

  it('matches a brute-force definition on random histories', () => {
    const rand = rng(99);
    const brute = (t: number[], x: LoopDetection) => {
      if (x.minCount < 2) return false;
      for (let k = Math.max(1, x.minPatternSize); k <= x.maxPatternSize; k++) {
        if (k * x.minCount > t.length) continue;
        const last = t.slice(t.length - k);
        let ok = true;
        for (let r = 1; r < x.minCount && ok; r++) ok = t.slice(t.length - (r + 1) * k, t.length - r * k).every((v, i) => v === last[i]);
        if (ok) return true;
      }
      return false;
    };
    let loops = 0;
    for (let c = 0; c < 400; c++) {
      const t: number[] = Array.from({ length: Math.floor(rand() * 12) }, () => Math.floor(rand() * 3));
      const k = 1 + Math.floor(rand() * 4);
      for (let i = Math.floor(rand() * 10); i > 0 && t.length >= k; i--) t.push(t[t.length - k]!);
      const x = d(Math.floor(rand() * 3), Math.floor(rand() * 6), Math.floor(rand() * 5));
      const want = brute(t, x);
      if (want) loops++;
      expect(isLooping(t, x), `[${t}] ${JSON.stringify(x)}`).toBe(want);
    }
    expect(loops).toBeGreaterThan(50);
  });
});

describe('Rng (xoshiro128** seeded through a splitmix-style mixer)', () => {
  it('is deterministic per seed, and seeds give different streams', () => {
    const draw = (seed: number, n = 1000) => { const r = new Rng(seed); return Array.from({ length: n }, () => r.next()); };
    expect(draw(42)).toEqual(draw(42));
    expect(draw(0)).toEqual(draw(0));
    expect(draw(42)).not.toEqual(draw(43));
    // Seeds up to 2^53: the high word counts too.
    expect(draw(5 + 2 ** 32)).toEqual(draw(5 + 2 ** 32));
    expect(draw(5 + 2 ** 32)).not.toEqual(draw(5));
    const firsts = new Set(Array.from({ length: 1000 }, (_, s) => new Rng(s).next()));
    expect(firsts.size, 'first draws of 1,000 consecutive seeds').toBeGreaterThan(990);
  });

  it('values in [0, 1), multiples of 2^-24 (exact in f32)', () => {
    const r = new Rng(7);
    for (let i = 0; i < 10_000; i++) {
      const u = r.next();
      if (!(u >= 0 && u < 1 && Number.isInteger(u * 2 ** 24) && Math.fround(u) === u)) expect.fail(`draw ${i}: ${u}`);
    }
  });

  it('the generator is xoshiro128**: known outputs from state [1, 2, 3, 4]', () => {
    // Reference xoshiro128** (Blackman & Vigna), top 24 bits of each output.
    const rotl = (x: number, k: number) => ((x << k) | (x >>> (32 - k))) >>> 0;
    const s = Uint32Array.of(1, 2, 3, 4);
    const next = () => {
      const result = Math.imul(rotl(Math.imul(s[1]!, 5) >>> 0, 7), 9) >>> 0;
      const t = (s[1]! << 9) >>> 0;
      s[2]! ^= s[0]!; s[3]! ^= s[1]!; s[1]! ^= s[2]!; s[0]! ^= s[3]!; s[2]! ^= t; s[3] = rotl(s[3]!, 11);
      return result;
    };
    const raw = Array.from({ length: 3 }, next);
    expect(raw, 'published first outputs of xoshiro128** from [1, 2, 3, 4]').toEqual([11520, 0, 5927040]);
    const r = new Rng(0);
    const state = r as unknown as { s?: Uint32Array };
    if (!(state.s instanceof Uint32Array)) expect.fail('Rng keeps its state in a Uint32Array field `s` (test pokes it)');
    state.s = Uint32Array.of(1, 2, 3, 4);
    s.set([1, 2, 3, 4]);
    for (let i = 0; i < 200; i++) expect(r.next(), `output ${i}`).toBe((next() >>> 8) / 2 ** 24);
  });

  it('uniform: 200,000 draws in 64 bins, and consecutive pairs in 16 x 16 bins (chi-square, alpha 0.001)', () => {
    const r = new Rng(2024);
    const N = 200_000;
    const bins = new Array<number>(64).fill(0);
    const pairs = new Array<number>(256).fill(0);
    let prev = r.next();
    for (let i = 0; i < N; i++) {
      const u = r.next();
      bins[Math.floor(u * 64)]!++;
      pairs[Math.floor(prev * 16) * 16 + Math.floor(u * 16)]!++;
      prev = u;
    }
    const one = chiSquare(bins, new Array<number>(64).fill(1 / 64), 0.001);
    expect(one.stat, `chi2 ${one.stat.toFixed(1)}, df ${one.df}, p ${one.pValue.toExponential(2)}`).toBeLessThan(one.critical);
    const two = chiSquare(pairs, new Array<number>(256).fill(1 / 256), 0.001);
    expect(two.stat, `pairs: chi2 ${two.stat.toFixed(1)}, df ${two.df}, p ${two.pValue.toExponential(2)}`).toBeLessThan(two.critical);
  });

  it('first draws across 20,000 consecutive seeds are uniform (seeds decorrelated)', () => {
    const bins = new Array<number>(32).fill(0);
    for (let s = 0; s < 20_000; s++) bins[Math.floor(new Rng(s).next() * 32)]!++;
    const fit = chiSquare(bins, new Array<number>(32).fill(1 / 32), 0.001);
    expect(fit.stat, `chi2 ${fit.stat.toFixed(1)}, df ${fit.df}, p ${fit.pValue.toExponential(2)}`).toBeLessThan(fit.critical);
  });
});
