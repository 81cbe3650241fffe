// MiniMax. M2 writes XML invocations, usually inside a section tag:
//   <minimax:tool_call>\n<invoke name="f">\n<parameter name="city">Paris</parameter>\n</invoke>\n</minimax:tool_call>
// M3 prefixes every tag with the namespace token "]<]minimax[>[" and names parameters
// by their tag:
//   ]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="f">\n]<]minimax[>[<city>Paris]<]minimax[>[</city>\n]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>
// Values are raw text, coerced against the tool schema.
import { coerceValue, paramSchema, serializeArguments } from './coerce.js';
import { endAfter, findLiteral } from './markers.js';
import type { ParsedToolCall, ToolCallFormat, ToolDefinition } from './types.js';

const M2_OPEN = '<minimax:tool_call>';
const M2_CLOSE = '</minimax:tool_call>';
const INVOKE = '<invoke name=';
const INVOKE_END = '</invoke>';

function trimValue(raw: string): string {
  return raw.replace(/^\n/, '').replace(/\n$/, '');
}

/** The <invoke> elements of `body`; undefined if anything else is in it. */
function parseInvokes(body: string, tools: readonly ToolDefinition[], params: RegExp): ParsedToolCall[] | undefined {
  const calls: ParsedToolCall[] = [];
  const invoke = /<invoke name=(?:"([^"]*)"|'([^']*)'|([^\s>]+))\s*>([\s\S]*?)(?:<\/invoke>|$)/g;
  let last = 0;
  for (let m = invoke.exec(body); m; m = invoke.exec(body)) {
    if (body.slice(last, m.index).trim() !== '') return undefined;
    last = invoke.lastIndex;
    const name = (m[1] ?? m[2] ?? m[3] ?? '').trim();
    if (!name) return undefined;
    const entries: Array<[string, unknown]> = [];
    const inner = m[4]!;
    let rest = inner;
    params.lastIndex = 0;
    for (let p = params.exec(inner); p; p = params.exec(inner)) {
      const key = p[1]!.trim();
      entries.push([key, coerceValue(trimValue(p[2]!), paramSchema(tools, name, key))]);
      rest = rest.replace(p[0], '');
    }
    if (rest.trim() !== '') return undefined;
    calls.push({ name, arguments: serializeArguments(entries) });
  }
  if (body.slice(last).trim() !== '') return undefined;
  return calls.length > 0 ? calls : undefined;
}

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
