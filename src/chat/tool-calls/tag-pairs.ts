// Key/value tag pairs after the function name, the shape shared by GLM 4.7 ("glm47") and
// LongCat ("longcat"), each with its own tag names:
//   <OPEN>NAME<KEY>city</KEY><VALUE>Paris</VALUE>...</CLOSE>
// Values are raw text, coerced against the tool schema. A JSON object ({"name",
// "arguments"}) in the same tags is read as well (LongCat writes it).
import { coerceValue, paramSchema, serializeArguments } from './coerce.js';
import { callsFromJson } from './json-call.js';
import { between, endAfter, findLiteral } from './markers.js';
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

/** A key/value-pair format named `name`, its call wrapped in `open` … `close`. */
export function pairFormat(name: string, open: string, close: string, keyTag: string, valueTag: string): ToolCallFormat {
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
