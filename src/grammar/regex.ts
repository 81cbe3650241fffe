// JSON Schema `pattern`: the practical subset of ECMAScript regexes (with the "u" flag, as
// ajv compiles them) that is a regular language: literals, ".", classes and their escapes
// (\d \w \s and negations), groups (capturing, non-capturing, named), alternation,
// quantifiers (* + ? {n} {n,} {n,m}, lazy forms alike), and ^/$ at the ends of the top-level
// alternatives. Lookaround, backreferences, word boundaries and \p{...} are refused. The
// match is unanchored unless ^/$ say otherwise, as JSON Schema specifies.
import { SchemaError } from './errors.js';
import type { RuleBuilder } from './nfa.js';
import { complement, jsonCharEdges, MAX_CP, normalize, type CpRange } from './utf8.js';

export type Re =
  | { t: 'set'; set: CpRange[] }
  | { t: 'seq'; items: Re[] }
  | { t: 'alt'; alts: Re[] }
  | { t: 'rep'; item: Re; min: number; max: number }
  | { t: 'bol' }
  | { t: 'eol' };

const MAX_REPEAT = 1000;

const DIGIT: CpRange[] = [[0x30, 0x39]];
const WORD: CpRange[] = [[0x30, 0x39], [0x41, 0x5a], [0x5f, 0x5f], [0x61, 0x7a]];
const SPACE: CpRange[] = normalize([
  [0x09, 0x0d], [0x20, 0x20], [0xa0, 0xa0], [0x1680, 0x1680], [0x2000, 0x200a],
  [0x2028, 0x2029], [0x202f, 0x202f], [0x205f, 0x205f], [0x3000, 0x3000], [0xfeff, 0xfeff],
]);
const LINE_TERMINATORS: CpRange[] = [[0x0a, 0x0a], [0x0d, 0x0d], [0x2028, 0x2029]];
export const ANY_CHAR: CpRange[] = normalize([[0, MAX_CP]]);
const DOT = complement(LINE_TERMINATORS);

const fail = (why: string): SchemaError => new SchemaError(`pattern: ${why}`, 'pattern');

class Parser {
  private readonly cps: number[];
  private i = 0;

  constructor(src: string) {
    this.cps = [...src].map((c) => c.codePointAt(0)!);
  }

  parse(): Re {
    const re = this.alternation();
    if (this.i < this.cps.length) throw fail(`unexpected ${this.describe()}`);
    return re;
  }

  private peek(k = 0): number | undefined {
    return this.cps[this.i + k];
  }

  private eat(c: string): boolean {
    if (this.peek() === c.codePointAt(0)) {
      this.i++;
      return true;
    }
    return false;
  }

  private describe(): string {
    const c = this.peek();
    return c === undefined ? 'end of pattern' : `"${String.fromCodePoint(c)}"`;
  }

  private alternation(): Re {
    const alts = [this.sequence()];
    while (this.eat('|')) alts.push(this.sequence());
    return alts.length === 1 ? alts[0]! : { t: 'alt', alts };
  }

  private sequence(): Re {
    const items: Re[] = [];
    for (;;) {
      const c = this.peek();
      if (c === undefined || c === 0x7c /* | */ || c === 0x29 /* ) */) break;
      const atom = this.atom();
      items.push(this.quantified(atom));
    }
    return items.length === 1 ? items[0]! : { t: 'seq', items };
  }

  private quantified(atom: Re): Re {
    let q: { min: number; max: number } | undefined;
    if (this.eat('*')) q = { min: 0, max: Infinity };
    else if (this.eat('+')) q = { min: 1, max: Infinity };
    else if (this.eat('?')) q = { min: 0, max: 1 };
    else if (this.peek() === 0x7b /* { */) q = this.braces();
    if (!q) return atom;
    if (atom.t === 'bol' || atom.t === 'eol') throw fail('a quantified anchor is not supported');
    this.eat('?'); // lazy: same language
    if (this.peek() === 0x2a || this.peek() === 0x2b || this.peek() === 0x3f || this.peek() === 0x7b) throw fail('nothing to repeat');
    return { t: 'rep', item: atom, min: q.min, max: q.max };
  }

  private braces(): { min: number; max: number } {
    const start = this.i;
    this.i++;
    const num = (): number | undefined => {
      let s = '';
      while (this.peek() !== undefined && this.peek()! >= 0x30 && this.peek()! <= 0x39) s += String.fromCodePoint(this.cps[this.i++]!);
      return s === '' ? undefined : Number(s);
    };
    const min = num();
    let max = min;
    if (min !== undefined && this.eat(',')) max = num() ?? Infinity;
    if (min === undefined || !this.eat('}')) {
      this.i = start;
      throw fail('a lone "{" is not a valid quantifier');
    }
    if (max! < min) throw fail('a {n,m} quantifier with m < n');
    if (min > MAX_REPEAT || (max !== Infinity && max! > MAX_REPEAT)) throw fail(`repetition counts above ${MAX_REPEAT} are not supported`);
    return { min, max: max! };
  }

  private atom(): Re {
    const c = this.cps[this.i++]!;
    switch (c) {
      case 0x5e: // ^
        return { t: 'bol' };
      case 0x24: // $
        return { t: 'eol' };
      case 0x2e: // .
        return { t: 'set', set: DOT };
      case 0x28: // (
        return this.group();
      case 0x5b: // [
        return { t: 'set', set: this.charClass() };
      case 0x5c: // backslash
        return { t: 'set', set: this.escape(false) };
      case 0x2a:
      case 0x2b:
      case 0x3f:
        throw fail('nothing to repeat');
      case 0x7b:
      case 0x7d:
      case 0x5d:
        throw fail(`a lone "${String.fromCodePoint(c)}" (escape it)`);
      default:
        return { t: 'set', set: [[c, c]] };
    }
  }

  private group(): Re {
    if (this.eat('?')) {
      if (this.eat(':')) {
        // non-capturing
      } else if (this.peek() === 0x3c /* < */ && this.peek(1) !== 0x3d && this.peek(1) !== 0x21) {
        this.i++;
        while (this.peek() !== undefined && this.peek() !== 0x3e) this.i++;
        if (!this.eat('>')) throw fail('an unterminated group name');
      } else {
        throw fail('lookahead and lookbehind are not supported');
      }
    }
    const inner = this.alternation();
    if (!this.eat(')')) throw fail('an unterminated group');
    return inner;
  }

  private charClass(): CpRange[] {
    const negate = this.eat('^');
    const ranges: CpRange[] = [];
    for (;;) {
      const c = this.peek();
      if (c === undefined) throw fail('an unterminated character class');
      if (c === 0x5d) {
        this.i++;
        break;
      }
      const lo = this.classAtom();
      if (this.peek() === 0x2d /* - */ && this.peek(1) !== undefined && this.peek(1) !== 0x5d) {
        this.i++;
        const hi = this.classAtom();
        if (lo.length !== 1 || hi.length !== 1 || lo[0]![0] !== lo[0]![1] || hi[0]![0] !== hi[0]![1]) {
          throw fail('a class range with a class escape as an end');
        }
        if (hi[0]![0] < lo[0]![0]) throw fail('a class range out of order');
        ranges.push([lo[0]![0], hi[0]![0]]);
      } else {
        ranges.push(...lo);
      }
    }
    return negate ? complement(ranges) : normalize(ranges);
  }

  private classAtom(): CpRange[] {
    const c = this.cps[this.i++]!;
    if (c === 0x5c) return this.escape(true);
    return [[c, c]];
  }

  private hex(digits: number): number {
    let v = 0;
    for (let k = 0; k < digits; k++) {
      const c = this.peek();
      const d = c === undefined ? NaN : parseInt(String.fromCodePoint(c), 16);
      if (Number.isNaN(d)) throw fail('a malformed hex escape');
      v = v * 16 + d;
      this.i++;
    }
    return v;
  }

  private escape(inClass: boolean): CpRange[] {
    const c = this.cps[this.i++];
    if (c === undefined) throw fail('a trailing backslash');
    const ch = String.fromCodePoint(c);
    const one = (cp: number): CpRange[] => [[cp, cp]];
    switch (ch) {
      case 'd':
        return DIGIT;
      case 'D':
        return complement(DIGIT);
      case 'w':
        return WORD;
      case 'W':
        return complement(WORD);
      case 's':
        return SPACE;
      case 'S':
        return complement(SPACE);
      case 'n':
        return one(0x0a);
      case 'r':
        return one(0x0d);
      case 't':
        return one(0x09);
      case 'v':
        return one(0x0b);
      case 'f':
        return one(0x0c);
      case '0':
        if (this.peek() !== undefined && this.peek()! >= 0x30 && this.peek()! <= 0x39) throw fail('octal escapes are not supported');
        return one(0);
      case 'x':
        return one(this.hex(2));
      case 'u': {
        if (this.eat('{')) {
          let v = 0;
          let n = 0;
          while (this.peek() !== undefined && this.peek() !== 0x7d) {
            v = v * 16 + this.hex(1);
            n++;
          }
          if (!this.eat('}') || n === 0 || v > MAX_CP) throw fail('a malformed \\u{...} escape');
          return one(v);
        }
        const v = this.hex(4);
        // A surrogate pair written as two escapes is one character.
        if (v >= 0xd800 && v <= 0xdbff && this.peek() === 0x5c && this.peek(1) === 0x75) {
          const save = this.i;
          this.i += 2;
          try {
            const lo = this.hex(4);
            if (lo >= 0xdc00 && lo <= 0xdfff) return one(0x10000 + ((v - 0xd800) << 10) + (lo - 0xdc00));
          } catch {
            // not a pair
          }
          this.i = save;
        }
        return one(v);
      }
      case 'c': {
        const l = this.peek();
        if (l !== undefined && ((l >= 0x41 && l <= 0x5a) || (l >= 0x61 && l <= 0x7a))) {
          this.i++;
          return one(l % 32);
        }
        throw fail('a malformed \\c escape');
      }
      case 'b':
        if (inClass) return one(0x08);
        throw fail('word boundaries (\\b) are not supported');
      case '-':
        if (inClass) return one(0x2d);
        throw fail('"\\-" outside a class');
      default:
        if ('^$\\.*+?()[]{}|/'.includes(ch)) return one(c);
        if (ch === 'B') throw fail('word boundaries (\\B) are not supported');
        if (ch === 'p' || ch === 'P') throw fail('Unicode property escapes (\\p) are not supported');
        if (ch === 'k' || (c >= 0x31 && c <= 0x39)) throw fail('backreferences are not supported');
        throw fail(`the escape "\\${ch}" is not supported`);
    }
  }
}

export function parseRegex(src: string): Re {
  return new Parser(src).parse();
}

/** The top-level alternatives with their anchors resolved: unanchored ends match anything. */
function anchored(re: Re): Re {
  const alts = re.t === 'alt' ? re.alts : [re];
  const any: Re = { t: 'rep', item: { t: 'set', set: ANY_CHAR }, min: 0, max: Infinity };
  return {
    t: 'alt',
    alts: alts.map((alt) => {
      const items = alt.t === 'seq' ? [...alt.items] : [alt];
      let bol = false;
      let eol = false;
      while (items.length && items[0]!.t === 'bol') {
        items.shift();
        bol = true;
      }
      while (items.length && items[items.length - 1]!.t === 'eol') {
        items.pop();
        eol = true;
      }
      for (const item of items) checkNoAnchors(item);
      return { t: 'seq', items: [...(bol ? [] : [any]), ...items, ...(eol ? [] : [any])] };
    }),
  };
}

function checkNoAnchors(re: Re): void {
  switch (re.t) {
    case 'bol':
    case 'eol':
      throw fail('^ and $ are supported only at the start and end of the pattern');
    case 'seq':
      re.items.forEach(checkNoAnchors);
      break;
    case 'alt':
      re.alts.forEach(checkNoAnchors);
      break;
    case 'rep':
      checkNoAnchors(re.item);
      break;
    case 'set':
      break;
  }
}

/**
 * Adds paths from `from` to `to` spelling, as JSON string content, exactly the strings the
 * pattern matches (each character counted once). Loops get fresh nodes, so paths never
 * leak between alternatives.
 */
export function emitPattern(builder: RuleBuilder, pattern: string, from: number, to: number): void {
  emit(builder, anchored(parseRegex(pattern)), from, to);
}

/** Adds paths for an already parsed, anchor-free regex. */
export function emit(builder: RuleBuilder, re: Re, from: number, to: number): void {
  switch (re.t) {
    case 'set':
      jsonCharEdges(builder, from, to, re.set);
      return;
    case 'seq': {
      if (re.items.length === 0) {
        builder.eps(from, to);
        return;
      }
      let at = from;
      re.items.forEach((item, i) => {
        const next = i === re.items.length - 1 ? to : builder.node();
        emit(builder, item, at, next);
        at = next;
      });
      return;
    }
    case 'alt':
      for (const alt of re.alts) emit(builder, alt, from, to);
      return;
    case 'rep': {
      let at = from;
      for (let k = 0; k < re.min; k++) {
        const next = builder.node();
        emit(builder, re.item, at, next);
        at = next;
      }
      if (re.max === Infinity) {
        const loop = builder.node();
        builder.eps(at, loop);
        emit(builder, re.item, loop, loop);
        builder.eps(loop, to);
        return;
      }
      for (let k = re.min; k < re.max; k++) {
        builder.eps(at, to);
        const next = builder.node();
        emit(builder, re.item, at, next);
        at = next;
      }
      builder.eps(at, to);
      return;
    }
    case 'bol':
    case 'eol':
      throw fail('^ and $ are supported only at the start and end of the pattern');
  }
}
