// Qwen3-Coder XML tool calls ("qwen3_coder"; also Qwen3.5/3.6 checkpoints that share its template):
//   <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>
// Values are raw text, coerced against the tool schema. A value runs to its
// </parameter>, or to </function> when the model left it unclosed.
import { argumentPiece, argumentsClose, coerceValue, paramSchema } from './coerce.js';
import { between, endAfter, findLiteral } from './markers.js';
import type { CallEvent, CallStreamer, ParsedToolCall, ToolCallFormat, ToolDefinition } from './types.js';

const OPEN = '<tool_call>';
const CLOSE = '</tool_call>';
const FUNCTION = '<function=';
const FUNCTION_END = '</function>';
const PARAMETER = '<parameter=';
const PARAMETER_END = '</parameter>';

interface FunctionRead {
  /** Where "<function=" is. */
  start: number;
  name?: string;
  /** Complete parameters, in order, coerced. */
  entries: Array<[string, unknown]>;
  /** </function> was reached (or the text ended, when final). */
  done: boolean;
  /** Where reading stopped. */
  end: number;
}

/** One leading and one trailing newline belong to the layout, not the value. */
function trimValue(raw: string): string {
  return raw.replace(/^\n/, '').replace(/\n$/, '');
}

/** Reads the function that starts at `pos` ("<function=") as far as the text allows. */
function readFunction(s: string, pos: number, tools: readonly ToolDefinition[], final: boolean): FunctionRead {
  const head = /^<function=([^>\n]+)>/.exec(s.slice(pos, pos + 512));
  if (!head) return { start: pos, entries: [], done: false, end: pos };
  const name = head[1]!.trim();
  const entries: Array<[string, unknown]> = [];
  let i = pos + head[0].length;
  for (;;) {
    const nextParam = s.indexOf(PARAMETER, i);
    const nextEnd = s.indexOf(FUNCTION_END, i);
    if (nextEnd >= 0 && (nextParam < 0 || nextEnd < nextParam)) return { start: pos, name, entries, done: true, end: nextEnd + FUNCTION_END.length };
    if (nextParam < 0) return { start: pos, name, entries, done: final, end: final ? s.length : i };
    const key = /^<parameter=([^>\n]+)>/.exec(s.slice(nextParam, nextParam + 512));
    if (!key) return { start: pos, name, entries, done: final, end: final ? s.length : i };
    const valueStart = nextParam + key[0].length;
    const pe = s.indexOf(PARAMETER_END, valueStart);
    const fe = s.indexOf(FUNCTION_END, valueStart);
    let raw: string;
    if (pe >= 0 && (fe < 0 || pe < fe)) {
      raw = s.slice(valueStart, pe);
      i = pe + PARAMETER_END.length;
    } else if (fe >= 0) {
      raw = s.slice(valueStart, fe);
      i = fe;
    } else if (final) {
      raw = s.slice(valueStart);
      i = s.length;
    } else {
      return { start: pos, name, entries, done: false, end: nextParam };
    }
    const param = key[1]!.trim();
    entries.push([param, coerceValue(trimValue(raw), paramSchema(tools, name, param))]);
  }
}

/** Every function in a region, as far as written. */
function readFunctions(region: string, tools: readonly ToolDefinition[], final: boolean): FunctionRead[] {
  const out: FunctionRead[] = [];
  let from = 0;
  for (;;) {
    const at = region.indexOf(FUNCTION, from);
    if (at < 0) return out;
    const read = readFunction(region, at, tools, final);
    out.push(read);
    if (!read.done || read.end <= at) return out;
    from = read.end;
  }
}

class Qwen3CoderStreamer implements CallStreamer {
  private readonly sentParams: number[] = [];
  private readonly closed: boolean[] = [];

  constructor(private readonly tools: readonly ToolDefinition[]) {}

  update(region: string): CallEvent[] {
    const out: CallEvent[] = [];
    readFunctions(region, this.tools, false).forEach((fn, call) => {
      if (fn.name === undefined) return;
      if (this.sentParams[call] === undefined) {
        out.push({ kind: 'start', call, name: fn.name });
        this.sentParams[call] = 0;
      }
      for (let n = this.sentParams[call]!; n < fn.entries.length; n++) {
        const [key, value] = fn.entries[n]!;
        out.push({ kind: 'args', call, text: argumentPiece(n, key, value) });
      }
      this.sentParams[call] = fn.entries.length;
      if (fn.done && !this.closed[call]) {
        out.push({ kind: 'args', call, text: argumentsClose(fn.entries.length) });
        this.closed[call] = true;
      }
    });
    return out;
  }
}

export const qwen3Coder: ToolCallFormat = {
  name: 'qwen3_coder',
  preservedTokens: [OPEN, CLOSE],
  // Some checkpoints drop the <tool_call> wrapper and start at <function=.
  findStart: (text, ctx) => findLiteral(text, [OPEN, FUNCTION], ctx.final),
  findEnd(region, final) {
    if (region.startsWith(OPEN)) return endAfter(region, CLOSE, final);
    const end = endAfter(region, FUNCTION_END, final);
    return end;
  },
  parseRegion(region, tools) {
    const body = region.startsWith(OPEN) ? between(region, OPEN, CLOSE) : region;
    const fns = readFunctions(body, tools, true);
    if (fns.length === 0 || fns.some((f) => f.name === undefined || f.name === '')) return undefined;
    // Nothing but layout may surround the functions.
    let outside = body.slice(0, fns[0]!.start);
    fns.forEach((fn, n) => (outside += body.slice(fn.end, fns[n + 1]?.start ?? body.length)));
    if (outside.trim() !== '') return undefined;
    return fns.map((fn): ParsedToolCall => ({ name: fn.name!, arguments: serialize(fn.entries) }));
  },
  createStreamer: (tools) => new Qwen3CoderStreamer(tools),
};

function serialize(entries: Array<[string, unknown]>): string {
  return entries.map(([k, v], i) => argumentPiece(i, k, v)).join('') + argumentsClose(entries.length);
}
