// Structured output: JSON Schema or a GBNF grammar -> a TokenConstraint the engine applies
// before sampling.
//
// API
//   jsonSchemaConstraint(schema, tokenizer, vocabSize, eosIds, wrap?) -> TokenConstraint
//     One per request (it is stateful). Throws SchemaError (-> 400: limits, unsupported
//     keyword, no possible value) and UnsupportedTokenizerError (-> 400). `vocabSize` is
//     the model's (engine.info.vocabSize; ids past the tokenizer are never allowed);
//     `eosIds` (engine.info.eosTokenIds) are allowed exactly when the text is complete.
//   wrap = { prefix?, suffix? }: the constrained text is prefix + document + suffix, all
//     literal. Added tokens (e.g. Qwen's <tool_call>) may spell prefix/suffix text, never
//     the document. Forced tool calls use it:
//       jsonSchemaConstraint(callSchema, tok, V, eos, { prefix: '<tool_call>\n', suffix: '\n</tool_call>' })
//   engineConstraint(engine, schema, wrap?) -> the same with the engine's tokenizer and ids.
//   compileJsonSchema(schema, wrap?) -> validates and compiles (cached) without a tokenizer:
//     use it to reject a bad schema before anything else.
//   gbnfConstraint(grammar, tokenizer, vocabSize, eosIds, wrap?) / compileGbnf(grammar, wrap?)
//     -> the same for llama.cpp's GBNF text (./gbnf.ts); throws GrammarError (-> 400, with
//     line and column) instead of SchemaError.
//   checkTokenizer(tokenizer) -> throws UnsupportedTokenizerError unless the tokenizer is a
//     Hugging Face BPE tokenizer.json whose pieces map to bytes (byte-level like Qwen and
//     Llama 3, or SentencePiece-style with ▁ and <0xNN> like Llama 2 and stories260k).
//   prepareConstrainedDecoding(engine) -> builds the vocabulary trie at load.
//
// Supported keywords: type (incl. arrays), enum, const, properties, required,
// additionalProperties, items (incl. the draft-7 array form), prefixItems, additionalItems,
// minItems, maxItems, minLength, maxLength, pattern (./regex.ts), format (date, time,
// date-time, uuid, email), minimum, maximum, exclusiveMinimum, exclusiveMaximum, anyOf,
// oneOf (as anyOf), allOf with one subschema, $ref to any local JSON pointer ($defs,
// definitions, "#"; recursion included), uniqueItems: false, and annotations (title,
// description, default, examples, $schema, $id, $comment, deprecated, readOnly, writeOnly,
// x-*). Anything else is a 400 naming the keyword. Output is compact JSON. See
// ./schema-compiler.ts for the choices JSON Schema leaves open.
//
// Modules: limits.ts (limits + keyword check) -> schema-compiler.ts (rules; regex.ts,
// numbers.ts, utf8.ts build their byte paths; nfa.ts is the rule format), or gbnf.ts for
// GBNF text -> automaton.ts
// (lazy determinised pushdown automaton) -> matcher.ts (token masks over vocab.ts's trie).
import type { Engine } from '../engine/engine.js';
import type { TokenConstraint } from '../engine/types.js';
import type { TextTokenizer } from '../models/tokenizer.js';
import { universe as U, type Config } from './automaton.js';
import { UnsupportedTokenizerError } from './errors.js';
import { compileGbnfRules } from './gbnf.js';
import { checkSchema } from './limits.js';
import { Matcher } from './matcher.js';
import type { Rule } from './nfa.js';
import { compileSchemaRules, type Wrap } from './schema-compiler.js';
import { pieceEncoding, vocabFor } from './vocab.js';

export { GrammarError, SchemaError, UnsupportedTokenizerError } from './errors.js';
export type { Wrap } from './schema-compiler.js';
export { matcherStats } from './matcher.js';

/** A compiled grammar: opaque outside this module. */
export interface CompiledGrammar {
  readonly root: Rule;
}

const GRAMMAR_CACHE = 64;
const grammars = new Map<string, CompiledGrammar>();

/** Compiled once per key; the cache keeps the most recently used. */
function cached(key: string, compile: () => Rule): CompiledGrammar {
  const hit = grammars.get(key);
  if (hit) {
    grammars.delete(key);
    grammars.set(key, hit);
    return hit;
  }
  const grammar = { root: compile() };
  grammars.set(key, grammar);
  if (grammars.size > GRAMMAR_CACHE) grammars.delete(grammars.keys().next().value!);
  return grammar;
}

/** Checks limits and keywords, then compiles (cached by the schema's JSON and the wrap). */
export function compileJsonSchema(schema: unknown, wrap: Wrap = {}): CompiledGrammar {
  checkSchema(schema);
  return cached(JSON.stringify([schema, wrap.prefix ?? '', wrap.suffix ?? '']), () => compileSchemaRules(schema, wrap));
}

/** Parses, checks and compiles GBNF text (cached by the text and the wrap). */
export function compileGbnf(grammar: string, wrap: Wrap = {}): CompiledGrammar {
  return cached(JSON.stringify(['gbnf', grammar, wrap.prefix ?? '', wrap.suffix ?? '']), () => compileGbnfRules(grammar, wrap));
}

export function checkTokenizer(tokenizer: TextTokenizer): void {
  pieceEncoding(tokenizer);
}

/** Builds the engine's vocabulary trie now (a second or so for a 150k vocabulary), at load
 *  rather than on the first constrained request; nothing when constraints are unsupported. */
export function prepareConstrainedDecoding(engine: Engine): void {
  try {
    checkTokenizer(engine.tokenizer);
  } catch (err) {
    if (err instanceof UnsupportedTokenizerError) return;
    throw err;
  }
  vocabFor(engine.tokenizer, engine.info.vocabSize, engine.info.eosTokenIds);
}

const matchers = new WeakMap<Rule, Map<number, Matcher>>();

function matcherFor(grammar: CompiledGrammar, tokenizer: TextTokenizer, vocabSize: number, eosIds: readonly number[]): Matcher {
  const vocab = vocabFor(tokenizer, vocabSize, eosIds);
  let byVocab = matchers.get(grammar.root);
  if (!byVocab) matchers.set(grammar.root, (byVocab = new Map()));
  let m = byVocab.get(vocab.id);
  if (!m) byVocab.set(vocab.id, (m = new Matcher(grammar.root, vocab, eosIds)));
  return m;
}

export function jsonSchemaConstraint(
  schema: unknown,
  tokenizer: TextTokenizer,
  vocabSize: number,
  eosIds: readonly number[],
  wrap: Wrap = {},
): GrammarConstraint {
  checkTokenizer(tokenizer);
  return new GrammarConstraint(matcherFor(compileJsonSchema(schema, wrap), tokenizer, vocabSize, eosIds));
}

export function engineConstraint(engine: Engine, schema: unknown, wrap: Wrap = {}): GrammarConstraint {
  return jsonSchemaConstraint(schema, engine.tokenizer, engine.info.vocabSize, engine.info.eosTokenIds, wrap);
}

export function gbnfConstraint(
  grammar: string,
  tokenizer: TextTokenizer,
  vocabSize: number,
  eosIds: readonly number[],
  wrap: Wrap = {},
): GrammarConstraint {
  checkTokenizer(tokenizer);
  return new GrammarConstraint(matcherFor(compileGbnf(grammar, wrap), tokenizer, vocabSize, eosIds));
}

/** The per-request state: where the text so far leaves the automaton. */
export class GrammarConstraint implements TokenConstraint {
  private cfg: Config;
  private dead = false;

  constructor(private readonly matcher: Matcher) {
    this.cfg = matcher.initial();
  }

  allowed(): Uint32Array {
    U.maybeReset();
    if (this.dead) return this.eosOnly();
    this.cfg = U.refresh(this.cfg);
    return this.matcher.mask(this.cfg);
  }

  accept(token: number): void {
    if (this.dead) return;
    U.maybeReset();
    this.cfg = U.refresh(this.cfg);
    const next = this.matcher.advance(this.cfg, token);
    if (next) {
      this.cfg = next;
      return;
    }
    // Only a sampler that ignored the mask gets here; end the text rather than throw.
    this.dead = true;
    console.warn(`structured output: token ${token} was not allowed; ending the document`);
  }

  /** Whether the text so far is a complete document (EOS allowed). */
  get complete(): boolean {
    return !this.dead && this.cfg.exit;
  }

  private eosOnly(): Uint32Array {
    return this.matcher.eosMask();
  }
}
