// Finding where markup starts and ends in text that arrives in pieces. A marker split
// across tokens ("<tool" + "_call>") is reported as partial, so the filter holds it back
// until the next piece proves or disproves it. Also the small pieces of region reading
// that several formats share: a region's body between its tags, and a JSON-object
// arguments text.
import { scanJsonValue, skipWs, tryParseJson } from './json-scan.js';
import type { StartMatch } from './types.js';

/** Length of the longest suffix of `text` that is a proper prefix of one of `markers`. */
export function partialSuffix(text: string, markers: readonly string[]): number {
  let longest = 0;
  for (const marker of markers) {
    for (let n = Math.min(marker.length - 1, text.length); n > longest; n--) {
      if (text.endsWith(marker.slice(0, n))) {
        longest = n;
        break;
      }
    }
  }
  return longest;
}

/** The earliest of `markers` in `text`, else a partial one at its end. */
export function findLiteral(text: string, markers: readonly string[], final: boolean): StartMatch {
  let best = -1;
  for (const marker of markers) {
    const i = text.indexOf(marker);
    if (i >= 0 && (best < 0 || i < best)) best = i;
  }
  if (best >= 0) return { kind: 'found', index: best };
  if (final) return { kind: 'none' };
  const keep = partialSuffix(text, markers);
  return keep > 0 ? { kind: 'partial', index: text.length - keep } : { kind: 'none' };
}

/** The earlier of two matches; a partial one only counts when nothing is found before it. */
export function earliest(a: StartMatch, b: StartMatch): StartMatch {
  if (a.kind === 'none') return b;
  if (b.kind === 'none') return a;
  if (a.index !== b.index) return a.index < b.index ? a : b;
  return a.kind === 'found' ? a : b;
}

/** A marker that only counts at the start of a line (e.g. "Action:"). */
export function findAtLineStart(text: string, marker: string, atLineStart: boolean, final: boolean): StartMatch {
  let from = 0;
  for (;;) {
    const i = text.indexOf(marker, from);
    if (i < 0) break;
    if ((i === 0 && atLineStart) || text[i - 1] === '\n') return { kind: 'found', index: i };
    from = i + 1;
  }
  if (final) return { kind: 'none' };
  // A partial marker must itself sit at a line start.
  for (let n = Math.min(marker.length - 1, text.length); n > 0; n--) {
    const at = text.length - n;
    if (text.endsWith(marker.slice(0, n)) && ((at === 0 && atLineStart) || text[at - 1] === '\n')) return { kind: 'partial', index: at };
  }
  return { kind: 'none' };
}

/** End of a region that closes with `close`; at the end of generation, the whole rest. */
export function endAfter(region: string, close: string, final: boolean, from = 0): number | undefined {
  const i = region.indexOf(close, from);
  if (i >= 0) return i + close.length;
  return final ? region.length : undefined;
}

/** End of a region made of a prefix and one JSON value; an invalid value ends it where it fails. */
export function endAfterJson(region: string, valueStart: number, final: boolean): number | undefined {
  const scan = scanJsonValue(region, valueStart, final);
  if (scan.status === 'complete') return scan.end;
  if (scan.status === 'error') return Math.max(valueStart, Math.min(region.length, scan.at + 1));
  return final ? region.length : undefined;
}

/**
 * A bare JSON call at the start of the output: `{` then one of `keys` as its first key
 * (e.g. {"name": ...}), or `[` then such an object when `arrays`. Whitespace before it is
 * allowed. Decides as early as the text allows; partial while it could still match.
 */
export function findBareJsonCall(text: string, keys: readonly string[], final: boolean, arrays = false): StartMatch {
  const start = skipWs(text, 0);
  let i = start;
  const undecided = (): StartMatch => (final ? { kind: 'none' } : { kind: 'partial', index: start });
  if (i >= text.length) return undecided();
  if (arrays && text[i] === '[') i = skipWs(text, i + 1);
  if (i >= text.length) return undecided();
  if (text[i] !== '{') return { kind: 'none' };
  i = skipWs(text, i + 1);
  if (i >= text.length) return undecided();
  if (text[i] !== '"') return { kind: 'none' };
  const typed = text.slice(i + 1);
  for (const key of keys) {
    const quoted = `${key}"`;
    if (typed.startsWith(quoted)) return { kind: 'found', index: start };
    if (quoted.startsWith(typed)) return undecided();
  }
  return { kind: 'none' };
}

/** The body of a region that may lack its closing tag (generation ended first). */
export function between(region: string, open: string, close: string): string {
  const body = region.slice(open.length);
  return body.endsWith(close) ? body.slice(0, -close.length) : body;
}

/** A JSON object taken as the arguments text, or undefined. */
export function objectArguments(raw: string): string | undefined {
  const text = raw.trim();
  const value = tryParseJson(text);
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? text : undefined;
}
