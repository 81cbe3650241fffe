// MiniMax M3 tool calls ("minimax_m3"): M2's XML invocations with every tag prefixed by
// the namespace token "]<]minimax[>[", and parameters named by their tag:
//   ]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="f">\n]<]minimax[>[<city>Paris]<]minimax[>[</city>\n]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>
// Values are raw text, coerced against the tool schema.
import { INVOKE_END, parseInvokes } from './invoke-xml.js';
import { endAfter, findLiteral } from './markers.js';
import type { ToolCallFormat } from './types.js';

export const NS = ']<]minimax[>[';
const M3_OPEN = `${NS}<tool_call>`;
const M3_CLOSE = `${NS}</tool_call>`;
/** A parameter named by its tag: <city>Paris</city>. */
const M3_PARAM = /<([A-Za-z_][\w.-]*)>([\s\S]*?)<\/\1>/g;

export const minimaxM3: ToolCallFormat = {
  name: 'minimax_m3',
  preservedTokens: [NS],
  findStart: (text, ctx) => findLiteral(text, [M3_OPEN, `${NS}<invoke`], ctx.final),
  findEnd: (region, final) => endAfter(region, region.startsWith(M3_OPEN) ? M3_CLOSE : `${NS}${INVOKE_END}`, final),
  parseRegion(region, tools) {
    // The namespace token carries no meaning inside a call; without it this is plain XML.
    let body = region.split(NS).join('');
    if (body.startsWith('<tool_call>')) body = body.slice('<tool_call>'.length).replace(/<\/tool_call>$/, '');
    return parseInvokes(body, tools, M3_PARAM);
  },
};
