// Mistral tool calls ("mistral"): Ministral 2410+, Mistral Small 3, Magistral and
// Devstral write one call per token,
//   [TOOL_CALLS]f[ARGS]{...}        (some versions: [TOOL_CALLS]f[CALL_ID]abc123XYZ[ARGS]{...})
// and Nemo's JSON list after the control token is read as well:
//   [TOOL_CALLS][{"name": "f", "arguments": {...}, "id": "abc123XYZ"}]
// mistral_nemo (mistral-nemo.ts) reads the same markup; the two differ in the
// forced-choice wire and in detection.
import { randomInt } from 'node:crypto';
import { callsFromJson, JsonCallsStreamer, RawArgumentsStreamer } from './json-call.js';
import { scanJsonValue, skipWs, tryParseJson } from './json-scan.js';
import { endAfterJson, findLiteral } from './markers.js';
import type { CallEvent, CallStreamer, ParsedToolCall, ToolCallFormat } from './types.js';

/** The control token that opens every call region. */
export const TOOL_CALLS = '[TOOL_CALLS]';
const ARGS = '[ARGS]';
const CALL_ID = '[CALL_ID]';
/** A name (and call id) longer than this, or with a line break, is not a call. */
const MAX_HEAD = 256;

function isJsonForm(region: string): boolean | undefined {
  const i = skipWs(region, TOOL_CALLS.length);
  if (i >= region.length) return undefined;
  return region[i] === '[' || region[i] === '{';
}

function findEnd(region: string, final: boolean): number | undefined {
  const json = isJsonForm(region);
  if (json === undefined) return final ? region.length : undefined;
  if (json) return endAfterJson(region, TOOL_CALLS.length, final);
  const args = region.indexOf(ARGS);
  if (args < 0) {
    const head = region.slice(TOOL_CALLS.length);
    if (final || head.includes('\n') || head.length > MAX_HEAD) return region.length;
    return undefined;
  }
  return endAfterJson(region, args + ARGS.length, final);
}

/** "NAME[ARGS]" or "NAME[CALL_ID]ID[ARGS]": the name, and where the arguments start. */
function bracketHead(region: string): { name: string; argsStart?: number } | undefined {
  const args = region.indexOf(ARGS);
  if (args < 0) return undefined;
  const head = region.slice(TOOL_CALLS.length, args);
  const name = (head.includes(CALL_ID) ? head.slice(0, head.indexOf(CALL_ID)) : head).trim();
  return name && !/\s/.test(name) ? { name, argsStart: args + ARGS.length } : undefined;
}

function parseRegion(region: string): ParsedToolCall[] | undefined {
  if (isJsonForm(region)) {
    const scan = scanJsonValue(region, TOOL_CALLS.length, true);
    if (scan.status !== 'complete') return undefined;
    return callsFromJson(region, TOOL_CALLS.length, ['arguments']);
  }
  const head = bracketHead(region);
  if (!head) return undefined;
  const start = skipWs(region, head.argsStart!);
  const scan = scanJsonValue(region, start, true);
  if (scan.status !== 'complete' || region.slice(scan.end).trim() !== '') return undefined;
  const raw = region.slice(start, scan.end);
  const value = tryParseJson(raw);
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  return [{ name: head.name, arguments: raw }];
}

/** Picks the JSON-list or bracketed streamer once the first character tells which. */
class MistralStreamer implements CallStreamer {
  private inner: CallStreamer | undefined;

  update(region: string): CallEvent[] {
    if (!this.inner) {
      const json = isJsonForm(region);
      if (json === undefined) return [];
      this.inner = json ? new JsonCallsStreamer(() => TOOL_CALLS.length, ['arguments']) : new RawArgumentsStreamer(bracketHead);
    }
    return this.inner.update(region);
  }
}

const ALNUM = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';

/** Mistral templates reject tool_call_ids that are not nine alphanumerics. */
function mistralId(): string {
  let id = '';
  for (let i = 0; i < 9; i++) id += ALNUM[randomInt(ALNUM.length)];
  return id;
}

export const mistral: ToolCallFormat = {
  name: 'mistral',
  preservedTokens: [TOOL_CALLS, ARGS, CALL_ID],
  findStart: (text, ctx) => findLiteral(text, [TOOL_CALLS], ctx.final),
  findEnd,
  parseRegion,
  createStreamer: () => new MistralStreamer(),
  newId: mistralId,
};
