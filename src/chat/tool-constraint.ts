// A forced tool_choice on a format whose calls are a JSON object in a fixed wrapper
// (Hermes/Qwen <tool_call>, Mistral Nemo [TOOL_CALLS][…], Llama 3 JSON) is enforced with
// the structured-output grammar: the reply must be the wrapper's opening text, a JSON
// object naming a declared function with arguments matching its parameters, and the
// wrapper's closing text. This module states that document; src/grammar compiles it.
import type { ForcedChoice } from './chat-request.js';
import type { ToolCallFormat, ToolDefinition } from './tool-calls/types.js';

/** Literal `prefix`, then one JSON value matching `schema`, then literal `suffix`, then the end. */
export interface WrappedJsonDocument {
  prefix: string;
  schema: Record<string, unknown>;
  suffix: string;
}

/** Parameters a tool declares; a tool without any takes an object of anything. */
function parametersOf(tool: ToolDefinition): Record<string, unknown> {
  return tool.function.parameters ?? { type: 'object' };
}

/** The call object a tool admits: {"name": NAME, ARGS_KEY: PARAMETERS}, nothing else. */
function callSchema(tool: ToolDefinition, argumentsKey: string): Record<string, unknown> {
  return {
    type: 'object',
    properties: { name: { const: tool.function.name }, [argumentsKey]: parametersOf(tool) },
    required: ['name', argumentsKey],
    additionalProperties: false,
  };
}

/**
 * The document a forced choice must produce, or undefined when the format has no JSON wire
 * shape (the instruction and narrowed tool list are then all there is). `tools` is the
 * already narrowed list: one tool for a named choice, every declared one for "required".
 */
export function forcedCallDocument(format: ToolCallFormat | undefined, tools: readonly ToolDefinition[], forced: ForcedChoice | undefined): WrappedJsonDocument | undefined {
  const wire = format?.jsonWire;
  if (!wire || !forced || tools.length === 0) return undefined;
  const alternatives = tools.map((t) => callSchema(t, wire.argumentsKey));
  return { prefix: wire.prefix, schema: alternatives.length === 1 ? alternatives[0]! : { anyOf: alternatives }, suffix: wire.suffix };
}
