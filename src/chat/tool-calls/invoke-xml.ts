// MiniMax <invoke> elements, the XML shared by MiniMax M2 ("minimax_m2") and M3
// ("minimax_m3"), which differ in how a parameter is tagged:
//   <invoke name="f">\n<parameter name="city">Paris</parameter>\n</invoke>    (M2)
//   <invoke name="f">\n<city>Paris</city>\n</invoke>                            (M3)
// Values are raw text, coerced against the tool schema.
import { coerceValue, paramSchema, serializeArguments } from './coerce.js';
import type { ParsedToolCall, ToolDefinition } from './types.js';

export const INVOKE = '<invoke name=';
export const INVOKE_END = '</invoke>';

function trimValue(raw: string): string {
  return raw.replace(/^\n/, '').replace(/\n$/, '');
}

/** The <invoke> elements of `body`, parameters matched by `params`; undefined if anything else is in it. */
export function parseInvokes(body: string, tools: readonly ToolDefinition[], params: RegExp): ParsedToolCall[] | undefined {
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
