// Argument values of the formats whose bodies are not JSON (XML parameters, key/value tag
// pairs) arrive as raw text. The tool's schema decides what each becomes: a string-typed
// parameter keeps its text exactly; other types are read as JSON, then as loose literals
// (Python's True/None, single quotes), and fall back to the text.
import type { ToolDefinition } from './types.js';

type Schema = Record<string, unknown>;

/** The schema of `param` of tool `name`, when declared. */
export function paramSchema(tools: readonly ToolDefinition[], name: string, param: string): Schema | boolean | undefined {
  const tool = tools.find((t) => t.function.name === name);
  const props = tool?.function.parameters?.properties as Record<string, Schema | boolean> | undefined;
  return props?.[param];
}

function schemaTypes(schema: Schema | boolean | undefined): string[] {
  if (schema === undefined || typeof schema === 'boolean') return [];
  const types: string[] = [];
  const t = schema.type;
  if (typeof t === 'string') types.push(t);
  else if (Array.isArray(t)) types.push(...t.filter((x): x is string => typeof x === 'string'));
  for (const key of ['anyOf', 'oneOf'] as const) {
    const alts = schema[key];
    if (Array.isArray(alts)) for (const alt of alts) types.push(...schemaTypes(alt as Schema));
  }
  if (types.length === 0 && Array.isArray(schema.enum) && schema.enum.every((v) => typeof v === 'string')) types.push('string');
  return types;
}

/** The value a raw parameter text stands for, given its schema. */
export function coerceValue(raw: string, schema: Schema | boolean | undefined): unknown {
  const types = schemaTypes(schema);
  // Only-string parameters keep the model's text untouched, digits and all.
  if (types.length > 0 && types.every((t) => t === 'string')) return raw;
  const json = parseLoose(raw.trim());
  // Undeclared: only a container is read as one; a bare "123" may well be an id.
  if (types.length === 0) return json && typeof json.value === 'object' && json.value !== null ? json.value : raw;
  if (json !== undefined && types.some((t) => matchesType(json.value, t))) return json.value;
  return types.includes('string') ? raw : json?.value ?? raw;
}

function matchesType(value: unknown, type: string): boolean {
  switch (type) {
    case 'string':
      return typeof value === 'string';
    case 'integer':
      return Number.isInteger(value);
    case 'number':
      return typeof value === 'number';
    case 'boolean':
      return typeof value === 'boolean';
    case 'null':
      return value === null;
    case 'array':
      return Array.isArray(value);
    case 'object':
      return typeof value === 'object' && value !== null && !Array.isArray(value);
    default:
      return true;
  }
}

/** JSON, or a Python-style literal; undefined when the text is neither. */
export function parseLoose(text: string): { value: unknown } | undefined {
  try {
    return { value: JSON.parse(text) };
  } catch {
    // fall through
  }
  if (text === 'True') return { value: true };
  if (text === 'False') return { value: false };
  if (text === 'None') return { value: null };
  // Python dict/list reprs: single-quoted strings and capitalised literals.
  if (/^[[{]/.test(text)) {
    const converted = pythonToJson(text);
    if (converted !== undefined) {
      try {
        return { value: JSON.parse(converted) };
      } catch {
        return undefined;
      }
    }
  }
  return undefined;
}

/** Rewrites a Python literal's quoting and constants into JSON; undefined if unbalanced. */
export function pythonToJson(text: string): string | undefined {
  let out = '';
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (c === '"' || c === "'") {
      let j = i + 1;
      let s = '';
      for (; j < text.length && text[j] !== c; j++) {
        if (text[j] === '\\' && j + 1 < text.length) {
          const next = text[++j]!;
          s += next === 'n' ? '\n' : next === 't' ? '\t' : next;
        } else s += text[j];
      }
      if (j >= text.length) return undefined;
      out += JSON.stringify(s);
      i = j;
      continue;
    }
    const word = /^(True|False|None)\b/.exec(text.slice(i));
    if (word && !/\w/.test(text[i - 1] ?? '')) {
      out += word[1] === 'True' ? 'true' : word[1] === 'False' ? 'false' : 'null';
      i += word[1]!.length - 1;
      continue;
    }
    out += c;
  }
  return out;
}

/**
 * Arguments built from key/value pairs, serialised one member at a time so that a
 * streamer can send each member as it completes: the pieces
 * argumentPiece(0, …) + argumentPiece(1, …) + … + argumentsClose(n) are the final text.
 */
export function argumentPiece(index: number, key: string, value: unknown): string {
  return `${index === 0 ? '{' : ','}${JSON.stringify(key)}:${JSON.stringify(value)}`;
}

export function argumentsClose(count: number): string {
  return count === 0 ? '{}' : '}';
}

export function serializeArguments(entries: ReadonlyArray<readonly [string, unknown]>): string {
  return entries.map(([k, v], i) => argumentPiece(i, k, v)).join('') + argumentsClose(entries.length);
}
