// Mistral Nemo tool calls ("mistral_nemo"): Nemo and Ministral write a JSON list after
// the control token,
//   [TOOL_CALLS][{"name": "f", "arguments": {...}, "id": "abc123XYZ"}]
// The markup is read exactly as "mistral" reads it (the one-call-per-token shape,
// [TOOL_CALLS]f[ARGS]{...}, as well); what differs is the forced-choice wire, which is
// this JSON list.
import { mistral, TOOL_CALLS } from './mistral.js';
import type { ToolCallFormat } from './types.js';

export const mistralNemo: ToolCallFormat = {
  ...mistral,
  name: 'mistral_nemo',
  jsonWire: { prefix: `${TOOL_CALLS}[`, suffix: ']', argumentsKey: 'arguments' },
};
