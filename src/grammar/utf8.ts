// Sets of characters as byte paths: code point ranges -> UTF-8 byte-range sequences, and
// the JSON-string spelling of a character set (raw UTF-8, or the escape JSON needs).
import { OP_INC, type RuleBuilder } from './nfa.js';

/** Inclusive code point range. */
export type CpRange = readonly [number, number];

export const MAX_CP = 0x10ffff;

/** Sorted, merged, surrogate-free. */
export function normalize(ranges: readonly CpRange[]): CpRange[] {
  const sorted = ranges
    .flatMap(([lo, hi]): CpRange[] => {
      // Surrogates cannot be spelled in UTF-8 (a lone \uD800 escape is left out too).
      if (hi < 0xd800 || lo > 0xdfff) return [[lo, hi]];
      const out: CpRange[] = [];
      if (lo < 0xd800) out.push([lo, 0xd7ff]);
      if (hi > 0xdfff) out.push([0xe000, hi]);
      return out;
    })
    .filter(([lo, hi]) => lo <= hi)
    .sort((a, b) => a[0] - b[0]);
  const out: Array<[number, number]> = [];
  for (const [lo, hi] of sorted) {
    const last = out[out.length - 1];
    if (last && lo <= last[1] + 1) last[1] = Math.max(last[1], hi);
    else out.push([lo, hi]);
  }
  return out;
}

export function complement(ranges: readonly CpRange[]): CpRange[] {
  const out: CpRange[] = [];
  let next = 0;
  for (const [lo, hi] of normalize(ranges)) {
    if (lo > next) out.push([next, lo - 1]);
    next = hi + 1;
  }
  if (next <= MAX_CP) out.push([next, MAX_CP]);
  return normalize(out);
}

export function intersect(a: readonly CpRange[], b: readonly CpRange[]): CpRange[] {
  const out: CpRange[] = [];
  for (const [alo, ahi] of a) for (const [blo, bhi] of b) if (Math.max(alo, blo) <= Math.min(ahi, bhi)) out.push([Math.max(alo, blo), Math.min(ahi, bhi)]);
  return normalize(out);
}

function encode(cp: number): number[] {
  if (cp < 0x80) return [cp];
  if (cp < 0x800) return [0xc0 | (cp >> 6), 0x80 | (cp & 0x3f)];
  if (cp < 0x10000) return [0xe0 | (cp >> 12), 0x80 | ((cp >> 6) & 0x3f), 0x80 | (cp & 0x3f)];
  return [0xf0 | (cp >> 18), 0x80 | ((cp >> 12) & 0x3f), 0x80 | ((cp >> 6) & 0x3f), 0x80 | (cp & 0x3f)];
}

/** Byte-range sequences whose union is exactly the UTF-8 encodings of [lo, hi] (no surrogates). */
export function utf8Sequences(lo: number, hi: number): Array<Array<[number, number]>> {
  const out: Array<Array<[number, number]>> = [];
  const work: Array<[number, number]> = [[lo, hi]];
  while (work.length) {
    const [a, b] = work.pop()!;
    // Split at encoding-length boundaries.
    const bounds = [0x7f, 0x7ff, 0xffff];
    const split = bounds.find((m) => a <= m && b > m);
    if (split !== undefined) {
      work.push([a, split], [split + 1, b]);
      continue;
    }
    if (b <= 0x7f) {
      out.push([[a, b]]);
      continue;
    }
    // Split until every continuation position spans a full or aligned range.
    let done = true;
    for (let i = 1; i < 4; i++) {
      const m = (1 << (6 * i)) - 1;
      if ((a & ~m) !== (b & ~m)) {
        if ((a & m) !== 0) {
          work.push([a, a | m], [(a | m) + 1, b]);
          done = false;
          break;
        }
        if ((b & m) !== m) {
          work.push([a, (b & ~m) - 1], [b & ~m, b]);
          done = false;
          break;
        }
      }
    }
    if (!done) continue;
    const ea = encode(a);
    const eb = encode(b);
    out.push(ea.map((x, i) => [x, eb[i]!]));
  }
  return out;
}

const SHORT_ESCAPES = new Map<number, string>([
  [0x08, 'b'],
  [0x09, 't'],
  [0x0a, 'n'],
  [0x0c, 'f'],
  [0x0d, 'r'],
  [0x22, '"'],
  [0x5c, '\\'],
]);

/** Raw in a JSON string: everything but controls, '"' and '\'. */
const RAW: CpRange[] = [
  [0x20, 0x21],
  [0x23, 0x5b],
  [0x5d, MAX_CP],
];

/**
 * Edges from `from` to `to` spelling one character of `set` inside a JSON string, the
 * first byte counted (OP_INC). Each character has one spelling: raw UTF-8 when JSON allows,
 * else its short escape, else \u00XX with lowercase hex.
 */
export function jsonCharEdges(builder: RuleBuilder, from: number, to: number, set: readonly CpRange[]): void {
  const ranges = normalize(set);
  for (const [lo, hi] of intersect(ranges, RAW)) {
    for (const seq of utf8Sequences(lo, hi)) {
      let at = from;
      seq.forEach(([blo, bhi], i) => {
        const next = i === seq.length - 1 ? to : builder.node();
        builder.byte(at, blo, bhi, next, i === 0 ? OP_INC : 0);
        at = next;
      });
    }
  }
  const hex: number[] = [];
  // One backslash edge for every escape, so the escapes stay deterministic.
  let esc: number | undefined;
  const escape = (): number => {
    if (esc === undefined) {
      esc = builder.node();
      builder.byte(from, 0x5c, 0x5c, esc, OP_INC);
    }
    return esc;
  };
  for (const [lo, hi] of intersect(ranges, [[0, 0x1f], [0x22, 0x22], [0x5c, 0x5c]])) {
    for (let cp = lo; cp <= hi; cp++) {
      const short = SHORT_ESCAPES.get(cp);
      if (short === undefined) {
        hex.push(cp);
        continue;
      }
      builder.byte(escape(), short.charCodeAt(0), short.charCodeAt(0), to);
    }
  }
  if (hex.length === 0) return;
  // \u00XX, lowercase hex, sharing the "\u00" prefix.
  const u00 = builder.literal(escape(), new TextEncoder().encode('u00'));
  for (const high of [0, 1]) {
    const lows = hex.filter((cp) => cp >> 4 === high).map((cp) => (cp & 15).toString(16).charCodeAt(0));
    if (lows.length === 0) continue;
    const digit = builder.node();
    builder.byte(u00, 0x30 + high, 0x30 + high, digit);
    for (const c of lows) builder.byte(digit, c, c, to);
  }
}
