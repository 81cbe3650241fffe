// Hermes tool calls ("hermes"), as Hermes and Qwen2.5/Qwen3 write them: one JSON call
// object (or a list of them) between tags,
//   <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
import { callsFromJson, JsonCallsStreamer } from './json-call.js';
import { between, endAfter, findLiteral } from './markers.js';
import { scanJsonValue, skipWs } from './json-scan.js';
import type { ToolCallFormat } from './types.js';

const OPEN = '<tool_call>';
const CLOSE = '</tool_call>';

export const hermes: ToolCallFormat = {
  name: 'hermes',
  preservedTokens: [OPEN, CLOSE],
  findStart: (text, ctx) => findLiteral(text, [OPEN], ctx.final),
  findEnd: (region, final) => endAfter(region, CLOSE, final),
  parseRegion(region) {
    const body = between(region, OPEN, CLOSE);
    const start = skipWs(body, 0);
    // Exactly one JSON value between the tags; trailing text means it is not a call.
    const scan = scanJsonValue(body, start, true);
    if (scan.status !== 'complete' || skipWs(body, scan.end) !== body.length) return undefined;
    return callsFromJson(body, start);
  },
  createStreamer: () => new JsonCallsStreamer(() => OPEN.length),
  jsonWire: { prefix: `${OPEN}\n`, suffix: `\n${CLOSE}`, argumentsKey: 'arguments' },
};
