// Compiles a forced tool call's document (wrapper text, call JSON, closing text) into a
// token constraint with the structured-output grammar engine.
import type { WrappedJsonDocument } from '../chat/tool-constraint.js';
import type { Engine } from '../engine/engine.js';
import type { TokenConstraint } from '../engine/types.js';
import { engineConstraint, SchemaError, UnsupportedTokenizerError } from '../grammar/index.js';

/**
 * The constraint, or undefined when the grammar engine cannot express the tools' schemas
 * or walk this tokenizer: the request then relies on the instruction and the narrowed tool
 * list alone, as the REST reference allows for such tools (and says so at warn).
 */
export function compileForcedCall(document: WrappedJsonDocument, engine: Engine, warn: (message: string) => void): TokenConstraint | undefined {
  try {
    return engineConstraint(engine, document.schema, { prefix: document.prefix, suffix: document.suffix });
  } catch (err) {
    if (err instanceof SchemaError || err instanceof UnsupportedTokenizerError) {
      warn(`forced tool_choice is not grammar-constrained (${err.message}); relying on the instruction`);
      return undefined;
    }
    throw err;
  }
}
