// What the grammar layer refuses. Messages never quote the schema (only keyword names,
// which are short and ours to echo); the server turns both into 400s.

/** The schema is over a limit, uses an unsupported keyword, or admits no value. */
export class SchemaError extends Error {
  constructor(
    message: string,
    /** The offending keyword, when one is to blame. */
    readonly keyword?: string,
  ) {
    super(message);
    this.name = 'SchemaError';
  }
}

/** The model's tokenizer cannot be walked byte by byte (not a HF BPE tokenizer.json). */
export class UnsupportedTokenizerError extends Error {
  constructor(message: string) {
    super(`UnsupportedTokenizer: ${message}`);
    this.name = 'UnsupportedTokenizerError';
  }
}

/** A keyword name fit to quote in an error: short and printable. */
export function quoteKeyword(keyword: string): string {
  const k = keyword.length > 40 ? `${keyword.slice(0, 40)}…` : keyword;
  return JSON.stringify(k);
}

/**
 * A GBNF grammar that does not parse, breaks a rule (undefined name, no root, left
 * recursion) or is over a limit. `line` and `column` (1-based, in characters) point at the
 * offending place when there is one; the message then says them.
 */
export class GrammarError extends Error {
  constructor(
    message: string,
    readonly line?: number,
    readonly column?: number,
  ) {
    super(line === undefined ? message : `${message} at line ${line}, column ${column}`);
    this.name = 'GrammarError';
  }
}
