// Python call lists, "[get_weather(city="Paris", days=2), get_time(zone='CET')]": the
// reader that Pythonic calls ("pythonic") and Llama 3's built-in tool calls
// ("llama3_json", brave_search.call(query="…")) share. Argument values are Python literals
// and become their JSON equivalents.
import { serializeArguments } from './coerce.js';
import type { ParsedToolCall } from './types.js';

class PyError extends Error {}

/** A recursive-descent reader of Python literals and call lists. */
class PyReader {
  i = 0;
  constructor(private readonly s: string) {}

  ws(): void {
    while (/\s/.test(this.s[this.i] ?? '')) this.i++;
  }

  expect(c: string): void {
    this.ws();
    if (this.s[this.i] !== c) throw new PyError(`expected ${c}`);
    this.i++;
  }

  peek(): string | undefined {
    this.ws();
    return this.s[this.i];
  }

  identifier(): string {
    this.ws();
    const m = /^[A-Za-z_][\w.-]*/.exec(this.s.slice(this.i));
    if (!m) throw new PyError('expected a name');
    this.i += m[0].length;
    return m[0];
  }

  /** Items up to `close`, separated by commas, trailing comma allowed. */
  list<T>(close: string, item: () => T): T[] {
    const out: T[] = [];
    for (;;) {
      if (this.peek() === close) {
        this.i++;
        return out;
      }
      out.push(item());
      const next = this.peek();
      if (next === ',') this.i++;
      else if (next !== close) throw new PyError(`expected , or ${close}`);
    }
  }

  value(): unknown {
    const c = this.peek();
    if (c === '"' || c === "'") return this.string(c);
    if (c === '[') {
      this.i++;
      return this.list(']', () => this.value());
    }
    if (c === '(') {
      this.i++;
      return this.list(')', () => this.value());
    }
    if (c === '{') {
      this.i++;
      const entries = this.list('}', () => {
        const key = this.value();
        this.expect(':');
        return [String(key), this.value()] as const;
      });
      return Object.fromEntries(entries);
    }
    const m = /^(-?\d+(\.\d+)?([eE][-+]?\d+)?|True|False|None|true|false|null)/.exec(this.s.slice(this.i));
    if (!m) throw new PyError('expected a literal');
    this.i += m[0].length;
    const word = m[0];
    if (word === 'True' || word === 'true') return true;
    if (word === 'False' || word === 'false') return false;
    if (word === 'None' || word === 'null') return null;
    return Number(word);
  }

  string(quote: string): string {
    const triple = this.s.startsWith(quote.repeat(3), this.i);
    const delim = triple ? quote.repeat(3) : quote;
    this.i += delim.length;
    let out = '';
    while (this.i < this.s.length) {
      if (this.s.startsWith(delim, this.i)) {
        this.i += delim.length;
        return out;
      }
      const ch = this.s[this.i]!;
      if (ch === '\\' && this.i + 1 < this.s.length) {
        const e = this.s[this.i + 1]!;
        const map: Record<string, string> = { n: '\n', t: '\t', r: '\r', '\\': '\\', "'": "'", '"': '"', '0': '\0' };
        if (e === 'u' && /^[0-9a-fA-F]{4}$/.test(this.s.slice(this.i + 2, this.i + 6))) {
          out += String.fromCharCode(parseInt(this.s.slice(this.i + 2, this.i + 6), 16));
          this.i += 6;
          continue;
        }
        out += map[e] ?? `\\${e}`;
        this.i += 2;
        continue;
      }
      out += ch;
      this.i++;
    }
    throw new PyError('unterminated string');
  }

  call(): ParsedToolCall {
    const name = this.identifier();
    this.expect('(');
    const entries = this.list(')', () => {
      const key = this.identifier();
      this.expect('=');
      return [key, this.value()] as const;
    });
    return { name, arguments: serializeArguments(entries) };
  }
}

/** "[f(a=1), g()]" → calls; undefined unless the whole text is such a list. */
export function parsePythonCalls(text: string): ParsedToolCall[] | undefined {
  const reader = new PyReader(text);
  try {
    reader.expect('[');
    const calls = reader.list(']', () => reader.call());
    reader.ws();
    return reader.i === text.length && calls.length > 0 ? calls : undefined;
  } catch (err) {
    if (err instanceof PyError) return undefined;
    throw err;
  }
}
