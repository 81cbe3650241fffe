// MeetKai Functionary.
// v3.1: <function=get_weather>{"city": "Paris"}</function>, and <|python_tag|>CODE for its
//       built-in python tool (to the end of the output).
// v3.2: the generation prompt ends with ">>>", so the output opens with a recipient and a
//       newline: "all\n" for text to the user, "NAME\n{json}" for a call; later items
//       start with ">>>".
import { scanJsonValue, skipWs, tryParseJson } from './json-scan.js';
import { earliest, endAfter, endAfterJson, findLiteral } from './markers.js';
import { WRAPPER_ONLY, type ParsedToolCall, type StartMatch, type ToolCallFormat } from './types.js';

const FUNCTION = '<function=';
const FUNCTION_END = '</function>';
const PYTHON_TAG = '<|python_tag|>';

/** A JSON object taken as the arguments text, or undefined. */
export function objectArguments(raw: string): string | undefined {
  const text = raw.trim();
  const value = tryParseJson(text);
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? text : undefined;
}

export const functionaryV31: ToolCallFormat = {
  name: 'functionary_v3_1',
  preservedTokens: [PYTHON_TAG],
  findStart: (text, ctx) => findLiteral(text, [FUNCTION, PYTHON_TAG], ctx.final),
  findEnd: (region, final) => (region.startsWith(PYTHON_TAG) ? (final ? region.length : undefined) : endAfter(region, FUNCTION_END, final)),
  parseRegion(region) {
    if (region.startsWith(PYTHON_TAG)) {
      const code = region.slice(PYTHON_TAG.length).trim();
      return code ? [{ name: 'python', arguments: JSON.stringify({ code }) }] : undefined;
    }
    const m = /^<function=([^>\s]+)>([\s\S]*?)(?:<\/function>)?$/.exec(region);
    const args = m && objectArguments(m[2]!);
    return m && args ? [{ name: m[1]!, arguments: args }] : undefined;
  },
};

const ARROWS = '>>>';
const HEAD = /^(?:>>>)?([A-Za-z_][\w.-]*)\n/;

/** The first item's recipient, which has no ">>>" before it. */
function findFirstRecipient(text: string, names: readonly string[], final: boolean): StartMatch {
  if (HEAD.test(text)) {
    const name = HEAD.exec(text)![1]!;
    return name === 'all' || names.includes(name) ? { kind: 'found', index: 0 } : { kind: 'none' };
  }
  if (final || text.includes('\n')) return { kind: 'none' };
  return ['all', ...names].some((n) => n.startsWith(text)) ? { kind: 'partial', index: 0 } : { kind: 'none' };
}

export const functionaryV32: ToolCallFormat = {
  name: 'functionary_v3_2',
  preservedTokens: [],
  findStart(text, ctx) {
    const arrows = findLiteral(text, [ARROWS], ctx.final);
    if (!ctx.atOutputStart) return arrows;
    return earliest(findFirstRecipient(text, ctx.tools.map((t) => t.function.name), ctx.final), arrows);
  },
  findEnd(region, final) {
    const head = HEAD.exec(region);
    if (!head) {
      const typed = region.replace(/^>>>/, '');
      if (final || !/^[\w.-]*$/.test(typed) || typed.length > 128) return region.length;
      return undefined;
    }
    // "all" only switches to text for the user: the header is all the markup.
    if (head[1] === 'all') return head[0].length;
    return endAfterJson(region, head[0].length, final);
  },
  parseRegion(region): ParsedToolCall[] | undefined {
    const head = HEAD.exec(region);
    if (!head) return undefined;
    if (head[1] === 'all') return WRAPPER_ONLY;
    const start = skipWs(region, head[0].length);
    const scan = scanJsonValue(region, start, true);
    if (scan.status !== 'complete') return undefined;
    const args = objectArguments(region.slice(start, scan.end));
    return args ? [{ name: head[1]!, arguments: args }] : undefined;
  },
};
