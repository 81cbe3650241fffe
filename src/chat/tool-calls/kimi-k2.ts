// Moonshot Kimi K2 tool calls ("kimi_k2"): a section of calls, each "functions.NAME:INDEX"
// then JSON arguments.
//   <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>
import { between, endAfter, findLiteral, objectArguments } from './markers.js';
import type { ParsedToolCall, ToolCallFormat } from './types.js';

const SECTION_BEGIN = '<|tool_calls_section_begin|>';
const SECTION_END = '<|tool_calls_section_end|>';
const CALL_BEGIN = '<|tool_call_begin|>';
const CALL_END = '<|tool_call_end|>';
const ARGUMENT_BEGIN = '<|tool_call_argument_begin|>';

/** "functions.get_weather:0" → "get_weather". */
function nameOf(id: string): string {
  return id.trim().replace(/^functions\./, '').replace(/:\d+$/, '');
}

export const kimiK2: ToolCallFormat = {
  name: 'kimi_k2',
  preservedTokens: [SECTION_BEGIN, SECTION_END, CALL_BEGIN, CALL_END, ARGUMENT_BEGIN],
  findStart: (text, ctx) => findLiteral(text, [SECTION_BEGIN, CALL_BEGIN], ctx.final),
  findEnd: (region, final) => endAfter(region, region.startsWith(SECTION_BEGIN) ? SECTION_END : CALL_END, final),
  parseRegion(region) {
    let rest = region.startsWith(SECTION_BEGIN) ? between(region, SECTION_BEGIN, SECTION_END) : region;
    const calls: ParsedToolCall[] = [];
    for (;;) {
      rest = rest.trimStart();
      if (rest === '') break;
      if (!rest.startsWith(CALL_BEGIN)) return undefined;
      const end = rest.indexOf(CALL_END);
      const body = rest.slice(CALL_BEGIN.length, end < 0 ? undefined : end);
      const sep = body.indexOf(ARGUMENT_BEGIN);
      if (sep < 0) return undefined;
      const name = nameOf(body.slice(0, sep));
      const args = objectArguments(body.slice(sep + ARGUMENT_BEGIN.length));
      if (!name || !args) return undefined;
      calls.push({ name, arguments: args });
      if (end < 0) break;
      rest = rest.slice(end + CALL_END.length);
    }
    return calls.length > 0 ? calls : undefined;
  },
};
