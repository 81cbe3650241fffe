// Pythonic tool calls ("pythonic"): a Python list of calls with keyword arguments,
//   [get_weather(city="Paris", days=2), get_time(zone='CET')]
// between <|tool_call_start|> and <|tool_call_end|> (LFM2 and others), or bare at the
// start of the reply (Llama 3.2/4 pythonic templates, some Nemotron ones). Argument values
// are Python literals and become their JSON equivalents.
import { earliest, endAfter, findLiteral } from './markers.js';
import { parsePythonCalls } from './python-calls.js';
import type { StartMatch, ToolCallFormat } from './types.js';

const START = '<|tool_call_start|>';
const END = '<|tool_call_end|>';

/** A bare "[name(" at the start of the reply; partial while it could still be one. */
function findBareList(text: string, final: boolean): StartMatch {
  const m = /^\s*/.exec(text)!;
  const rest = text.slice(m[0].length);
  if (/^\[\s*[A-Za-z_][\w.-]*\s*\(/.test(rest)) return { kind: 'found', index: m[0].length };
  if (!final && /^(\[\s*([A-Za-z_][\w.-]*\s*)?)?$/.test(rest)) return { kind: 'partial', index: m[0].length };
  return { kind: 'none' };
}

/** End of the bracketed list opening at `start`, strings and nesting respected. */
function listEnd(region: string, final: boolean): number | undefined {
  let depth = 0;
  for (let i = 0; i < region.length; i++) {
    const c = region[i]!;
    if (c === '"' || c === "'") {
      const close = region.indexOf(c, i + 1);
      let j = close;
      while (j > 0 && region[j - 1] === '\\') j = region.indexOf(c, j + 1);
      if (j < 0) break;
      i = j;
    } else if (c === '[' || c === '(' || c === '{') depth++;
    else if (c === ']' || c === ')' || c === '}') {
      depth--;
      if (depth === 0) return i + 1;
    }
  }
  return final ? region.length : undefined;
}

export const pythonic: ToolCallFormat = {
  name: 'pythonic',
  preservedTokens: [START, END],
  findStart(text, ctx) {
    const tagged = findLiteral(text, [START], ctx.final);
    return ctx.atBoundary ? earliest(findBareList(text, ctx.final), tagged) : tagged;
  },
  findEnd: (region, final) => (region.startsWith(START) ? endAfter(region, END, final) : listEnd(region, final)),
  parseRegion(region) {
    let body = region;
    if (body.startsWith(START)) {
      body = body.slice(START.length);
      if (body.endsWith(END)) body = body.slice(0, -END.length);
    }
    return parsePythonCalls(body.trim());
  },
};
