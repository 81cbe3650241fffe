// JSON Schema (the supported subset, already checked by ./limits.ts) -> rules. Every schema
// node becomes a rule that the parent calls; compact JSON (no whitespace) is the only
// spelling. Choices where JSON Schema leaves freedom:
//  * object properties come in declaration order; optional ones may be left out; no
//    additional properties are generated when `properties` is given, whatever
//    additionalProperties says (extra keys are never needed to validate). An object schema
//    without `properties` generates a map: any keys, values of additionalProperties (any
//    value when absent or true; only {} when false).
//  * oneOf is generated as anyOf: alternatives are expected to be disjoint.
//  * arrays with prefixItems and no items generate no extra items unless minItems needs them.
//  * numbers: no exponent, at most 16 integer and 16 fraction digits (more when a bound
//    needs them); integers likewise.
//  * strings: a plain string accepts every JSON escape; pattern/format strings spell each
//    character one way (raw UTF-8 where JSON allows it).
import { universe as U } from './automaton.js';
import { SchemaError } from './errors.js';
import { ANNOTATIONS } from './limits.js';
import { integerBounds, integerRange, numberRange, toDec, type Bound } from './numbers.js';
import { OP_INC, OP_MIN, OP_ROOM, Rule, RuleBuilder, utf8 } from './nfa.js';
import { emitPattern } from './regex.js';
import { utf8Sequences } from './utf8.js';

/** The schema (or a branch of it) admits no value. */
export class NoValueError extends SchemaError {}

type Schema = Record<string, unknown> | boolean;

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Patterns for the supported formats: subsets of what ajv-formats accepts ("full" mode). */
export const FORMAT_PATTERNS: Record<string, string> = {
  date: `^${dateRe()}$`,
  time: `^${timeRe()}$`,
  'date-time': `^${dateRe()}T${timeRe()}$`,
  uuid: '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$',
  email: '^[A-Za-z0-9_+-]+(?:\\.[A-Za-z0-9_+-]+)*@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)+$',
};

function dateRe(): string {
  // Days valid in every year: February stops at 28.
  return '\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|02-(?:0[1-9]|1\\d|2[0-8]))';
}

function timeRe(): string {
  return '(?:[01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(?:\\.\\d{1,6})?(?:Z|[+-](?:[01]\\d|2[0-3]):[0-5]\\d)';
}

export interface Wrap {
  /** Literal text before the document (added tokens may spell it). */
  prefix?: string;
  /** Literal text after the document. */
  suffix?: string;
}

/** Compiles a checked schema; the returned root rule matches prefix + document + suffix. */
export function compileSchemaRules(schema: unknown, wrap: Wrap = {}): Rule {
  const compiler = new Compiler(schema);
  const value = compiler.compile(schema as Schema);
  const root = new Rule('root');
  const b = new RuleBuilder();
  const start = b.node();
  const afterPrefix = wrap.prefix ? b.literal(start, utf8(wrap.prefix), true) : start;
  const afterValue = b.node();
  b.call(afterPrefix, value, afterValue);
  const end = wrap.suffix ? b.literal(afterValue, utf8(wrap.suffix), true) : afterValue;
  b.finish(end);
  root.define(b, undefined);
  checkLeftRecursion(root);
  return root;
}

class Compiler {
  private readonly memo = new Map<object, Rule>();
  private readonly refs = new Map<string, Rule>();
  private readonly inProgress = new Set<string>();
  private readonly placeholders = new Map<string, Rule>();
  private merges = 0;

  constructor(private readonly root: unknown) {}

  compile(schema: Schema): Rule {
    if (schema === true) return anyValue();
    if (schema === false) throw new NoValueError('the schema admits no value (false)');
    const cached = this.memo.get(schema);
    if (cached) return cached;
    const rule = this.compileObject(schema);
    this.memo.set(schema, rule);
    return rule;
  }

  private compileObject(s: Record<string, unknown>): Rule {
    const keys = Object.keys(s).filter((k) => !ANNOTATIONS.has(k) && !k.startsWith('x-') && k !== 'uniqueItems');
    if (keys.length === 0) return anyValue();
    if (typeof s.$ref === 'string') {
      const rest = without(s, '$ref');
      if (Object.keys(rest).every((k) => ANNOTATIONS.has(k) || k.startsWith('x-'))) return this.ref(s.$ref);
      return this.compile(this.merge(rest, this.resolve(s.$ref), '$ref'));
    }
    if (Array.isArray(s.allOf)) return this.compile(this.merge(without(s, 'allOf'), s.allOf[0] as Schema, 'allOf'));
    const combinator = Array.isArray(s.anyOf) ? 'anyOf' : Array.isArray(s.oneOf) ? 'oneOf' : undefined;
    if (combinator) {
      if (Array.isArray(s.anyOf) && Array.isArray(s.oneOf)) throw new SchemaError('anyOf and oneOf in the same schema are not supported', 'oneOf');
      const rest = without(s, combinator);
      const plain = Object.keys(rest).every((k) => ANNOTATIONS.has(k) || k.startsWith('x-'));
      const alts = (s[combinator] as Schema[]).map((alt) => (plain ? alt : this.merge(rest, alt, combinator)));
      return this.union(alts);
    }
    if ('enum' in s || 'const' in s) return this.literalValues(s);
    const types = Array.isArray(s.type) ? (s.type as string[]) : typeof s.type === 'string' ? [s.type] : inferTypes(s);
    if (types.length === 0) return anyValue();
    const unique = [...new Set(types)];
    // number already admits every integer.
    const effective = unique.includes('number') ? unique.filter((t) => t !== 'integer') : unique;
    return this.unionRules(effective.map((t) => () => this.typeRule(t, s)));
  }

  private union(alts: Schema[]): Rule {
    return this.unionRules(alts.map((alt) => () => this.compile(alt)));
  }

  /** One rule per alternative; alternatives that admit no value are dropped. */
  private unionRules(makers: Array<() => Rule>): Rule {
    const rules: Rule[] = [];
    let noValue: NoValueError | undefined;
    for (const make of makers) {
      try {
        rules.push(make());
      } catch (err) {
        if (!(err instanceof NoValueError)) throw err;
        noValue = err;
      }
    }
    if (rules.length === 0) throw noValue ?? new NoValueError('the schema admits no value');
    if (rules.length === 1) return rules[0]!;
    const b = new RuleBuilder();
    const start = b.node();
    const end = b.node();
    for (const r of rules) b.call(start, r, end);
    b.finish(end);
    return new Rule('union').define(b, undefined);
  }

  /** `rest`'s keywords added to `sub`; the same keyword on both sides must agree. */
  private merge(rest: Record<string, unknown>, sub: Schema, combinator: string): Schema {
    if (++this.merges > 256) throw new SchemaError(`${combinator} chains that never reach a schema are not supported`, combinator);
    if (sub === false) return false;
    const base: Record<string, unknown> = sub === true ? {} : { ...sub };
    for (const [k, v] of Object.entries(rest)) {
      if (ANNOTATIONS.has(k) || k.startsWith('x-')) continue;
      if (!(k in base)) {
        base[k] = v;
        continue;
      }
      if (JSON.stringify(base[k]) === JSON.stringify(v)) continue;
      if (k === 'type') {
        const a = [base.type].flat() as string[];
        const c = [v].flat() as string[];
        const both = a.filter((t) => c.includes(t) || (t === 'integer' && c.includes('number')));
        for (const t of c) if (t === 'integer' && a.includes('number') && !both.includes('integer')) both.push('integer');
        if (both.length === 0) return false;
        base.type = both;
        continue;
      }
      throw new SchemaError(`${combinator} combined with a sibling keyword its subschema also sets is not supported`, combinator);
    }
    return base;
  }

  private resolve(pointer: string): Schema {
    if (!pointer.startsWith('#')) throw new SchemaError('only local $ref are supported', '$ref');
    let at: unknown = this.root;
    const path = pointer.slice(1);
    if (path !== '' && !path.startsWith('/')) throw new SchemaError('$ref must be a JSON pointer ("#/$defs/Name")', '$ref');
    for (const raw of path === '' ? [] : path.slice(1).split('/')) {
      let part: string;
      try {
        part = decodeURIComponent(raw).replace(/~1/g, '/').replace(/~0/g, '~');
      } catch {
        throw new SchemaError('a $ref is not a valid JSON pointer', '$ref');
      }
      if (typeof at !== 'object' || at === null || !Object.prototype.hasOwnProperty.call(at, part)) {
        throw new SchemaError('a $ref does not resolve within the schema', '$ref');
      }
      at = (at as Record<string, unknown>)[part];
    }
    if (typeof at !== 'boolean' && !isObject(at)) throw new SchemaError('a $ref does not point at a schema', '$ref');
    return at as Schema;
  }

  /** A referenced schema, compiled once; recursion goes through a placeholder rule. */
  private ref(pointer: string): Rule {
    const done = this.refs.get(pointer);
    if (done) return done;
    if (this.inProgress.has(pointer)) {
      let p = this.placeholders.get(pointer);
      if (!p) this.placeholders.set(pointer, (p = new Rule(`ref ${pointer}`)));
      return p;
    }
    this.inProgress.add(pointer);
    const rule = this.compile(this.resolve(pointer));
    this.inProgress.delete(pointer);
    const placeholder = this.placeholders.get(pointer);
    if (placeholder) {
      const b = new RuleBuilder();
      const start = b.node();
      const end = b.node();
      b.call(start, rule, end);
      b.finish(end);
      placeholder.define(b, undefined);
    }
    this.refs.set(pointer, rule);
    return rule;
  }

  private literalValues(s: Record<string, unknown>): Rule {
    let values: unknown[] = 'const' in s ? [s.const] : (s.enum as unknown[]);
    if ('const' in s && Array.isArray(s.enum)) {
      const c = JSON.stringify(s.const);
      values = (s.enum as unknown[]).some((v) => JSON.stringify(v) === c) ? [s.const] : [];
    }
    const fitting = values.filter((v) => valueFits(v, s));
    if (fitting.length === 0) throw new NoValueError('no enum/const value satisfies the rest of the schema');
    return literalRule([...new Set(fitting.map((v) => JSON.stringify(v)))]);
  }

  private typeRule(type: string, s: Record<string, unknown>): Rule {
    switch (type) {
      case 'string':
        return stringRule(s);
      case 'integer':
      case 'number':
        return numberRule(type, s);
      case 'boolean':
        return literalRule(['true', 'false']);
      case 'null':
        return literalRule(['null']);
      case 'object':
        return this.objectRule(s);
      case 'array':
        return this.arrayRule(s);
      default:
        throw new SchemaError('unknown type', 'type');
    }
  }

  private objectRule(s: Record<string, unknown>): Rule {
    const props = isObject(s.properties) ? (s.properties as Record<string, Schema>) : undefined;
    const required = new Set((s.required as string[] | undefined) ?? []);
    const extra = s.additionalProperties as Schema | undefined;
    const entries: Array<[string, Schema]> = props ? Object.entries(props) : [];
    for (const r of required) {
      if (entries.some(([k]) => k === r)) continue;
      if (extra === false) throw new NoValueError('a required property is not allowed by additionalProperties: false');
      entries.push([r, extra === undefined ? true : extra]);
    }
    if (!props && required.size === 0) {
      if (extra === false) return literalRule(['{}']);
      return mapRule(extra === undefined || extra === true ? anyValue() : this.compile(extra));
    }
    const values = entries.map(([, v]) => this.compile(v));
    const b = new RuleBuilder();
    const start = b.node();
    const nodes = new Map<string, number>();
    const at = (i: number, emitted: boolean): number => {
      const key = `${i},${emitted}`;
      let n = nodes.get(key);
      if (n === undefined) nodes.set(key, (n = b.node()));
      return n;
    };
    b.byte(start, 0x7b, 0x7b, at(0, false));
    const end = b.node();
    // Breadth over (property index, whether one was written): reachable states only.
    for (let i = 0; i <= entries.length; i++) {
      for (const emitted of [false, true]) {
        if (!nodes.has(`${i},${emitted}`)) continue;
        const from = at(i, emitted);
        if (i === entries.length) {
          b.byte(from, 0x7d, 0x7d, end);
          continue;
        }
        const [name] = entries[i]!;
        const key = utf8(`${emitted ? ',' : ''}${JSON.stringify(name)}:`);
        const beforeValue = b.literal(from, key);
        b.call(beforeValue, values[i]!, at(i + 1, true));
        if (!required.has(name)) b.eps(from, at(i + 1, emitted));
      }
    }
    b.finish(end);
    return new Rule('object').define(b, undefined);
  }

  private arrayRule(s: Record<string, unknown>): Rule {
    const prefix: Schema[] = Array.isArray(s.prefixItems) ? (s.prefixItems as Schema[]) : Array.isArray(s.items) ? (s.items as Schema[]) : [];
    const tuple = Array.isArray(s.prefixItems) || Array.isArray(s.items);
    let extra: Schema | undefined = tuple ? (Array.isArray(s.items) ? (s.additionalItems as Schema | undefined) : (s.items as Schema | undefined)) : (s.items as Schema | undefined);
    const min = (s.minItems as number | undefined) ?? 0;
    const max = (s.maxItems as number | undefined) ?? Infinity;
    if (min > max) throw new NoValueError('minItems exceeds maxItems');
    // A tuple without an items schema: extra items only when minItems needs them.
    if (tuple && extra === undefined) extra = min > prefix.length ? true : false;
    if (!tuple && extra === undefined) extra = true;
    if (extra === false && min > prefix.length) throw new NoValueError('minItems exceeds the tuple length');
    const prefixRules: Rule[] = [];
    for (const [k, p] of prefix.entries()) {
      try {
        prefixRules.push(this.compile(p));
      } catch (err) {
        // An item that admits no value ends the array before it.
        if (!(err instanceof NoValueError) || k < min) throw err;
        break;
      }
    }
    let item: Rule | undefined;
    if (extra !== false && prefixRules.length === prefix.length) {
      try {
        item = this.compile(extra!);
      } catch (err) {
        if (!(err instanceof NoValueError) || min > prefix.length) throw err;
      }
    }
    const b = new RuleBuilder();
    const start = b.node();
    const end = b.node();
    const slots = Array.from({ length: prefixRules.length + 1 }, () => b.node());
    b.byte(start, 0x5b, 0x5b, slots[0]!);
    for (let k = 0; k <= prefixRules.length; k++) {
      b.byte(slots[k]!, 0x5d, 0x5d, end, OP_MIN);
      if (k === prefixRules.length) break;
      let from = slots[k]!;
      if (k > 0) {
        const comma = b.node();
        b.byte(from, 0x2c, 0x2c, comma, OP_ROOM);
        from = comma;
      }
      b.call(from, prefixRules[k]!, slots[k + 1]!, OP_INC);
    }
    if (item) {
      const p = prefixRules.length;
      let loop = slots[p]!;
      if (p === 0) {
        loop = b.node();
        b.call(slots[0]!, item, loop, OP_INC);
        b.byte(loop, 0x5d, 0x5d, end, OP_MIN);
      }
      const comma = b.node();
      b.byte(loop, 0x2c, 0x2c, comma, OP_ROOM);
      b.call(comma, item, loop, OP_INC);
    }
    b.finish(end);
    return new Rule('array').define(b, undefined, min, max);
  }
}

function without(s: Record<string, unknown>, key: string): Record<string, unknown> {
  const { [key]: _, ...rest } = s;
  return rest;
}

function inferTypes(s: Record<string, unknown>): string[] {
  const has = (...keys: string[]) => keys.some((k) => k in s);
  const types: string[] = [];
  if (has('properties', 'required', 'additionalProperties')) types.push('object');
  if (has('items', 'prefixItems', 'additionalItems', 'minItems', 'maxItems')) types.push('array');
  if (has('minLength', 'maxLength', 'pattern', 'format')) types.push('string');
  if (has('minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum')) types.push('number');
  return types;
}

/** Whether an enum/const value passes the schema's other keywords we can check. */
function valueFits(v: unknown, s: Record<string, unknown>): boolean {
  const types = s.type === undefined ? undefined : ([s.type].flat() as string[]);
  const typeOf = (x: unknown): string[] => {
    if (x === null) return ['null'];
    if (Array.isArray(x)) return ['array'];
    if (typeof x === 'number') return Number.isInteger(x) ? ['integer', 'number'] : ['number'];
    return [typeof x];
  };
  if (types && !typeOf(v).some((t) => types.includes(t))) return false;
  if (typeof v === 'string') {
    const len = [...v].length;
    if (typeof s.minLength === 'number' && len < s.minLength) return false;
    if (typeof s.maxLength === 'number' && len > s.maxLength) return false;
    try {
      if (typeof s.pattern === 'string' && !new RegExp(s.pattern, 'u').test(v)) return false;
      if (typeof s.format === 'string' && FORMAT_PATTERNS[s.format] && !new RegExp(FORMAT_PATTERNS[s.format]!, 'u').test(v)) return false;
    } catch {
      throw new SchemaError('pattern: not a valid regular expression', 'pattern');
    }
  }
  if (typeof v === 'number') {
    const { min, max } = numericBounds(s);
    if (min && (min.exclusive ? v <= boundValue(min) : v < boundValue(min))) return false;
    if (max && (max.exclusive ? v >= boundValue(max) : v > boundValue(max))) return false;
  }
  return true;
}

const boundValue = (b: Bound): number => Number(`${b.value.neg ? '-' : ''}${b.value.int}${b.value.frac ? `.${b.value.frac}` : ''}`);

function numericBounds(s: Record<string, unknown>): { min?: Bound; max?: Bound } {
  const pick = (incl: unknown, excl: unknown, lower: boolean): Bound | undefined => {
    const cands: Bound[] = [];
    if (typeof incl === 'number') cands.push({ value: toDec(incl), exclusive: excl === true });
    if (typeof excl === 'number') cands.push({ value: toDec(excl), exclusive: true });
    if (cands.length === 0) return undefined;
    // The tighter bound wins; at equal values the exclusive one.
    return cands.reduce((a, c) => {
      const av = boundValue(a);
      const cv = boundValue(c);
      if (av === cv) return a.exclusive ? a : c;
      return lower ? (cv > av ? c : a) : cv < av ? c : a;
    });
  };
  return { min: pick(s.minimum, s.exclusiveMinimum, true), max: pick(s.maximum, s.exclusiveMaximum, false) };
}

function numberRule(type: 'integer' | 'number', s: Record<string, unknown>): Rule {
  const { min, max } = numericBounds(s);
  const b = new RuleBuilder();
  const start = b.node();
  const end = b.node();
  let shape: string;
  if (type === 'integer') {
    const [lo, hi] = integerBounds(min, max);
    integerRange(b, start, end, lo, hi);
    shape = `int:${lo}:${hi}`;
  } else {
    numberRange(b, start, end, min, max);
    shape = `num:${min ? `${min.exclusive ? '(' : '['}${boundValue(min)}` : ''}:${max ? `${boundValue(max)}${max.exclusive ? ')' : ']'}` : ''}`;
  }
  b.finish(end);
  return new Rule(type).define(b, shape);
}

function literalRule(texts: string[]): Rule {
  const b = new RuleBuilder();
  const start = b.node();
  b.finish(b.literals(start, texts.map(utf8)));
  return new Rule('literal').define(b, `lit:${JSON.stringify(texts)}`);
}

function stringRule(s: Record<string, unknown>): Rule {
  const min = (s.minLength as number | undefined) ?? 0;
  const max = (s.maxLength as number | undefined) ?? Infinity;
  if (min > max) throw new NoValueError('minLength exceeds maxLength');
  const pattern = s.pattern as string | undefined;
  const format = s.format as string | undefined;
  if (pattern !== undefined && format !== undefined) throw new SchemaError('pattern combined with format is not supported', 'pattern');
  const b = new RuleBuilder(() => new SchemaError('pattern: too complex (its repetitions unroll to too many states)', 'pattern'));
  const start = b.node();
  const content = b.node();
  const close = b.node();
  const end = b.node();
  b.byte(start, 0x22, 0x22, content);
  b.byte(close, 0x22, 0x22, end, OP_MIN);
  b.finish(end);
  let shape: string;
  if (pattern !== undefined || format !== undefined) {
    emitPattern(b, pattern ?? FORMAT_PATTERNS[format!]!, content, close);
    shape = pattern !== undefined ? `pattern:${pattern}` : `format:${format}`;
  } else {
    plainStringContent(b, content);
    b.eps(content, close);
    shape = 'string';
  }
  const rule = new Rule('string').define(b, shape, min, max);
  if (shape === 'string' && max !== COUNTED_MAX) rule.counted = countedPlainString();
  else checkStateCount(b);
  // Liveness: the empty-content check of the pattern against the bounds.
  if (rule.minRemain[0]! > max || rule.maxRemain[0]! < min) throw new NoValueError('no string satisfies pattern/format and the length bounds');
  return rule;
}

/** Distinct automaton states a pattern may have (a regex like `.*a.{20}` has millions). */
const MAX_PATTERN_STATES = 5000;

/**
 * Explores the determinised states of a pattern/format string (bounds left out) and
 * refuses it past MAX_PATTERN_STATES, before a mask walk could meet them all: every state
 * costs a transition table. Bytes are explored per class of bytes the edges treat alike.
 */
function checkStateCount(b: RuleBuilder): void {
  const relaxed = new Rule('pattern check').define(b, undefined);
  const cuts = new Set<number>([0]);
  for (const e of b.edges) {
    cuts.add(e.lo);
    if (e.hi < 255) cuts.add(e.hi + 1);
  }
  const bytes = [...cuts];
  const start = U.closure([U.stack(relaxed, 0, 0, U.bottom)]).id;
  const seen = new Set<number>([start]);
  const work = [start];
  while (work.length) {
    const id = work.pop()!;
    for (const byte of bytes) {
      const next = U.next(id, byte);
      if (next < 0 || seen.has(next)) continue;
      if (seen.size >= MAX_PATTERN_STATES) throw new SchemaError('pattern: too complex (its automaton has too many states)', 'pattern');
      seen.add(next);
      work.push(next);
    }
  }
}

/** Any JSON string character at `node`, looping back: raw UTF-8 or any escape. */
function plainStringContent(b: RuleBuilder, node: number): void {
  for (const [lo, hi] of [[0x20, 0x21], [0x23, 0x5b], [0x5d, 0xd7ff], [0xe000, 0x10ffff]] as const) {
    for (const seq of utf8Sequences(lo, hi)) {
      let at = node;
      seq.forEach(([blo, bhi], i) => {
        const next = i === seq.length - 1 ? node : b.node();
        b.byte(at, blo, bhi, next, i === 0 ? OP_INC : 0);
        at = next;
      });
    }
  }
  const esc = b.node();
  b.byte(node, 0x5c, 0x5c, esc, OP_INC);
  for (const c of '"\\/bfnrt') b.byte(esc, c.charCodeAt(0), c.charCodeAt(0), node);
  // \uXXXX, surrogates (D800-DFFF) left out.
  const u1 = b.node();
  b.byte(esc, 0x75, 0x75, u1);
  const u2 = b.node();
  const u2d = b.node();
  const u3 = b.node();
  const u4 = b.node();
  const hex = (from: number, to: number) => {
    b.byte(from, 0x30, 0x39, to);
    b.byte(from, 0x41, 0x46, to);
    b.byte(from, 0x61, 0x66, to);
  };
  b.byte(u1, 0x30, 0x39, u2);
  b.byte(u1, 0x41, 0x43, u2);
  b.byte(u1, 0x45, 0x46, u2);
  b.byte(u1, 0x61, 0x63, u2);
  b.byte(u1, 0x65, 0x66, u2);
  b.byte(u1, 0x44, 0x44, u2d);
  b.byte(u1, 0x64, 0x64, u2d);
  hex(u2, u3);
  b.byte(u2d, 0x30, 0x37, u3);
  hex(u3, u4);
  hex(u4, node);
}

/** `{` (key `:` value (`,` key `:` value)*)? `}` with plain string keys. */
function mapRule(value: Rule): Rule {
  const key = plainString();
  const b = new RuleBuilder();
  const start = b.node();
  const open = b.node();
  const colon = b.node();
  const val = b.node();
  const after = b.node();
  const comma = b.node();
  const end = b.node();
  b.byte(start, 0x7b, 0x7b, open);
  b.byte(open, 0x7d, 0x7d, end);
  b.call(open, key, colon);
  b.byte(colon, 0x3a, 0x3a, val);
  b.call(val, value, after);
  b.byte(after, 0x7d, 0x7d, end);
  b.byte(after, 0x2c, 0x2c, comma);
  b.call(comma, key, colon);
  b.finish(end);
  return new Rule('map').define(b, undefined);
}

/** A bound no string reaches: the counted twin's counter never saturates. */
const COUNTED_MAX = 2 ** 30;
let countedPlainStringRule: Rule | undefined;
function countedPlainString(): Rule {
  return (countedPlainStringRule ??= stringRule({ maxLength: COUNTED_MAX }));
}

let plainStringRule: Rule | undefined;
function plainString(): Rule {
  return (plainStringRule ??= stringRule({}));
}

let anyValueRule: Rule | undefined;
/** Any JSON value (the schema `true` or `{}`): a shared recursive rule set. */
export function anyValue(): Rule {
  if (anyValueRule) return anyValueRule;
  const value = new Rule('any');
  anyValueRule = value;
  const array = new Rule('any array');
  const object = mapRule(value);
  {
    const b = new RuleBuilder();
    const start = b.node();
    const first = b.node();
    const after = b.node();
    const comma = b.node();
    const end = b.node();
    b.byte(start, 0x5b, 0x5b, first);
    b.byte(first, 0x5d, 0x5d, end);
    b.call(first, value, after);
    b.byte(after, 0x5d, 0x5d, end);
    b.byte(after, 0x2c, 0x2c, comma);
    b.call(comma, value, after);
    b.finish(end);
    array.define(b, undefined);
  }
  const b = new RuleBuilder();
  const start = b.node();
  const end = b.node();
  for (const r of [plainString(), numberRule('number', {}), literalRule(['true', 'false', 'null']), object, array]) b.call(start, r, end);
  b.finish(end);
  value.define(b, undefined);
  return value;
}

/** A rule that can call itself before consuming a byte would loop forever. */
function checkLeftRecursion(root: Rule): void {
  const rules = new Set<Rule>();
  const work = [root];
  while (work.length) {
    const r = work.pop()!;
    if (rules.has(r)) continue;
    rules.add(r);
    for (const calls of r.calls) for (const c of calls) work.push(c.rule);
  }
  // Calls reachable from a rule's start through epsilon edges only (no rule is nullable).
  const first = new Map<Rule, Rule[]>();
  for (const r of rules) {
    const seen = new Set<number>([0]);
    const stack = [0];
    const out: Rule[] = [];
    while (stack.length) {
      const n = stack.pop()!;
      for (const c of r.calls[n] ?? []) out.push(c.rule);
      for (const [to] of r.eps[n] ?? []) if (!seen.has(to)) { seen.add(to); stack.push(to); }
    }
    first.set(r, out);
  }
  const state = new Map<Rule, 1 | 2>();
  const visit = (r: Rule): void => {
    const s = state.get(r);
    if (s === 2) return;
    if (s === 1) throw new SchemaError('a $ref cycle that consumes no input is not supported', '$ref');
    state.set(r, 1);
    for (const next of first.get(r) ?? []) visit(next);
    state.set(r, 2);
  };
  for (const r of rules) visit(r);
}
