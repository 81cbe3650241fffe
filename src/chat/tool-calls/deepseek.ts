// DeepSeek tool calls ("deepseek"): V3/R1 and V3.1 write their own special tokens around
// each call, a section of calls wrapped in calls-begin/calls-end:
//   V3/R1: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{...}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>
//   V3.1:  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{...}<｜tool▁call▁end｜><｜tool▁calls▁end｜>
// A lone call without the section tokens is read as well.
import { between, endAfter, findLiteral } from './markers.js';
import { tryParseJson } from './json-scan.js';
import type { ParsedToolCall, ToolCallFormat } from './types.js';

const DS_CALLS_BEGIN = '<｜tool▁calls▁begin｜>';
const DS_CALLS_END = '<｜tool▁calls▁end｜>';
const DS_CALL_BEGIN = '<｜tool▁call▁begin｜>';
const DS_CALL_END = '<｜tool▁call▁end｜>';
const DS_SEP = '<｜tool▁sep｜>';

function deepseekCall(body: string): ParsedToolCall | undefined {
  const sep = body.indexOf(DS_SEP);
  if (sep < 0) return undefined;
  const head = body.slice(0, sep).trim();
  const rest = body.slice(sep + DS_SEP.length);
  // V3/R1: "function<sep>NAME\n```json\n{...}\n```"; V3.1: "NAME<sep>{...}".
  const fenced = /^([^\n]+)\n```(?:json)?\s*\n?([\s\S]*?)\s*```\s*$/.exec(rest);
  const [name, args] = head === 'function' && fenced ? [fenced[1]!.trim(), fenced[2]!] : [head, rest.trim()];
  const value = tryParseJson(args);
  if (!name || typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  return { name, arguments: args };
}

export const deepseek: ToolCallFormat = {
  name: 'deepseek',
  preservedTokens: [DS_CALLS_BEGIN, DS_CALLS_END, DS_CALL_BEGIN, DS_CALL_END, DS_SEP],
  findStart: (text, ctx) => findLiteral(text, [DS_CALLS_BEGIN, DS_CALL_BEGIN], ctx.final),
  findEnd(region, final) {
    // A lone call (no section tokens) ends with its own end token.
    if (!region.startsWith(DS_CALLS_BEGIN)) return endAfter(region, DS_CALL_END, final);
    return endAfter(region, DS_CALLS_END, final);
  },
  parseRegion(region) {
    const calls: ParsedToolCall[] = [];
    let rest = region.startsWith(DS_CALLS_BEGIN) ? between(region, DS_CALLS_BEGIN, DS_CALLS_END) : region;
    for (;;) {
      rest = rest.trimStart();
      if (rest === '') break;
      if (!rest.startsWith(DS_CALL_BEGIN)) return undefined;
      const end = rest.indexOf(DS_CALL_END);
      const body = rest.slice(DS_CALL_BEGIN.length, end < 0 ? undefined : end);
      const call = deepseekCall(body);
      if (!call) return undefined;
      calls.push(call);
      if (end < 0) break;
      rest = rest.slice(end + DS_CALL_END.length);
    }
    return calls.length > 0 ? calls : undefined;
  },
};
