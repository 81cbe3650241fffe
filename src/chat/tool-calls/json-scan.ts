// Structural JSON scanning over text that may still be growing: where a value ends, and
// where each member of an object lies. Tool-call parsers need raw spans (an object-valued
// `arguments` is passed on as the model's own text) and must tell "not finished yet"
// from "not JSON", which JSON.parse alone cannot.

export type ScanResult =
  | { status: 'complete'; end: number }
  | { status: 'incomplete' }
  | { status: 'error'; at: number };

const WS = new Set([' ', '\t', '\n', '\r']);

export function skipWs(text: string, pos: number): number {
  while (pos < text.length && WS.has(text[pos]!)) pos++;
  return pos;
}

/**
 * Scans one JSON value starting at `pos` (leading whitespace skipped). Brackets and
 * strings are checked structurally; JSON.parse of the span settles validity. A number or
 * literal that reaches the end of the text is incomplete unless `final`.
 *
 * Streaming parsers call this on a text that grows by a token at a time; a string or
 * container scan resumes where the previous call on a prefix of this text stopped
 * (`resumable` below), so following a long value costs time in its length, not
 * in its length squared.
 */
export function scanJsonValue(text: string, pos: number, final = false): ScanResult {
  const i = skipWs(text, pos);
  if (i >= text.length) return final ? { status: 'error', at: i } : { status: 'incomplete' };
  const first = text[i]!;
  if (first === '"' || first === '{' || first === '[') {
    const scan = resumable(text, i);
    return scan.status === 'incomplete' ? incompleteOrError(text, final) : scan;
  }
  const m = /^(-?\d+(\.\d+)?([eE][-+]?\d+)?|true|false|null)/.exec(text.slice(i, i + 64));
  if (!m) {
    // A literal still being typed ("tr", "-", "nul") is not an error yet.
    const rest = text.slice(i);
    if (!final && /^(-|-?\d+\.?|-?\d+(\.\d+)?[eE][-+]?|t(r(ue?)?)?|f(a(l(se?)?)?)?|n(u(ll?)?)?)$/.test(rest)) return { status: 'incomplete' };
    return { status: 'error', at: i };
  }
  const end = i + m[0].length;
  if (end === text.length && !final) return { status: 'incomplete' };
  return { status: 'complete', end };
}

/** Where a string or container scan of `text` from `start` stopped, or its result. */
interface ScanState {
  text: string;
  start: number;
  /** The next character to read. */
  at: number;
  /** Closers of the containers open at `at`. */
  stack: string[];
  inString: boolean;
  result?: ScanResult;
}

/** The latest scans, most recent first: a few streams' texts at once. */
const scans: ScanState[] = [];
const MAX_SCANS = 16;

/** The string or container opening at `start`: complete (checked by JSON.parse), an error, or incomplete. */
function resumable(text: string, start: number): ScanResult {
  // substring + === compares flat memory; startsWith walks a concatenated string char by char.
  const k = scans.findIndex((s) => s.start === start && text.length >= s.text.length && text.substring(0, s.text.length) === s.text);
  let state: ScanState;
  if (k >= 0) {
    state = scans.splice(k, 1)[0]!;
    if (state.result) {
      scans.unshift(state);
      return state.result;
    }
  } else state = { text, start, at: start, stack: [], inString: false };
  let { at: i, inString } = state;
  const { stack } = state;
  let result: ScanResult | undefined;
  for (; i < text.length && !result; i++) {
    const c = text[i];
    if (inString) {
      if (c === '\\') i++;
      else if (c === '"') {
        inString = false;
        if (stack.length === 0) result = checked(text, start, i + 1);
      }
    } else if (c === '"') inString = true;
    else if (c === '{' || c === '[') stack.push(c === '{' ? '}' : ']');
    else if (c === '}' || c === ']') {
      if (stack.pop() !== c) result = { status: 'error', at: i };
      else if (stack.length === 0) result = checked(text, start, i + 1);
    }
  }
  // A complete value holds for any text that begins with its span; an open one for any
  // text that begins with all of this one.
  const end = result?.status === 'complete' ? result.end : text.length;
  scans.unshift({ text: text.slice(0, end), start, at: i, stack, inString, ...(result ? { result } : {}) });
  if (scans.length > MAX_SCANS) scans.pop();
  return result ?? { status: 'incomplete' };
}

function incompleteOrError(text: string, final: boolean): ScanResult {
  return final ? { status: 'error', at: text.length } : { status: 'incomplete' };
}

/** The structure matched; the span must also be real JSON. */
function checked(text: string, start: number, end: number): ScanResult {
  try {
    JSON.parse(text.slice(start, end));
    return { status: 'complete', end };
  } catch {
    return { status: 'error', at: start };
  }
}

/** End (exclusive) of the string literal opening at `pos`, or -1 when it is not closed yet. */
export function scanString(text: string, pos: number): number {
  for (let i = pos + 1; i < text.length; i++) {
    const c = text[i];
    if (c === '\\') i++;
    else if (c === '"') return i + 1;
  }
  return -1;
}

/**
 * The decoded prefix of a string literal that is still open (`pos` at its quote): what
 * can already be streamed of a string value. A trailing partial escape is left out.
 */
export function decodePartialString(text: string, pos: number): string {
  let raw = text.slice(pos + 1);
  const closed = scanString(text, pos);
  if (closed >= 0) raw = text.slice(pos + 1, closed - 1);
  else raw = raw.replace(/\\(u[0-9a-fA-F]{0,3})?$/, '');
  try {
    return JSON.parse(`"${raw}"`) as string;
  } catch {
    return '';
  }
}

export interface MemberSpan {
  key: string;
  /** Start of the value (after whitespace). */
  valueStart: number;
  /** End of the value, or undefined while it is still being written. */
  valueEnd?: number;
}

export interface ObjectSpans {
  members: MemberSpan[];
  /** End of the object (after its `}`), once closed. */
  end?: number;
  /** The text cannot be a JSON object. */
  error?: boolean;
}

/** The members of the object opening at `pos` (whitespace skipped), as far as written. */
export function objectMembers(text: string, pos: number): ObjectSpans {
  const members: MemberSpan[] = [];
  let i = skipWs(text, pos);
  if (i >= text.length) return { members };
  if (text[i] !== '{') return { members, error: true };
  i++;
  for (;;) {
    i = skipWs(text, i);
    if (i >= text.length) return { members };
    if (text[i] === '}') return { members, end: i + 1 };
    if (members.length > 0) {
      if (text[i] !== ',') return { members, error: true };
      i = skipWs(text, i + 1);
      if (i >= text.length) return { members };
    }
    if (text[i] !== '"') return { members, error: true };
    const keyEnd = scanString(text, i);
    if (keyEnd < 0) return { members };
    let key: string;
    try {
      key = JSON.parse(text.slice(i, keyEnd)) as string;
    } catch {
      return { members, error: true };
    }
    i = skipWs(text, keyEnd);
    if (i >= text.length) return { members };
    if (text[i] !== ':') return { members, error: true };
    i = skipWs(text, i + 1);
    if (i >= text.length) return { members };
    const value = scanJsonValue(text, i);
    if (value.status === 'error') return { members, error: true };
    if (value.status === 'incomplete') {
      members.push({ key, valueStart: i });
      return { members };
    }
    members.push({ key, valueStart: i, valueEnd: value.end });
    i = value.end;
  }
}

/** Starts of the elements of the array opening at `pos`, as far as written. */
export function arrayElements(text: string, pos: number): { starts: number[]; end?: number; error?: boolean } {
  const starts: number[] = [];
  let i = skipWs(text, pos);
  if (i >= text.length) return { starts };
  if (text[i] !== '[') return { starts, error: true };
  i++;
  for (;;) {
    i = skipWs(text, i);
    if (i >= text.length) return { starts };
    if (text[i] === ']') return { starts, end: i + 1 };
    if (starts.length > 0) {
      if (text[i] !== ',') return { starts, error: true };
      i = skipWs(text, i + 1);
      if (i >= text.length) return { starts };
    }
    starts.push(i);
    const value = scanJsonValue(text, i);
    if (value.status === 'error') return { starts, error: true };
    if (value.status === 'incomplete') return { starts };
    i = value.end;
  }
}

/** JSON.parse that answers undefined instead of throwing. */
export function tryParseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/**
 * A JSON value cut off anywhere, completed as far as it was written: an open string value
 * closed (a partial escape left out), a member or element cut before its value ends
 * dropped, open brackets closed. Undefined when the text is not the start of a JSON value.
 */
export function completePartialJson(text: string): unknown {
  /** Closers of the open containers, innermost last. */
  const stack: string[] = [];
  const closers = () => stack.slice().reverse().join('');
  let safe = { end: -1, closers: '' };
  const mark = (end: number) => (safe = { end, closers: closers() });
  let expectKey = false;
  let i = 0;
  while (i < text.length) {
    const c = text[i]!;
    if (/\s/.test(c) || c === ':') {
      i++;
    } else if (c === '{' || c === '[') {
      stack.push(c === '{' ? '}' : ']');
      expectKey = c === '{';
      mark(++i);
    } else if (c === '}' || c === ']') {
      if (stack.pop() !== c) return undefined;
      expectKey = false;
      mark(++i);
    } else if (c === ',') {
      expectKey = stack.at(-1) === '}';
      i++;
    } else if (c === '"') {
      const end = scanString(text, i);
      if (end < 0) {
        if (expectKey) break;
        return tryParseJson(text.replace(/\\(u[0-9a-fA-F]{0,3})?$/, '') + '"' + closers());
      }
      i = end;
      if (expectKey) expectKey = false;
      else mark(i);
    } else {
      const literal = /^(?:-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null)(?=[\s,\]}])/.exec(text.slice(i))?.[0];
      // A number or literal that runs to the end (or into a cut exponent) may itself be cut.
      if (!literal) break;
      mark((i += literal.length));
    }
  }
  return safe.end < 0 ? undefined : tryParseJson(text.slice(0, safe.end) + safe.closers);
}
