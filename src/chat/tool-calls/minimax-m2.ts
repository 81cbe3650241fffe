// MiniMax M2 tool calls ("minimax_m2"): XML invocations, usually inside a section tag,
//   <minimax:tool_call>\n<invoke name="f">\n<parameter name="city">Paris</parameter>\n</invoke>\n</minimax:tool_call>
// Values are raw text, coerced against the tool schema.
import { INVOKE, INVOKE_END, parseInvokes } from './invoke-xml.js';
import { endAfter, findLiteral } from './markers.js';
import type { ToolCallFormat } from './types.js';

const M2_OPEN = '<minimax:tool_call>';
const M2_CLOSE = '</minimax:tool_call>';
const M2_PARAM = /<parameter name=["']?([^"'>]+)["']?\s*>([\s\S]*?)<\/parameter>/g;

export const minimaxM2: ToolCallFormat = {
  name: 'minimax_m2',
  preservedTokens: [M2_OPEN, M2_CLOSE],
  findStart: (text, ctx) => findLiteral(text, [M2_OPEN, INVOKE], ctx.final),
  findEnd: (region, final) => endAfter(region, region.startsWith(M2_OPEN) ? M2_CLOSE : INVOKE_END, final),
  parseRegion(region, tools) {
    let body = region;
    if (body.startsWith(M2_OPEN)) body = body.slice(M2_OPEN.length).replace(new RegExp(`${M2_CLOSE}$`), '');
    return parseInvokes(body, tools, M2_PARAM);
  },
};
