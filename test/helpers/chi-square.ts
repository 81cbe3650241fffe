// Pearson's chi-square goodness-of-fit test for the sampler's statistical checks: the
// statistic over bins pooled so that every expected count is at least 5, its p-value from
// the regularized upper incomplete gamma function, and the critical value for a
// significance level by bisection on that p-value.

/** ln Γ(x) for x > 0 (Lanczos, g = 7, n = 9: ~1e-15 relative). */
export function lnGamma(x: number): number {
  const c = [
    0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313, -176.61502916214059,
    12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7,
  ];
  if (x < 0.5) return Math.log(Math.PI / Math.sin(Math.PI * x)) - lnGamma(1 - x);
  x -= 1;
  let a = c[0]!;
  const t = x + 7.5;
  for (let i = 1; i < 9; i++) a += c[i]! / (x + i);
  return 0.5 * Math.log(2 * Math.PI) + (x + 0.5) * Math.log(t) - t + Math.log(a);
}

/** Q(a, x) = Γ(a, x) / Γ(a): series for x < a + 1, Lentz's continued fraction otherwise. */
export function gammaQ(a: number, x: number): number {
  if (x <= 0) return 1;
  const lead = -x + a * Math.log(x) - lnGamma(a);
  if (x < a + 1) {
    let sum = 1 / a;
    let term = sum;
    for (let n = 1; n < 1000; n++) {
      term *= x / (a + n);
      sum += term;
      if (Math.abs(term) < Math.abs(sum) * 1e-16) break;
    }
    return 1 - sum * Math.exp(lead);
  }
  const tiny = 1e-300;
  let b = x + 1 - a;
  let c = 1 / tiny;
  let d = 1 / b;
  let h = d;
  for (let i = 1; i < 1000; i++) {
    const an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (Math.abs(d) < tiny) d = tiny;
    c = b + an / c;
    if (Math.abs(c) < tiny) c = tiny;
    d = 1 / d;
    const del = d * c;
    h *= del;
    if (Math.abs(del - 1) < 1e-16) break;
  }
  return Math.exp(lead) * h;
}

/** P(X >= x) for X ~ chi-square with df degrees of freedom. */
export function chiSquareSf(x: number, df: number): number {
  return gammaQ(df / 2, x / 2);
}

/** The x with P(X >= x) = alpha for df degrees of freedom. */
export function chiSquareCritical(alpha: number, df: number): number {
  let lo = 0;
  let hi = 10 * df + 200;
  for (let i = 0; i < 200; i++) {
    const mid = (lo + hi) / 2;
    if (chiSquareSf(mid, df) > alpha) lo = mid;
    else hi = mid;
  }
  return (lo + hi) / 2;
}

export interface ChiSquare {
  stat: number;
  df: number;
  pValue: number;
  critical: number;
  /** Bins after pooling, as [label, observed, expected]. */
  bins: [string, number, number][];
}

/**
 * Goodness of fit of `counts` to probabilities `p` (bins with p = 0 are left out: the
 * caller checks separately that they were never drawn). Bins whose expected count is
 * below 5 are pooled, smallest first, until every bin expects at least 5.
 */
export function chiSquare(counts: ArrayLike<number>, p: ArrayLike<number>, alpha: number): ChiSquare {
  let n = 0;
  for (let i = 0; i < counts.length; i++) n += counts[i]!;
  let bins: [string, number, number][] = [];
  for (let i = 0; i < p.length; i++) if (p[i]! > 0) bins.push([`${i}`, counts[i]!, n * p[i]!]);
  bins.sort((a, b) => a[2] - b[2]);
  while (bins.length > 1 && bins[0]![2] < 5) {
    const [a, b, ...rest] = bins;
    bins = [[`${a![0]}+${b![0]}`, a![1] + b![1], a![2] + b![2]] as [string, number, number], ...rest].sort((x, y) => x[2] - y[2]);
  }
  const stat = bins.reduce((s, [, o, e]) => s + ((o - e) * (o - e)) / e, 0);
  const df = bins.length - 1;
  return { stat, df, pValue: df > 0 ? chiSquareSf(stat, df) : 1, critical: df > 0 ? chiSquareCritical(alpha, df) : Infinity, bins };
}
