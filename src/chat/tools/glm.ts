// Key/value tag pairs after the function name: GLM-4.5 and later (glm4_moe, glm4_moe_lite,
// glm_moe_dsa, glm4v_moe; 4.7 drops the newlines) and Meituan LongCat-Flash.
//   <tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>
//   <longcat_tool_call>get_weather\n<longcat_arg_key>city</longcat_arg_key>\n<longcat_arg_value>Paris</longcat_arg_value>\n</longcat_tool_call>
// Values are raw text, coerced against the tool schema. LongCat also writes a JSON object
// ({"name", "arguments"}) in the same tags, which is read as well.
import { coerceValue, paramSchema, serializeArguments } from './coerce.js';
import { between } from './hermes.js';
import { callsFromJson } from './json-call.js';
import { endAfter, findLiteral } from './markers.js';
import type { ParsedToolCall, ToolCallFormat, ToolDefinition } from './types.js';

function parsePairs(body: string, keyTag: string, valueTag: string, tools: readonly ToolDefinition[]): ParsedToolCall | undefined {
  const first = body.indexOf(`<${keyTag}>`);
  const name = (first < 0 ? body : body.slice(0, first)).trim();
  if (!name || /\s/.test(name)) return undefined;
  const pair = new RegExp(`<${keyTag}>([\\s\\S]*?)</${keyTag}>\\s*<${valueTag}>([\\s\\S]*?)</${valueTag}>`, 'g');
  const entries: Array<[string, unknown]> = [];
  let rest = first < 0 ? '' : body.slice(first);
  for (const m of (first < 0 ? '' : body.slice(first)).matchAll(pair)) {
    const key = m[1]!.trim();
    entries.push([key, coerceValue(m[2]!, paramSchema(tools, name, key))]);
    rest = rest.replace(m[0], '');
  }
  if (rest.trim() !== '') return undefined;
  return { name, arguments: serializeArguments(entries) };
}

function pairFormat(name: string, open: string, close: string, keyTag: string, valueTag: string): ToolCallFormat {
  return {
    name,
    preservedTokens: [open, close, `<${keyTag}>`, `</${keyTag}>`, `<${valueTag}>`, `</${valueTag}>`],
    findStart: (text, ctx) => findLiteral(text, [open], ctx.final),
    findEnd: (region, final) => endAfter(region, close, final),
    parseRegion(region, tools) {
      const body = between(region, open, close);
      if (body.trimStart().startsWith('{')) return callsFromJson(body, 0);
      const call = parsePairs(body, keyTag, valueTag, tools);
      return call ? [call] : undefined;
    },
  };
}

export const glm47 = pairFormat('glm47', '<tool_call>', '</tool_call>', 'arg_key', 'arg_value');
export const longcat = pairFormat('longcat', '<longcat_tool_call>', '</longcat_tool_call>', 'longcat_arg_key', 'longcat_arg_value');
