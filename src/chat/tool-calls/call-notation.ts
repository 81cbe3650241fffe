// Google Gemma call notation, the shape shared by Gemma 4 ("gemma4") and function-calling
// Gemma ("function_gemma"), each with its own tokens:
//   <OPEN>call:NAME{key:<QUOTE>text<QUOTE>,n:3}<CLOSE>
// Keys are bare, strings sit between the family's quote token, and other values are bare
// literals; a bare value of a declared parameter is coerced against its schema.
import { coerceValue, paramSchema, parseLoose, serializeArguments } from './coerce.js';
import { endAfter, findLiteral } from './markers.js';
import type { ParsedToolCall, ToolCallFormat, ToolDefinition } from './types.js';

class NotationError extends Error {}

/** Reads the notation's values with `quote` as the string delimiter. */
class NotationReader {
  i = 0;
  constructor(
    private readonly s: string,
    private readonly quote: string,
  ) {}

  private ws(): void {
    while (/\s/.test(this.s[this.i] ?? '')) this.i++;
  }

  /** `bare` turns an unquoted literal into a value (top-level keys get schema coercion). */
  value(bare: (raw: string) => unknown = looseLiteral): unknown {
    this.ws();
    const { s } = this;
    if (s.startsWith(this.quote, this.i)) {
      const end = s.indexOf(this.quote, this.i + this.quote.length);
      if (end < 0) throw new NotationError('unterminated string');
      const text = s.slice(this.i + this.quote.length, end);
      this.i = end + this.quote.length;
      return text;
    }
    if (s[this.i] === '{') return this.object();
    if (s[this.i] === '[') {
      this.i++;
      const items: unknown[] = [];
      for (;;) {
        this.ws();
        if (s[this.i] === ']') {
          this.i++;
          return items;
        }
        if (items.length > 0) {
          if (s[this.i] !== ',') throw new NotationError('expected ,');
          this.i++;
        }
        items.push(this.value());
      }
    }
    const m = /^[^,}\]]*/.exec(s.slice(this.i))!;
    if (m[0].trim() === '') throw new NotationError('empty value');
    this.i += m[0].length;
    return bare(m[0].trim());
  }

  /** An object; `valueFor` picks how each key's bare literal is read. */
  object(valueFor?: (key: string) => (raw: string) => unknown): Record<string, unknown> {
    const { s } = this;
    if (s[this.i] !== '{') throw new NotationError('expected {');
    this.i++;
    const out: Record<string, unknown> = {};
    for (let first = true; ; first = false) {
      this.ws();
      if (s[this.i] === '}') {
        this.i++;
        return out;
      }
      if (!first) {
        if (s[this.i] !== ',') throw new NotationError('expected ,');
        this.i++;
        this.ws();
      }
      let key: string;
      if (s.startsWith(this.quote, this.i)) key = this.value() as string;
      else {
        const m = /^[^:{}\s,]+/.exec(s.slice(this.i));
        if (!m) throw new NotationError('expected key');
        key = m[0];
        this.i += key.length;
      }
      this.ws();
      if (s[this.i] !== ':') throw new NotationError('expected :');
      this.i++;
      out[key] = this.value(valueFor?.(key));
    }
  }
}

function looseLiteral(raw: string): unknown {
  return parseLoose(raw)?.value ?? raw;
}

/** "call:NAME{...}" with `quote` as the string token. */
export function parseCallNotation(body: string, quote: string, tools: readonly ToolDefinition[]): ParsedToolCall | undefined {
  const m = /^\s*(?:call:)?([^{\s]+)\s*(?=\{)/.exec(body);
  if (!m) return undefined;
  const name = m[1]!;
  const reader = new NotationReader(body, quote);
  reader.i = m[0].length;
  try {
    const args = reader.object((key) => (raw) => coerceValue(raw, paramSchema(tools, name, key)));
    if (body.slice(reader.i).trim() !== '') return undefined;
    return { name, arguments: serializeArguments(Object.entries(args)) };
  } catch (err) {
    if (err instanceof NotationError) return undefined;
    throw err;
  }
}

/** A call-notation format named `name`: `open` … `close` around the call, `quote` around strings. */
export function notationFormat(name: string, open: string, close: string, quote: string): ToolCallFormat {
  return {
    name,
    preservedTokens: [open, close, quote],
    findStart: (text, ctx) => findLiteral(text, [open], ctx.final),
    findEnd: (region, final) => endAfter(region, close, final),
    parseRegion(region, tools) {
      let body = region.slice(open.length);
      if (body.endsWith(close)) body = body.slice(0, -close.length);
      const call = parseCallNotation(body, quote, tools);
      return call ? [call] : undefined;
    },
  };
}
