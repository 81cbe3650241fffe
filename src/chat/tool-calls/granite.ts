// IBM Granite 3.x tool calls ("granite"). Calls are a JSON list after <|tool_call|>,
//   <|tool_call|>[{"name": "f", "arguments": {...}}]
// or (3.3 with its thinking layout) inside <tool_call> … </tool_call>, the answer itself
// wrapped in <response> … </response>, which is dropped from content.
import { callsFromJson } from './json-call.js';
import { scanJsonValue, skipWs } from './json-scan.js';
import { between, endAfter, endAfterJson, findLiteral } from './markers.js';
import { WRAPPER_ONLY, type ToolCallFormat } from './types.js';

const TOOL_CALL_TOKEN = '<|tool_call|>';
const OPEN = '<tool_call>';
const CLOSE = '</tool_call>';
const RESPONSE = '<response>';
const RESPONSE_END = '</response>';

export const granite: ToolCallFormat = {
  name: 'granite',
  preservedTokens: [TOOL_CALL_TOKEN, RESPONSE, RESPONSE_END],
  findStart: (text, ctx) => findLiteral(text, [TOOL_CALL_TOKEN, OPEN, RESPONSE, RESPONSE_END], ctx.final),
  findEnd(region, final) {
    if (region.startsWith(RESPONSE)) return RESPONSE.length;
    if (region.startsWith(RESPONSE_END)) return RESPONSE_END.length;
    if (region.startsWith(OPEN)) return endAfter(region, CLOSE, final);
    return endAfterJson(region, TOOL_CALL_TOKEN.length, final);
  },
  parseRegion(region) {
    if (region === RESPONSE || region === RESPONSE_END) return WRAPPER_ONLY;
    const body = region.startsWith(OPEN) ? between(region, OPEN, CLOSE) : region.slice(TOOL_CALL_TOKEN.length);
    const start = skipWs(body, 0);
    const scan = scanJsonValue(body, start, true);
    if (scan.status !== 'complete' || skipWs(body, scan.end) !== body.length) return undefined;
    return callsFromJson(body, start);
  },
};
