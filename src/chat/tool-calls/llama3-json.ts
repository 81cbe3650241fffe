// Meta Llama 3.x tool calls ("llama3_json"). The 3.1-3.3 templates ask for custom tools
// as a bare JSON object at the start of the reply, several separated by ";":
//   {"name": "get_weather", "parameters": {"city": "Paris"}}
// and built-in tools after <|python_tag|>: JSON, brave_search.call(query="…"), or code
// for the interpreter (to the end of the reply).
import { DEFAULT_ARG_KEYS, JsonCallsStreamer, wholeJson } from './json-call.js';
import { skipWs } from './json-scan.js';
import { earliest, endAfterJson, findBareJsonCall, findLiteral } from './markers.js';
import { parsePythonCalls } from './python-calls.js';
import type { StartMatch, ToolCallFormat } from './types.js';

const PYTHON_TAG = '<|python_tag|>';
const CALL_KEYS = ['name', 'type', 'function'];

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
