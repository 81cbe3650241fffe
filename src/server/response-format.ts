// The response_format field: {type: "json_schema", json_schema: {name, strict, schema}}
// becomes a grammar constraint (src/grammar); "text" or absent leaves generation free;
// "json_object" and anything else are 400s. Schema problems are 400s that name the
// keyword or limit but never quote the schema.
import type { Engine } from '../engine/engine.js';
import type { TokenConstraint } from '../engine/types.js';
import { engineConstraint, SchemaError, UnsupportedTokenizerError } from '../grammar/index.js';
import { badRequest } from './errors.js';

const PARAM = { param: 'response_format' };

/**
 * The constraint a chat or text completion's response_format asks for, or undefined for
 * free text. `prefix` is literal text the reply must start with before the document
 * (closing a reasoning block the prompt left open).
 */
export function responseFormatConstraint(engine: Engine, format: unknown, prefix?: string): TokenConstraint | undefined {
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

/** The native /completion takes no structured output: only the no-op {"type": "text"}. */
export function rejectResponseFormat(format: unknown): void {
  if (format == null) return;
  if (typeof format === 'object' && !Array.isArray(format) && (format as { type?: unknown }).type === 'text' && Object.keys(format).length === 1) return;
  throw badRequest('response_format is not supported on /completion (only {"type": "text"}); use /v1/chat/completions or /v1/completions for JSON-schema constrained decoding', null, PARAM);
}
