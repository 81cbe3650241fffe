// MeetKai Functionary v3.1 tool calls ("functionary_v3_1"):
//   <function=get_weather>{"city": "Paris"}</function>
// and <|python_tag|>CODE for its built-in python tool (to the end of the output).
import { endAfter, findLiteral, objectArguments } from './markers.js';
import type { ToolCallFormat } from './types.js';

const FUNCTION = '<function=';
const FUNCTION_END = '</function>';
const PYTHON_TAG = '<|python_tag|>';

export const functionaryV31: ToolCallFormat = {
  name: 'functionary_v3_1',
  preservedTokens: [PYTHON_TAG],
  findStart: (text, ctx) => findLiteral(text, [FUNCTION, PYTHON_TAG], ctx.final),
  findEnd: (region, final) => (region.startsWith(PYTHON_TAG) ? (final ? region.length : undefined) : endAfter(region, FUNCTION_END, final)),
  parseRegion(region) {
    if (region.startsWith(PYTHON_TAG)) {
      const code = region.slice(PYTHON_TAG.length).trim();
      return code ? [{ name: 'python', arguments: JSON.stringify({ code }) }] : undefined;
    }
    const m = /^<function=([^>\s]+)>([\s\S]*?)(?:<\/function>)?$/.exec(region);
    const args = m && objectArguments(m[2]!);
    return m && args ? [{ name: m[1]!, arguments: args }] : undefined;
  },
};
