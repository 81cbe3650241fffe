// Checks before compilation: the size limits (64 KiB serialized, 32 levels of nesting, 64
// $ref entries, 32 distinct patterns and formats) and the keyword whitelist. Nothing here
// quotes the schema back. GBNF's limits are at the end; ./gbnf.ts checks them while
// parsing, before building any rule.
import { quoteKeyword, SchemaError } from './errors.js';

export const MAX_SCHEMA_BYTES = 64 * 1024;
export const MAX_SCHEMA_DEPTH = 32;
export const MAX_SCHEMA_REFS = 64;
/** Distinct pattern/format strings: each is compiled to its own automaton and its states
 *  explored (schema-compiler.ts checkStateCount), tens of milliseconds apiece. */
export const MAX_SCHEMA_PATTERNS = 32;

/** Keywords that shape the generated value. */
const CONSTRAINTS = new Set([
  'type', 'enum', 'const',
  'properties', 'required', 'additionalProperties',
  'items', 'prefixItems', 'additionalItems', 'minItems', 'maxItems', 'uniqueItems',
  'minLength', 'maxLength', 'pattern', 'format',
  'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum',
  'anyOf', 'oneOf', 'allOf', '$ref',
]);

/** Keywords that change nothing about the value. */
export const ANNOTATIONS = new Set([
  '$schema', '$id', '$comment', '$anchor', '$defs', 'definitions',
  'title', 'description', 'default', 'examples', 'deprecated', 'readOnly', 'writeOnly',
]);

const TYPES = new Set(['object', 'array', 'string', 'number', 'integer', 'boolean', 'null']);
export const FORMATS = new Set(['date', 'time', 'date-time', 'uuid', 'email']);

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Limits first (cheap, and before anything recursive), then every keyword. */
export function checkSchema(schema: unknown): void {
  checkDepth(schema);
  if (Buffer.byteLength(JSON.stringify(schema) ?? '', 'utf8') > MAX_SCHEMA_BYTES) {
    throw new SchemaError(`the schema is larger than ${MAX_SCHEMA_BYTES / 1024} KiB serialized`);
  }
  const refs: Counts = { count: 0, patterns: new Set() };
  checkNode(schema, refs);
  if (refs.count > MAX_SCHEMA_REFS) throw new SchemaError(`the schema has more than ${MAX_SCHEMA_REFS} $ref entries`, '$ref');
  if (refs.patterns.size > MAX_SCHEMA_PATTERNS) {
    throw new SchemaError(`the schema has more than ${MAX_SCHEMA_PATTERNS} distinct pattern and format values`, 'pattern');
  }
}

/** JSON nesting depth (objects and arrays), iteratively: the body may be deeper than the stack. */
function checkDepth(root: unknown): void {
  const work: Array<[unknown, number]> = [[root, 1]];
  while (work.length) {
    const [v, d] = work.pop()!;
    if (typeof v !== 'object' || v === null) continue;
    if (d > MAX_SCHEMA_DEPTH) throw new SchemaError(`the schema nests deeper than ${MAX_SCHEMA_DEPTH} levels`);
    for (const child of Object.values(v)) if (typeof child === 'object' && child !== null) work.push([child, d + 1]);
  }
}

function bad(keyword: string, why: string): SchemaError {
  return new SchemaError(`schema keyword ${quoteKeyword(keyword)} ${why}`, keyword);
}

const isCount = (v: unknown): boolean => Number.isInteger(v) && (v as number) >= 0;

/** $ref entries, and the distinct pattern/format strings. */
interface Counts {
  count: number;
  patterns: Set<string>;
}

function checkNode(node: unknown, refs: Counts): void {
  if (typeof node === 'boolean') return;
  if (!isObject(node)) throw new SchemaError('a schema must be an object or a boolean');
  for (const [key, value] of Object.entries(node)) {
    if (ANNOTATIONS.has(key) || key.startsWith('x-')) continue;
    if (!CONSTRAINTS.has(key)) throw bad(key, 'is not supported');
    switch (key) {
      case 'type': {
        const types = Array.isArray(value) ? value : [value];
        if (types.length === 0 || !types.every((t) => typeof t === 'string' && TYPES.has(t))) throw bad(key, 'must name JSON types');
        break;
      }
      case 'enum':
        if (!Array.isArray(value) || value.length === 0) throw bad(key, 'must be a non-empty array');
        break;
      case 'properties':
        if (!isObject(value)) throw bad(key, 'must be an object');
        for (const sub of Object.values(value)) checkNode(sub, refs);
        break;
      case 'required':
        if (!Array.isArray(value) || !value.every((r) => typeof r === 'string')) throw bad(key, 'must be an array of strings');
        break;
      case 'additionalProperties':
      case 'additionalItems':
        checkNode(value, refs);
        break;
      case 'items':
        if (Array.isArray(value)) value.forEach((s) => checkNode(s, refs));
        else checkNode(value, refs);
        break;
      case 'prefixItems':
      case 'anyOf':
      case 'oneOf':
      case 'allOf':
        if (!Array.isArray(value) || value.length === 0) throw bad(key, 'must be a non-empty array');
        if (key === 'allOf' && value.length !== 1) throw bad(key, 'is supported with a single subschema only');
        value.forEach((s) => checkNode(s, refs));
        break;
      case 'minItems':
      case 'maxItems':
      case 'minLength':
      case 'maxLength':
        if (!isCount(value)) throw bad(key, 'must be a non-negative integer');
        break;
      case 'uniqueItems':
        if (value === true) throw bad(key, 'true is not supported');
        if (value !== false) throw bad(key, 'must be a boolean');
        break;
      case 'pattern':
        if (typeof value !== 'string') throw bad(key, 'must be a string');
        refs.patterns.add(`pattern:${value}`);
        break;
      case 'format':
        if (typeof value !== 'string' || !FORMATS.has(value)) throw bad(key, `supports only ${[...FORMATS].join(', ')}`);
        refs.patterns.add(`format:${value}`);
        break;
      case 'minimum':
      case 'maximum':
        if (typeof value !== 'number' || !Number.isFinite(value)) throw bad(key, 'must be a finite number');
        break;
      case 'exclusiveMinimum':
      case 'exclusiveMaximum':
        if (typeof value !== 'boolean' && (typeof value !== 'number' || !Number.isFinite(value))) throw bad(key, 'must be a finite number');
        break;
      case '$ref':
        if (typeof value !== 'string') throw bad(key, 'must be a string');
        if (!value.startsWith('#')) throw bad(key, 'supports only local references ("#/$defs/...")');
        refs.count++;
        break;
    }
  }
  for (const defs of ['$defs', 'definitions'] as const) {
    const d = node[defs];
    if (d === undefined) continue;
    if (!isObject(d)) throw bad(defs, 'must be an object');
    for (const sub of Object.values(d)) checkNode(sub, refs);
  }
}

/** GBNF grammars (./gbnf.ts): text size, named rules, repetition bounds, group nesting. */
export const MAX_GRAMMAR_BYTES = 64 * 1024;
export const MAX_GRAMMAR_RULES = 1024;
export const MAX_GRAMMAR_REPEAT = 10_000;
export const MAX_GRAMMAR_NESTING = 64;
