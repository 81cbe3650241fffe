// MeetKai Functionary v3.2 tool calls ("functionary_v3_2"). The generation prompt ends
// with ">>>", so the output opens with a recipient and a newline: "all\n" for text to the
// user, "NAME\n{json}" for a call; later items start with ">>>":
//   get_weather\n{"city": "Paris"}>>>all\nIt is sunny.
import { scanJsonValue, skipWs } from './json-scan.js';
import { earliest, endAfterJson, findLiteral, objectArguments } from './markers.js';
import { WRAPPER_ONLY, type ParsedToolCall, type StartMatch, type ToolCallFormat } from './types.js';

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
