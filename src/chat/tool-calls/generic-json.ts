// Generic JSON tool calls ("generic_json"), the fallback for templates that take tools in
// no format known here: bare JSON at the start of the reply (or after a call),
//   {"name": "f", "arguments": {...}}, a list of those, or {"tool_call(s)": …}
// several separated by "," or ";".
import { callsFromJson, DEFAULT_ARG_KEYS, wholeJson } from './json-call.js';
import { tryParseJson } from './json-scan.js';
import { endAfterJson, findBareJsonCall } from './markers.js';
import type { ParsedToolCall, ToolCallFormat } from './types.js';

/** {"tool_call": {...}} and {"tool_calls": [...]}: unwrap to the calls. */
function unwrapped(region: string): ParsedToolCall[] | undefined {
  const value = tryParseJson(region.trim());
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  const inner = (value as Record<string, unknown>).tool_calls ?? (value as Record<string, unknown>).tool_call;
  if (inner === undefined) return undefined;
  const text = JSON.stringify(inner);
  return callsFromJson(text, 0, DEFAULT_ARG_KEYS);
}

export const genericJson: ToolCallFormat = {
  name: 'generic_json',
  preservedTokens: [],
  findStart: (text, ctx) => (ctx.atBoundary ? findBareJsonCall(text, ['name', 'tool_call', 'tool_calls', 'function'], ctx.final, true) : { kind: 'none' }),
  findEnd: (region, final) => endAfterJson(region, 0, final),
  parseRegion: (region) => unwrapped(region) ?? wholeJson(region, DEFAULT_ARG_KEYS),
  separators: ',;',
};
