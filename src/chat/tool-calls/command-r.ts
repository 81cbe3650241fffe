// Cohere Command R family tool calls ("command_r").
// R7B:  <|START_ACTION|>[{"tool_call_id": "0", "tool_name": "f", "parameters": {...}}]<|END_ACTION|>
//       with the answer itself wrapped in <|START_RESPONSE|> … <|END_RESPONSE|>.
// R/R+: Action: ```json\n[{"tool_name": "f", "parameters": {...}}]\n```
// ReAct-style: Action: f\nAction Input: {...}
// "Action:" only counts at the start of a line, so prose that mentions it is left alone.
import { callsFromJson } from './json-call.js';
import { skipWs } from './json-scan.js';
import { between, earliest, endAfter, endAfterJson, findAtLineStart, findLiteral, objectArguments } from './markers.js';
import { WRAPPER_ONLY, type ParsedToolCall, type ToolCallFormat } from './types.js';

const START_ACTION = '<|START_ACTION|>';
const END_ACTION = '<|END_ACTION|>';
const START_RESPONSE = '<|START_RESPONSE|>';
const END_RESPONSE = '<|END_RESPONSE|>';
const ACTION = 'Action:';
const ACTION_INPUT = 'Action Input:';
const FENCE = '```';
/** A ReAct name line longer than this is prose, not a call. */
const MAX_REACT_HEAD = 300;

function actionEnd(region: string, final: boolean): number | undefined {
  let i = ACTION.length;
  while (region[i] === ' ' || region[i] === '\t') i++;
  const rest = region.slice(i);
  if (rest.length < FENCE.length && FENCE.startsWith(rest) && !final) return undefined;
  if (rest.startsWith(FENCE)) return endAfter(region, FENCE, final, i + FENCE.length);
  const input = region.indexOf(ACTION_INPUT);
  if (input >= 0) return endAfterJson(region, input + ACTION_INPUT.length, final);
  if (final || rest.length > MAX_REACT_HEAD) return region.length;
  return undefined;
}

function parseAction(region: string): ParsedToolCall[] | undefined {
  const rest = region.slice(ACTION.length);
  const fenced = /^[ \t]*```(?:json)?\s*([\s\S]*?)\s*```\s*$/.exec(rest);
  if (fenced) {
    const body = fenced[1]!;
    return callsFromJson(body, skipWs(body, 0), ['parameters', 'arguments']);
  }
  const react = /^[ \t]*([\w.-]+)[ \t]*\nAction Input:([\s\S]*)$/.exec(rest);
  const args = react && objectArguments(react[2]!);
  return react && args ? [{ name: react[1]!, arguments: args }] : undefined;
}

export const commandR: ToolCallFormat = {
  name: 'command_r',
  preservedTokens: [START_ACTION, END_ACTION, START_RESPONSE, END_RESPONSE],
  findStart: (text, ctx) =>
    earliest(findLiteral(text, [START_ACTION, START_RESPONSE, END_RESPONSE], ctx.final), findAtLineStart(text, ACTION, ctx.atLineStart, ctx.final)),
  findEnd(region, final) {
    if (region.startsWith(START_RESPONSE)) return START_RESPONSE.length;
    if (region.startsWith(END_RESPONSE)) return END_RESPONSE.length;
    if (region.startsWith(START_ACTION)) return endAfter(region, END_ACTION, final);
    return actionEnd(region, final);
  },
  parseRegion(region) {
    if (region === START_RESPONSE || region === END_RESPONSE) return WRAPPER_ONLY;
    if (region.startsWith(START_ACTION)) {
      const body = between(region, START_ACTION, END_ACTION);
      return callsFromJson(body, skipWs(body, 0), ['parameters', 'arguments']);
    }
    return parseAction(region);
  },
};
