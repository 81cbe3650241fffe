// JSON numbers within bounds, as byte paths: digit-string range automata, exact for any
// finite decimal bound (minimum/maximum and their exclusive forms). Numbers are spelled
// without exponents or leading zeros, with at most INT_DIGITS integer digits and
// FRAC_DIGITS fraction digits unless a bound needs more, so generation always ends.
import { SchemaError } from './errors.js';
import type { RuleBuilder } from './nfa.js';

export const INT_DIGITS = 16;
export const FRAC_DIGITS = 16;
const MAX_DIGITS = 64;

/** |x| = int.frac, frac without trailing zeros; zero is never negative. */
export interface Dec {
  neg: boolean;
  int: bigint;
  frac: string;
}

export function toDec(value: number): Dec {
  if (!Number.isFinite(value)) throw new SchemaError('numeric bounds must be finite numbers', 'minimum');
  const s = Math.abs(value).toString();
  const [mant, exp] = s.split('e') as [string, string | undefined];
  const e = exp ? Number(exp) : 0;
  const [ip, fp = ''] = mant.split('.') as [string, string | undefined];
  const digits = ip + fp;
  const point = ip.length + e;
  let int: string;
  let frac: string;
  if (point <= 0) {
    int = '0';
    frac = '0'.repeat(-point) + digits;
  } else if (point >= digits.length) {
    int = digits + '0'.repeat(point - digits.length);
    frac = '';
  } else {
    int = digits.slice(0, point);
    frac = digits.slice(point);
  }
  frac = frac.replace(/0+$/, '');
  const i = BigInt(int);
  return { neg: value < 0 && (i !== 0n || frac !== ''), int: i, frac };
}

const pow10 = (n: number): bigint => 10n ** BigInt(n);
const digitsOf = (x: bigint): number => x.toString().length;

function ceilDec(d: Dec): bigint {
  if (d.neg) return -d.int;
  return d.frac ? d.int + 1n : d.int;
}

function floorDec(d: Dec): bigint {
  if (d.neg) return d.frac ? -(d.int + 1n) : -d.int;
  return d.int;
}

/** -1, 0, 1 */
function cmpDec(a: Dec, b: Dec): number {
  const sa = a.neg ? -1 : 1;
  const sb = b.neg ? -1 : 1;
  if (sa !== sb) return sa < sb ? -1 : 1;
  let mag: number;
  if (a.int !== b.int) mag = a.int < b.int ? -1 : 1;
  else {
    const n = Math.max(a.frac.length, b.frac.length);
    const fa = a.frac.padEnd(n, '0');
    const fb = b.frac.padEnd(n, '0');
    mag = fa === fb ? 0 : fa < fb ? -1 : 1;
  }
  return sa * mag;
}

export interface Bound {
  value: Dec;
  exclusive: boolean;
}

const bytesOf = (s: string): number[] => [...s].map((c) => c.charCodeAt(0));

/** Spells the decimal string of `n` (non-negative). */
function literal(b: RuleBuilder, from: number, to: number, n: bigint): void {
  b.literal(from, Uint8Array.from(bytesOf(n.toString())), false, to);
}

function anyDigits(b: RuleBuilder, from: number, to: number, count: number): void {
  let at = from;
  for (let k = 0; k < count; k++) {
    const next = k === count - 1 ? to : b.node();
    b.byte(at, 0x30, 0x39, next);
    at = next;
  }
  if (count === 0) b.eps(from, to);
}

/** Digit strings of one length between lo and hi (lexicographic = numeric). */
function sameLength(b: RuleBuilder, from: number, to: number, lo: string, hi: string): void {
  if (lo.length === 0) {
    b.eps(from, to);
    return;
  }
  const rest = lo.length - 1;
  const l0 = lo.charCodeAt(0);
  const h0 = hi.charCodeAt(0);
  if (/^0*$/.test(lo.slice(1)) && /^9*$/.test(hi.slice(1))) {
    const next = rest === 0 ? to : b.node();
    b.byte(from, l0, h0, next);
    if (rest > 0) anyDigits(b, next, to, rest);
    return;
  }
  if (l0 === h0) {
    const next = b.node();
    b.byte(from, l0, l0, next);
    sameLength(b, next, to, lo.slice(1), hi.slice(1));
    return;
  }
  const low = b.node();
  b.byte(from, l0, l0, low);
  sameLength(b, low, to, lo.slice(1), '9'.repeat(rest));
  if (l0 + 1 <= h0 - 1) {
    const mid = b.node();
    b.byte(from, l0 + 1, h0 - 1, mid);
    anyDigits(b, mid, to, rest);
  }
  const high = b.node();
  b.byte(from, h0, h0, high);
  sameLength(b, high, to, '0'.repeat(rest), hi.slice(1));
}

/** Non-negative integers in [lo, hi], no leading zeros. */
function uintRange(b: RuleBuilder, from: number, to: number, lo: bigint, hi: bigint): void {
  if (lo > hi) return;
  const la = digitsOf(lo);
  const lb = digitsOf(hi);
  for (let len = la; len <= lb; len++) {
    const low = len === la ? lo : pow10(len - 1);
    const high = len === lb ? hi : pow10(len) - 1n;
    sameLength(b, from, to, low.toString(), high.toString());
  }
}

/** Integers in [lo, hi]. */
export function integerRange(builder: RuleBuilder, from: number, to: number, lo: bigint, hi: bigint): void {
  if (hi >= 0n) uintRange(builder, from, to, lo > 0n ? lo : 0n, hi);
  if (lo < 0n) {
    const minus = builder.node();
    builder.byte(from, 0x2d, 0x2d, minus);
    uintRange(builder, minus, to, hi < -1n ? -hi : 1n, -lo);
  }
}

/** The integer bounds of an integer schema, unbounded sides capped at INT_DIGITS digits. */
export function integerBounds(min: Bound | undefined, max: Bound | undefined): [bigint, bigint] {
  const cap = pow10(INT_DIGITS) - 1n;
  let lo = min ? (min.exclusive ? floorDec(min.value) + 1n : ceilDec(min.value)) : -cap;
  let hi = max ? (max.exclusive ? ceilDec(max.value) - 1n : floorDec(max.value)) : cap;
  if (!min && hi < lo + 1n) lo = hi - cap;
  if (!max && hi < lo + 1n) hi = lo + cap;
  if (lo > hi) throw new SchemaError('no integer satisfies minimum/maximum', 'minimum');
  if (digitsOf(lo < 0n ? -lo : lo) > MAX_DIGITS || digitsOf(hi < 0n ? -hi : hi) > MAX_DIGITS) {
    throw new SchemaError(`numeric bounds beyond ${MAX_DIGITS} digits are not supported`, 'minimum');
  }
  return [lo, hi];
}

interface FracSide {
  digits: string;
  exclusive: boolean;
}

/**
 * Optional fraction after an integer part, so that the number lies within the fraction
 * bounds: `low` when the integer part equals the lower bound's, `high` likewise.
 */
function fraction(b: RuleBuilder, from: number, to: number, low: FracSide | null, high: FracSide | null): void {
  // No fraction: the value is the integer itself.
  const bareLow = low === null || (low.digits === '' && !low.exclusive);
  const bareHigh = high === null || !(high.exclusive && high.digits === '');
  if (bareLow && bareHigh) b.eps(from, to);
  const cap = Math.max(FRAC_DIGITS, low?.digits.length ?? 0, high?.digits.length ?? 0);
  const dot = b.node();
  b.byte(from, 0x2e, 0x2e, dot);
  // States after k digits: tight against the low / high bound's digits.
  const nodes = new Map<string, number>();
  const state = (k: number, tl: boolean, th: boolean): number => {
    const key = `${k},${tl},${th}`;
    let n = nodes.get(key);
    if (n !== undefined) return n;
    n = b.node();
    nodes.set(key, n);
    if (k > 0) {
      const okLow = !tl || (k >= low!.digits.length && !low!.exclusive);
      const okHigh = !th || k < high!.digits.length || !high!.exclusive;
      if (okLow && okHigh) b.eps(n, to);
    }
    if (k === cap) return n;
    if (!tl && !th) {
      // Free: any further digits.
      b.byte(n, 0x30, 0x39, state(k + 1, false, false));
      return n;
    }
    for (let d = 0; d <= 9; d++) {
      let ntl = tl;
      let nth = th;
      if (tl) {
        const a = Number(low!.digits[k] ?? '0');
        if (d < a) continue;
        ntl = d === a;
      }
      if (th) {
        const h = Number(high!.digits[k] ?? '0');
        if (d > h) continue;
        nth = d === h;
      }
      b.byte(n, 0x30 + d, 0x30 + d, state(k + 1, ntl, nth));
    }
    return n;
  };
  b.eps(dot, state(0, low !== null, high !== null));
}

/** Non-negative decimals in [lo, hi] (hi undefined: capped digits). */
function udecimal(b: RuleBuilder, from: number, to: number, lo: Bound, hi: Bound | undefined): void {
  const ai = lo.value.int;
  const bi = hi ? hi.value.int : pow10(Math.max(INT_DIGITS, digitsOf(ai))) - 1n;
  const lowSide: FracSide = { digits: lo.value.frac, exclusive: lo.exclusive };
  const highSide: FracSide | null = hi ? { digits: hi.value.frac, exclusive: hi.exclusive } : null;
  const withInt = (n: bigint, low: FracSide | null, high: FracSide | null) => {
    const mid = b.node();
    literal(b, from, mid, n);
    fraction(b, mid, to, low, high);
  };
  if (ai === bi) {
    withInt(ai, lowSide, highSide);
    return;
  }
  withInt(ai, lowSide, null);
  if (ai + 1n <= bi - 1n) {
    const mid = b.node();
    uintRange(b, from, mid, ai + 1n, bi - 1n);
    fraction(b, mid, to, null, null);
  }
  withInt(bi, null, highSide);
}

const ZERO: Dec = { neg: false, int: 0n, frac: '' };

/** Numbers (JSON "number") within the bounds. */
export function numberRange(builder: RuleBuilder, from: number, to: number, min: Bound | undefined, max: Bound | undefined): void {
  for (const bound of [min, max]) {
    if (bound && (digitsOf(bound.value.int) > MAX_DIGITS || bound.value.frac.length > MAX_DIGITS)) {
      throw new SchemaError(`numeric bounds beyond ${MAX_DIGITS} digits are not supported`, 'minimum');
    }
  }
  if (min && max) {
    const c = cmpDec(min.value, max.value);
    if (c > 0 || (c === 0 && (min.exclusive || max.exclusive))) throw new SchemaError('no number satisfies minimum/maximum', 'minimum');
  }
  // x >= 0, spelled without a sign.
  const positive = !max || !max.value.neg && (cmpDec(max.value, ZERO) > 0 || !max.exclusive);
  if (positive) {
    const lo: Bound = min && !min.value.neg ? min : { value: ZERO, exclusive: false };
    udecimal(builder, from, to, lo, max);
  }
  // x < 0: "-" and y = -x > 0.
  const negative = !min || min.value.neg;
  if (negative) {
    const minus = builder.node();
    builder.byte(from, 0x2d, 0x2d, minus);
    const flip = (d: Dec): Dec => ({ ...d, neg: false });
    const lo: Bound = max && max.value.neg ? { value: flip(max.value), exclusive: max.exclusive } : { value: ZERO, exclusive: true };
    const hi: Bound | undefined = min ? { value: flip(min.value), exclusive: min.exclusive } : undefined;
    udecimal(builder, minus, to, lo, hi);
  }
}
