// Calls written as JSON objects, {"name": NAME, "arguments": ARGS} and its relatives
// ("parameters" for Llama, an OpenAI-style {"function": {...}} wrapper, a list of them):
// the final parse and the incremental streamer, which share one reading of the spans so
// that streamed argument pieces always add up to the parsed arguments.
import { arrayElements, decodePartialString, objectMembers, scanJsonValue, skipWs, tryParseJson } from './json-scan.js';
import type { CallEvent, CallStreamer, ParsedToolCall } from './types.js';

export const DEFAULT_ARG_KEYS = ['arguments', 'parameters'] as const;
/** Keys that may hold the function name (Command R writes "tool_name"). */
const NAME_KEYS = ['name', 'tool_name'];

/** Where the call object (or list) begins in the region, once known. */
export type BodyOffset = (region: string) => number | undefined;

/** The call in the object at `start` of `text`; undefined if it is not one. */
export function callFromObject(text: string, start: number, argKeys: readonly string[] = DEFAULT_ARG_KEYS): ParsedToolCall | undefined {
  const spans = objectMembers(text, start);
  if (spans.error || spans.end === undefined) return undefined;
  const wrapped = spans.members.find((m) => m.key === 'function' && text[m.valueStart] === '{');
  if (wrapped && !spans.members.some((m) => NAME_KEYS.includes(m.key))) return callFromObject(text, wrapped.valueStart, argKeys);
  const nameMember = spans.members.find((m) => NAME_KEYS.includes(m.key));
  const name = nameMember && tryParseJson(text.slice(nameMember.valueStart, nameMember.valueEnd));
  if (typeof name !== 'string' || name === '') return undefined;
  const args = spans.members.find((m) => argKeys.includes(m.key));
  if (!args) return { name, arguments: '{}' };
  const raw = text.slice(args.valueStart, args.valueEnd);
  const value = tryParseJson(raw);
  // An object keeps the model's own text (key order, spacing, number forms).
  if (typeof value === 'object' && value !== null && !Array.isArray(value)) return { name, arguments: raw };
  if (value === null) return { name, arguments: '{}' };
  // A string is taken as the arguments text itself, as OpenAI clients send it.
  if (typeof value === 'string') return { name, arguments: value };
  return undefined;
}

/** The calls of a JSON object or list of objects at `start`; undefined if malformed. */
export function callsFromJson(text: string, start: number, argKeys: readonly string[] = DEFAULT_ARG_KEYS): ParsedToolCall[] | undefined {
  const i = skipWs(text, start);
  if (text[i] === '[') {
    const { starts, end, error } = arrayElements(text, i);
    if (error || end === undefined) return undefined;
    const calls = starts.map((s) => callFromObject(text, s, argKeys));
    return calls.every((c) => c !== undefined) && calls.length > 0 ? (calls as ParsedToolCall[]) : undefined;
  }
  const call = callFromObject(text, i, argKeys);
  return call ? [call] : undefined;
}

/** The calls of one JSON value that fills `body` (whitespace aside); undefined otherwise. */
export function wholeJson(body: string, argKeys: readonly string[]): ParsedToolCall[] | undefined {
  const start = skipWs(body, 0);
  const scan = scanJsonValue(body, start, true);
  if (scan.status !== 'complete' || skipWs(body, scan.end) !== body.length) return undefined;
  return callsFromJson(body, start, argKeys);
}

/** Follows one call object as it is written, sending its name and argument pieces once. */
class ObjectTracker {
  private started = false;
  /** Characters of the arguments already sent: raw text, or decoded text for a string. */
  private sent = 0;

  constructor(
    private readonly call: number,
    private readonly argKeys: readonly string[],
  ) {}

  update(text: string, start: number, out: CallEvent[]): void {
    const spans = objectMembers(text, start);
    if (spans.error) return;
    const wrapped = spans.members.find((m) => m.key === 'function' && text[m.valueStart] === '{');
    if (wrapped && !spans.members.some((m) => NAME_KEYS.includes(m.key))) return this.update(text, wrapped.valueStart, out);
    const nameMember = spans.members.find((m) => NAME_KEYS.includes(m.key));
    if (nameMember?.valueEnd === undefined) return;
    const name = tryParseJson(text.slice(nameMember.valueStart, nameMember.valueEnd));
    if (typeof name !== 'string' || name === '') return;
    if (!this.started) {
      out.push({ kind: 'start', call: this.call, name });
      this.started = true;
    }
    const args = spans.members.find((m) => this.argKeys.includes(m.key));
    if (!args) return;
    let available: string;
    if (text[args.valueStart] === '{') {
      // Until the object closes, everything written after its brace belongs to it.
      available = text.slice(args.valueStart, args.valueEnd ?? text.length);
    } else if (text[args.valueStart] === '"') {
      available = decodePartialString(text, args.valueStart);
    } else {
      // null, or not an object: the final parse decides.
      return;
    }
    if (available.length > this.sent) {
      out.push({ kind: 'args', call: this.call, text: available.slice(this.sent) });
      this.sent = available.length;
    }
  }
}

/** Streams the JSON call object, or list of call objects, found at `offset(region)`. */
export class JsonCallsStreamer implements CallStreamer {
  private readonly trackers: ObjectTracker[] = [];

  constructor(
    private readonly offset: BodyOffset,
    private readonly argKeys: readonly string[] = DEFAULT_ARG_KEYS,
    /** Calls before this region's first, for numbering (a list continues the count). */
    private readonly firstCall = 0,
  ) {}

  update(region: string): CallEvent[] {
    const start = this.offset(region);
    if (start === undefined) return [];
    const i = skipWs(region, start);
    if (i >= region.length) return [];
    const out: CallEvent[] = [];
    const starts = region[i] === '[' ? arrayElements(region, i).starts : [i];
    starts.forEach((s, n) => {
      this.trackers[n] ??= new ObjectTracker(this.firstCall + n, this.argKeys);
      this.trackers[n]!.update(region, s, out);
    });
    return out;
  }
}

/** Streams "NAME ... ARGS-JSON" shapes: the name once known, then the raw JSON as written. */
export class RawArgumentsStreamer implements CallStreamer {
  private started = false;
  private sent = 0;

  constructor(
    /** The name and where the arguments value starts, once both are known. */
    private readonly locate: (region: string) => { name: string; argsStart?: number } | undefined,
  ) {}

  update(region: string): CallEvent[] {
    const found = this.locate(region);
    if (!found) return [];
    const out: CallEvent[] = [];
    if (!this.started) {
      out.push({ kind: 'start', call: 0, name: found.name });
      this.started = true;
    }
    if (found.argsStart === undefined) return out;
    const i = skipWs(region, found.argsStart);
    if (region[i] !== '{') return out;
    const scan = scanJsonValue(region, i);
    if (scan.status === 'error') return out;
    const available = region.slice(i, scan.status === 'complete' ? scan.end : region.length);
    if (available.length > this.sent) {
      out.push({ kind: 'args', call: 0, text: available.slice(this.sent) });
      this.sent = available.length;
    }
    return out;
  }
}
