// Structured output fields. response_format: {type: "json_schema", json_schema: {name,
// strict, schema}} becomes a grammar constraint (src/grammar); "text" or absent leaves
// generation free; "json_object" and anything else are 400s. llama-server's top-level
// json_schema (a schema) and grammar (GBNF text; "" is none) do the same on every
// completion route. At most one of the three may constrain a request. Schema problems are
// 400s that name the keyword or limit but never quote the schema; grammar problems are 400s
// that say the line and column.
import type { Engine } from '../engine/engine.js';
import type { TokenConstraint } from '../engine/types.js';
import { engineConstraint, gbnfConstraint, GrammarError, SchemaError, UnsupportedTokenizerError, type Wrap } from '../grammar/index.js';
import { badRequest } from './errors.js';

export interface StructuredOutputFields {
  response_format?: unknown;
  json_schema?: unknown;
  grammar?: string | null;
}

/** The fields of `body` that constrain its output, in the order above. */
function constrainingFields(body: StructuredOutputFields): string[] {
  const format = body.response_format;
  const plainText = typeof format === 'object' && format !== null && (format as { type?: unknown }).type === 'text';
  return [
    ...(format != null && !plainText ? ['response_format'] : []),
    ...(body.json_schema != null ? ['json_schema'] : []),
    ...(body.grammar ? ['grammar'] : []),
  ];
}

/** Whether the request constrains its output (anything but free text). */
export function constrainsOutput(body: StructuredOutputFields): boolean {
  return constrainingFields(body).length > 0;
}

/**
 * The constraint the request's structured-output fields ask for, or undefined for free
 * text; `prefix` as for responseFormatConstraint.
 */
export function structuredOutputConstraint(engine: Engine, body: StructuredOutputFields, prefix?: string): TokenConstraint | undefined {
  const fields = constrainingFields(body);
  if (fields.length > 1) {
    throw badRequest(`${fields.join(' and ')} cannot be combined: set one of response_format, json_schema and grammar`, null, { param: fields[1] });
  }
  const wrap: Wrap = prefix ? { prefix } : {};
  if (fields[0] === 'grammar') {
    try {
      return gbnfConstraint(body.grammar!, engine.tokenizer, engine.info.vocabSize, engine.info.eosTokenIds, wrap);
    } catch (err) {
      if (err instanceof GrammarError) throw badRequest(`grammar: ${err.message}`, 'invalid_grammar', { param: 'grammar' });
      if (err instanceof UnsupportedTokenizerError) throw badRequest(err.message, 'unsupported_tokenizer', { param: 'grammar' });
      throw err;
    }
  }
  if (fields[0] === 'json_schema') {
    const schema = body.json_schema;
    if (typeof schema !== 'boolean' && (typeof schema !== 'object' || Array.isArray(schema))) {
      throw badRequest('json_schema must be a JSON Schema object', null, { param: 'json_schema' });
    }
    try {
      return engineConstraint(engine, schema, wrap);
    } catch (err) {
      if (err instanceof SchemaError) throw badRequest(`json_schema: ${err.message}`, 'invalid_schema', { param: 'json_schema' });
      if (err instanceof UnsupportedTokenizerError) throw badRequest(err.message, 'unsupported_tokenizer', { param: 'json_schema' });
      throw err;
    }
  }
  return responseFormatConstraint(engine, body.response_format, prefix);
}

const PARAM = { param: 'response_format' };

/**
 * The constraint a chat or text completion's response_format asks for, or undefined for
 * free text. `prefix` is literal text the reply must start with before the document
 * (closing a reasoning block the prompt left open).
 */
function responseFormatConstraint(engine: Engine, format: unknown, prefix?: string): TokenConstraint | undefined {
  if (format == null) return undefined;
  if (typeof format !== 'object' || Array.isArray(format)) throw badRequest('response_format must be an object', null, PARAM);
  const { type } = format as { type?: unknown };
  if (type === 'text') return undefined;
  if (type === 'json_object') {
    throw badRequest('response_format type "json_object" is not supported; use "json_schema" with a schema', null, PARAM);
  }
  if (type !== 'json_schema') throw badRequest('response_format.type must be "text" or "json_schema"', null, PARAM);
  const spec = (format as { json_schema?: unknown }).json_schema;
  if (typeof spec !== 'object' || spec === null || Array.isArray(spec)) {
    throw badRequest('response_format.json_schema must be an object with a schema', null, PARAM);
  }
  const { schema } = spec as { schema?: unknown };
  if (schema === undefined) throw badRequest('response_format.json_schema.schema is required', null, PARAM);
  if (typeof schema !== 'boolean' && (typeof schema !== 'object' || schema === null || Array.isArray(schema))) {
    throw badRequest('response_format.json_schema.schema must be a JSON Schema object', null, PARAM);
  }
  try {
    return engineConstraint(engine, schema, prefix ? { prefix } : {});
  } catch (err) {
    if (err instanceof SchemaError) throw badRequest(`response_format.json_schema.schema: ${err.message}`, 'invalid_schema', PARAM);
    if (err instanceof UnsupportedTokenizerError) throw badRequest(err.message, 'unsupported_tokenizer', PARAM);
    throw err;
  }
}

/** The native /completion takes no response_format but the no-op {"type": "text"} (json_schema and grammar instead). */
export function rejectResponseFormat(format: unknown): void {
  if (format == null) return;
  if (typeof format === 'object' && !Array.isArray(format) && (format as { type?: unknown }).type === 'text' && Object.keys(format).length === 1) return;
  throw badRequest('response_format is not supported on /completion (only {"type": "text"}); use json_schema or grammar for constrained decoding', null, PARAM);
}
