// Meta Llama 3.x. The 3.1-3.3 templates ask for custom tools as a bare JSON object at the
// start of the reply, several separated by ";":
//   {"name": "get_weather", "parameters": {"city": "Paris"}}
// and built-in tools after <|python_tag|>: JSON, brave_search.call(query="…"), or code
// for the interpreter (to the end of the reply).
// Generic JSON is the fallback for templates that take tools in no format known here:
//   {"name": "f", "arguments": {...}}, a list of those, or {"tool_call(s)": …}.
import { callsFromJson, DEFAULT_ARG_KEYS, JsonCallsStreamer } from './json-call.js';
import { scanJsonValue, skipWs, tryParseJson } from './json-scan.js';
import { earliest, endAfterJson, findBareJsonCall, findLiteral } from './markers.js';
import { parsePythonCalls } from './pythonic.js';
import type { ParsedToolCall, StartMatch, ToolCallFormat } from './types.js';

const PYTHON_TAG = '<|python_tag|>';
const CALL_KEYS = ['name', 'type', 'function'];

/** One JSON value and nothing after it (whitespace aside). */
function wholeJson(body: string, argKeys: readonly string[]): ParsedToolCall[] | undefined {
  const start = skipWs(body, 0);
  const scan = scanJsonValue(body, start, true);
  if (scan.status !== 'complete' || skipWs(body, scan.end) !== body.length) return undefined;
  return callsFromJson(body, start, argKeys);
}

export const llama3: ToolCallFormat = {
  name: 'llama3_json',
  preservedTokens: [PYTHON_TAG],
  findStart(text, ctx) {
    const tag = findLiteral(text, [PYTHON_TAG], ctx.final);
    const bare: StartMatch = ctx.atBoundary ? findBareJsonCall(text, CALL_KEYS, ctx.final) : { kind: 'none' };
    return earliest(bare, tag);
  },
  findEnd(region, final) {
    if (!region.startsWith(PYTHON_TAG)) return endAfterJson(region, 0, final);
    const i = skipWs(region, PYTHON_TAG.length);
    if (i >= region.length) return final ? region.length : undefined;
    // JSON after the tag ends with it; code or a built-in call runs to the end of the reply.
    if (region[i] === '{' || region[i] === '[') return endAfterJson(region, i, final);
    return final ? region.length : undefined;
  },
  parseRegion(region) {
    if (!region.startsWith(PYTHON_TAG)) return wholeJson(region, DEFAULT_ARG_KEYS);
    const body = region.slice(PYTHON_TAG.length).trim();
    if (body === '') return undefined;
    if (body.startsWith('{') || body.startsWith('[')) return wholeJson(body, DEFAULT_ARG_KEYS);
    // brave_search.call(query="…") and the other built-ins.
    const builtin = /^([A-Za-z_]\w*)\.call\(/.test(body) ? parsePythonCalls(`[${body.replace(/\.call\(/, '(')}]`) : undefined;
    if (builtin) return builtin;
    return [{ name: 'python', arguments: JSON.stringify({ code: body }) }];
  },
  createStreamer: () => new JsonCallsStreamer((region) => (region.startsWith(PYTHON_TAG) ? PYTHON_TAG.length : 0), DEFAULT_ARG_KEYS),
  separators: ';',
  jsonWire: { prefix: '', suffix: '', argumentsKey: 'parameters' },
};

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
