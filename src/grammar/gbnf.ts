// GBNF, llama.cpp's grammar format (its grammars/README.md), -> rules (./nfa.ts), the same
// rules a JSON Schema compiles to, so masks, EOS handling and caching work unchanged.
//
//   name ::= alternatives      a rule; `root` is where the text starts; names are [a-zA-Z0-9-]+
//   a b | c                    sequence, alternatives; ( ... ) groups
//   "lit\n"  [a-z_]  [^\n]  .  a literal, a character class (ranges, ^ negates), any character
//   x* x+ x? x{m} x{m,} x{m,n} repetition of the item before
//   # comment                  to the end of the line
// Escapes in literals and classes: \n \t \r \\ \" \[ \] \- \xNN \uNNNN \UNNNNNNNN. A newline
// ends a rule except inside parentheses or right after `|`. Characters are code points; each
// is spelled as its UTF-8 bytes.
//
// Choices where llama.cpp differs or is silent:
//  * token references (<[id]>, <think>, !<...>) are refused: the automaton runs over bytes,
//    and "one token other than X" has no byte spelling;
//  * a rule defined twice is an error (llama.cpp keeps the last definition);
//  * left recursion (a rule that can reach itself before consuming a character) is an error,
//    as in llama.cpp; a repetition of an item that may be empty (`("a"?)*`) is not, since the
//    automaton runs it finitely;
//  * bounded repetitions are not unrolled: x{m,n} is a rule whose frame counts the items
//    (OP_INC/OP_MIN), so a bound costs nothing; bounds stop at MAX_GRAMMAR_REPEAT. An item
//    that may be empty is counted only when it is not (same language; see emitRepeat).
// Limits (./limits.ts) are checked while parsing, before any rule is built.
import { GrammarError, quoteKeyword } from './errors.js';
import { MAX_GRAMMAR_BYTES, MAX_GRAMMAR_NESTING, MAX_GRAMMAR_REPEAT, MAX_GRAMMAR_RULES } from './limits.js';
import { OP_INC, OP_MIN, Rule, RuleBuilder, utf8 } from './nfa.js';
import type { Wrap } from './schema-compiler.js';
import { complement, MAX_CP, normalize, utf8Sequences, type CpRange } from './utf8.js';

type Expr =
  | { kind: 'text'; text: string }
  /** One character of a set: a class, or `.`. */
  | { kind: 'chars'; ranges: CpRange[] }
  /** `at`: the name's offset in the grammar text, for errors. */
  | { kind: 'ref'; name: string; at: number }
  | { kind: 'seq'; items: Expr[] }
  | { kind: 'alt'; alts: Expr[] }
  | { kind: 'repeat'; item: Expr; min: number; max: number };

interface RuleDef {
  body: Expr;
  /** Offset of the rule's name. */
  at: number;
}

const ANY: CpRange[] = normalize([[0, MAX_CP]]);
/** Matches nothing. */
const NOTHING: Expr = { kind: 'chars', ranges: [] };

const isWordChar = (c: string | undefined): boolean => c !== undefined && /[a-zA-Z0-9-]/.test(c);

/** 1-based line and column (in code points) of `offset` in `text`. */
function position(text: string, offset: number): { line: number; column: number } {
  const before = text.slice(0, offset);
  const lineStart = before.lastIndexOf('\n') + 1;
  return { line: before.split('\n').length, column: [...before.slice(lineStart)].length + 1 };
}

class Parser {
  private i = 0;
  private depth = 0;
  readonly rules = new Map<string, RuleDef>();

  constructor(private readonly src: string) {}

  fail(message: string, at = this.i): never {
    const { line, column } = position(this.src, at);
    throw new GrammarError(`grammar parse error: ${message}`, line, column);
  }

  parse(): Map<string, RuleDef> {
    this.space(true);
    while (this.i < this.src.length) {
      this.rule();
      this.space(true);
    }
    return this.rules;
  }

  private rule(): void {
    const at = this.i;
    const name = this.name();
    this.space(false);
    if (!this.src.startsWith('::=', this.i)) this.fail('expecting "::="');
    this.i += 3;
    this.space(true);
    const body = this.alternates(false);
    if (this.rules.has(name)) this.fail(`rule ${quoteKeyword(name)} is defined twice`, at);
    if (this.rules.size >= MAX_GRAMMAR_RULES) this.fail(`the grammar has more than ${MAX_GRAMMAR_RULES} rules`, at);
    this.rules.set(name, { body, at });
    const c = this.src[this.i];
    if (c === '\r') this.i += this.src[this.i + 1] === '\n' ? 2 : 1;
    else if (c === '\n') this.i++;
    else if (c !== undefined) this.fail(`unexpected ${quoteKeyword(c)}, expecting the end of the rule`);
  }

  private alternates(nested: boolean): Expr {
    const alts = [this.sequence(nested)];
    while (this.src[this.i] === '|') {
      this.i++;
      this.space(true);
      alts.push(this.sequence(nested));
    }
    return alts.length === 1 ? alts[0]! : { kind: 'alt', alts };
  }

  private sequence(nested: boolean): Expr {
    const items: Expr[] = [];
    for (;;) {
      const c = this.src[this.i];
      const at = this.i;
      if (c === '"') {
        this.i++;
        items.push({ kind: 'text', text: this.literal(at) });
      } else if (c === '[') {
        this.i++;
        items.push(this.charClass(at));
      } else if (isWordChar(c)) {
        items.push({ kind: 'ref', name: this.name(), at });
      } else if (c === '(') {
        if (++this.depth > MAX_GRAMMAR_NESTING) this.fail(`groups nest deeper than ${MAX_GRAMMAR_NESTING} levels`);
        this.i++;
        this.space(true);
        items.push(this.alternates(true));
        if (this.src[this.i] !== ')') this.fail('expecting ")"');
        this.i++;
        this.depth--;
      } else if (c === '.') {
        this.i++;
        items.push({ kind: 'chars', ranges: ANY });
      } else if (c === '*' || c === '+' || c === '?') {
        if (items.length === 0) this.fail(`expecting an item before "${c}"`);
        this.i++;
        items.push(repeat(items.pop()!, c === '+' ? 1 : 0, c === '?' ? 1 : Infinity));
      } else if (c === '{') {
        if (items.length === 0) this.fail('expecting an item before "{"');
        this.i++;
        this.space(nested);
        const min = this.count();
        let max = min;
        this.space(nested);
        if (this.src[this.i] === ',') {
          this.i++;
          this.space(nested);
          max = /[0-9]/.test(this.src[this.i] ?? '') ? this.count() : Infinity;
          this.space(nested);
        }
        if (this.src[this.i] !== '}') this.fail('expecting "}"');
        this.i++;
        if (max < min) this.fail(`repetition {${min},${max}} has its maximum below its minimum`, at);
        items.push(repeat(items.pop()!, min, max));
      } else if (c === '<' || c === '!') {
        this.fail('token references (<[id]>, <token>, !<...>) are not supported; spell the text as a literal');
      } else {
        break;
      }
      this.space(nested);
    }
    return items.length === 1 ? items[0]! : { kind: 'seq', items };
  }

  /** The characters of a literal up to its closing quote (the opening one at `at`). */
  private literal(at: number): string {
    let out = '';
    for (;;) {
      const c = this.src[this.i];
      if (c === undefined) this.fail('unterminated literal', at);
      if (c === '"') {
        this.i++;
        return out;
      }
      const start = this.i;
      const cp = this.char();
      if (cp >= 0xd800 && cp <= 0xdfff) this.fail('a surrogate code point cannot be spelled in UTF-8', start);
      out += String.fromCodePoint(cp);
    }
  }

  /** `[...]` or `[^...]` after its `[` (at `at`). */
  private charClass(at: number): Expr {
    const negate = this.src[this.i] === '^';
    if (negate) this.i++;
    const ranges: CpRange[] = [];
    while (this.src[this.i] !== ']') {
      if (this.i >= this.src.length) this.fail('unterminated character class', at);
      const start = this.i;
      const lo = this.char();
      let hi = lo;
      if (this.src[this.i] === '-' && this.src[this.i + 1] !== ']' && this.i + 1 < this.src.length) {
        this.i++;
        hi = this.char();
        if (hi < lo) this.fail('a character range runs backwards', start);
      }
      ranges.push([lo, hi]);
    }
    this.i++;
    return { kind: 'chars', ranges: negate ? complement(ranges) : normalize(ranges) };
  }

  /** One character, escapes decoded: its code point. */
  private char(): number {
    const at = this.i;
    const cp = this.src.codePointAt(this.i)!;
    if (cp !== 0x5c) {
      this.i += cp > 0xffff ? 2 : 1;
      return cp;
    }
    const e = this.src[this.i + 1];
    this.i += 2;
    switch (e) {
      case 'x':
        return this.hex(2, at);
      case 'u':
        return this.hex(4, at);
      case 'U':
        return this.hex(8, at);
      case 'n':
        return 0x0a;
      case 't':
        return 0x09;
      case 'r':
        return 0x0d;
      case '\\':
      case '"':
      case '[':
      case ']':
      case '-':
        return e.charCodeAt(0);
      case undefined:
        return this.fail('unterminated escape', at);
      default:
        return this.fail(`unknown escape ${quoteKeyword(`\\${e}`)}`, at);
    }
  }

  private hex(digits: number, at: number): number {
    const text = this.src.slice(this.i, this.i + digits);
    if (!new RegExp(`^[0-9a-fA-F]{${digits}}$`).test(text)) this.fail(`expecting ${digits} hex digits`, at);
    this.i += digits;
    const cp = parseInt(text, 16);
    if (cp > MAX_CP) this.fail('code point beyond U+10FFFF', at);
    return cp;
  }

  private count(): number {
    const at = this.i;
    const digits = /^[0-9]+/.exec(this.src.slice(this.i, this.i + 12))?.[0];
    if (!digits) this.fail('expecting an integer');
    this.i += digits.length;
    const n = Number(digits);
    if (n > MAX_GRAMMAR_REPEAT) this.fail(`repetition bound ${n} is over the limit of ${MAX_GRAMMAR_REPEAT}`, at);
    return n;
  }

  private name(): string {
    const start = this.i;
    while (isWordChar(this.src[this.i])) this.i++;
    if (this.i === start) this.fail('expecting a rule name');
    return this.src.slice(start, this.i);
  }

  /** Spaces, tabs and comments; newlines too when `newlines`. */
  private space(newlines: boolean): void {
    for (;;) {
      const c = this.src[this.i];
      if (c === ' ' || c === '\t') this.i++;
      else if (c === '#') while (this.i < this.src.length && this.src[this.i] !== '\n' && this.src[this.i] !== '\r') this.i++;
      else if (newlines && (c === '\n' || c === '\r')) this.i++;
      else return;
    }
  }
}

function repeat(item: Expr, min: number, max: number): Expr {
  return { kind: 'repeat', item, min, max };
}

/** A checked grammar: its rules, and which expressions match the empty string. */
interface Grammar {
  rules: Map<string, RuleDef>;
  nullable: (e: Expr) => boolean;
}

/** Parses and checks a grammar: limits, syntax, root, undefined names, left recursion. */
function parseGbnf(text: string): Grammar {
  if (Buffer.byteLength(text, 'utf8') > MAX_GRAMMAR_BYTES) throw new GrammarError(`the grammar is larger than ${MAX_GRAMMAR_BYTES / 1024} KiB`);
  const parser = new Parser(text);
  const rules = parser.parse();
  if (!rules.has('root')) throw new GrammarError('the grammar has no "root" rule');
  for (const { body } of rules.values()) {
    for (const ref of refs(body)) {
      if (rules.has(ref.name)) continue;
      const { line, column } = position(text, ref.at);
      throw new GrammarError(`undefined rule ${quoteKeyword(ref.name)}`, line, column);
    }
  }
  const grammar = { rules, nullable: nullability(rules) };
  checkLeftRecursion(grammar, text);
  return grammar;
}

/** Whether an expression matches "", with the nullable rules found by fixpoint. */
function nullability(rules: Map<string, RuleDef>): (e: Expr) => boolean {
  const nullableRules = new Set<string>();
  const nullable = (e: Expr): boolean => {
    switch (e.kind) {
      case 'text':
        return e.text === '';
      case 'chars':
        return false;
      case 'ref':
        return nullableRules.has(e.name);
      case 'seq':
        return e.items.every(nullable);
      case 'alt':
        return e.alts.some(nullable);
      case 'repeat':
        return e.min === 0 || nullable(e.item);
    }
  };
  for (let changed = true; changed; ) {
    changed = false;
    for (const [name, { body }] of rules) {
      if (!nullableRules.has(name) && nullable(body)) {
        nullableRules.add(name);
        changed = true;
      }
    }
  }
  return nullable;
}

function refs(e: Expr): Array<Extract<Expr, { kind: 'ref' }>> {
  switch (e.kind) {
    case 'ref':
      return [e];
    case 'seq':
      return e.items.flatMap(refs);
    case 'alt':
      return e.alts.flatMap(refs);
    case 'repeat':
      return refs(e.item);
    default:
      return [];
  }
}

/**
 * Rules that can reach themselves before consuming a character would push frames forever:
 * the graph of rules called first (after nullable items only) is searched for a cycle.
 */
function checkLeftRecursion({ rules, nullable }: Grammar, text: string): void {
  const first = (e: Expr, out: Array<Extract<Expr, { kind: 'ref' }>>): void => {
    switch (e.kind) {
      case 'ref':
        out.push(e);
        break;
      case 'seq':
        for (const item of e.items) {
          first(item, out);
          if (!nullable(item)) break;
        }
        break;
      case 'alt':
        for (const alt of e.alts) first(alt, out);
        break;
      case 'repeat':
        if (e.max > 0) first(e.item, out);
        break;
    }
  };
  const edges = new Map<string, Array<Extract<Expr, { kind: 'ref' }>>>();
  for (const [name, { body }] of rules) {
    const out: Array<Extract<Expr, { kind: 'ref' }>> = [];
    first(body, out);
    edges.set(name, out);
  }
  // Iterative DFS; `path` holds the rules on the current branch.
  const state = new Map<string, 1 | 2>();
  for (const start of rules.keys()) {
    if (state.has(start)) continue;
    const path: string[] = [start];
    const next: number[] = [0];
    state.set(start, 1);
    while (path.length) {
      const name = path[path.length - 1]!;
      const out = edges.get(name)!;
      const k = next[next.length - 1]!;
      if (k === out.length) {
        state.set(name, 2);
        path.pop();
        next.pop();
        continue;
      }
      next[next.length - 1] = k + 1;
      const ref = out[k]!;
      const s = state.get(ref.name);
      if (s === 1) {
        const cycle = [...path.slice(path.indexOf(ref.name)), ref.name].join(' -> ');
        const { line, column } = position(text, ref.at);
        throw new GrammarError(`left recursion: rule ${quoteKeyword(ref.name)} can reach itself before consuming a character (${cycle})`, line, column);
      }
      if (s === 2) continue;
      state.set(ref.name, 1);
      path.push(ref.name);
      next.push(0);
    }
  }
}

/** Compiles a GBNF grammar; the returned root rule matches prefix + text + suffix. */
export function compileGbnfRules(text: string, wrap: Wrap = {}): Rule {
  const { rules: defs, nullable } = parseGbnf(text);
  // Rules are built as they are first referenced, from root: unreachable ones never are.
  const named = new Map<string, Rule>();
  const work: string[] = [];
  const ruleFor = (name: string): Rule => {
    let r = named.get(name);
    if (!r) {
      named.set(name, (r = new Rule(name)));
      work.push(name);
    }
    return r;
  };
  const overflow = (name: string) => () => new GrammarError(`rule ${quoteKeyword(name)} is too large`);

  /** Emits `e` from node `from`; returns its end node. Edges go only into nodes made here. */
  const emit = (b: RuleBuilder, e: Expr, from: number, owner: string): number => {
    switch (e.kind) {
      case 'text':
        return b.literal(from, utf8(e.text));
      case 'chars': {
        const to = b.node();
        for (const [lo, hi] of e.ranges) {
          for (const seq of utf8Sequences(lo, hi)) {
            let at = from;
            seq.forEach(([blo, bhi], k) => {
              const next = k === seq.length - 1 ? to : b.node();
              b.byte(at, blo, bhi, next);
              at = next;
            });
          }
        }
        return to;
      }
      case 'ref': {
        const to = b.node();
        b.call(from, ruleFor(e.name), to);
        return to;
      }
      case 'seq':
        return e.items.reduce((at, item) => emit(b, item, at, owner), from);
      case 'alt': {
        const to = b.node();
        for (const alt of e.alts) b.eps(emit(b, alt, from, owner), to);
        return to;
      }
      case 'repeat':
        return emitRepeat(b, e, from, owner);
    }
  };

  const emitRepeat = (b: RuleBuilder, e: Extract<Expr, { kind: 'repeat' }>, from: number, owner: string): number => {
    const { item, max } = e;
    let { min } = e;
    if (max === 0) return from;
    if (min === 1 && max === 1) return emit(b, item, from, owner);
    if (min === 0 && max === 1) {
      const to = b.node();
      b.eps(emit(b, item, from, owner), to);
      b.eps(from, to);
      return to;
    }
    if (min <= 1 && max === Infinity) {
      // x*: a loop node; x+: the loop closes after the first item.
      const loop = b.node();
      b.eps(from, loop);
      const end = emit(b, item, loop, owner);
      b.eps(end, loop);
      return min === 0 ? loop : end;
    }
    // Bounded: a rule calling the item with its frame counting, finishing at >= min. An item
    // that may be empty would count empty items, and every count would stay live at once:
    // x{m,n} is then x'{0,n}, x' being x without "".
    const counted = nullable(item) ? nonEmpty(item) : item;
    if (counted !== item) min = 0;
    const body = counted.kind === 'ref' ? ruleFor(counted.name) : defineGroup(counted, owner);
    const rb = new RuleBuilder(overflow(owner));
    const s = rb.node();
    const t = rb.node();
    rb.call(s, body, s, OP_INC);
    rb.eps(s, t, OP_MIN);
    rb.finish(t);
    const rep = new Rule(`${owner}{${min},${max}}`).define(rb, undefined, min, max);
    const to = b.node();
    b.call(from, rep, to);
    return to;
  };

  /**
   * `e` without the empty string. Rules get a twin, named `name+` (no GBNF name has "+"),
   * built like any rule when reached.
   */
  const nonEmpty = (e: Expr): Expr => {
    if (!nullable(e)) return e;
    switch (e.kind) {
      case 'text':
      case 'chars':
        return NOTHING;
      case 'ref': {
        const twin = `${e.name}+`;
        if (!defs.has(twin)) {
          defs.set(twin, { body: NOTHING, at: e.at });
          defs.set(twin, { body: nonEmpty(defs.get(e.name)!.body), at: e.at });
        }
        return { kind: 'ref', name: twin, at: e.at };
      }
      case 'seq':
        // The first non-empty item is the i-th: those before it match "".
        return { kind: 'alt', alts: e.items.map((item, i) => ({ kind: 'seq', items: [nonEmpty(item), ...e.items.slice(i + 1)] })) };
      case 'alt':
        return { kind: 'alt', alts: e.alts.map(nonEmpty) };
      case 'repeat':
        return e.max === 0 ? NOTHING : repeat(nonEmpty(e.item), 1, e.max);
    }
  };

  const defineGroup = (e: Expr, owner: string): Rule => {
    const b = new RuleBuilder(overflow(owner));
    const start = b.node();
    b.finish(emit(b, e, start, owner));
    return new Rule(`${owner} group`).define(b, undefined);
  };

  const root = ruleFor('root');
  while (work.length) {
    const name = work.pop()!;
    const b = new RuleBuilder(overflow(name));
    const start = b.node();
    b.finish(emit(b, defs.get(name)!.body, start, name));
    named.get(name)!.define(b, undefined);
  }

  if (!wrap.prefix && !wrap.suffix) return root;
  const top = new Rule('wrapped root');
  const b = new RuleBuilder();
  const start = b.node();
  const afterPrefix = wrap.prefix ? b.literal(start, utf8(wrap.prefix), true) : start;
  const afterText = b.node();
  b.call(afterPrefix, root, afterText);
  b.finish(wrap.suffix ? b.literal(afterText, utf8(wrap.suffix), true) : afterText);
  return top.define(b, undefined);
}
