// Request bodies nest at most MAX_BODY_DEPTH levels of objects and arrays. What the routes
// do with a body (validate it, render it through the chat template, echo parts of it back
// with JSON.stringify) recurses, so a deep enough body would overflow the stack; and
// parsing a deep one builds that many objects first. So the raw bytes are scanned before
// JSON.parse (express.json's `verify` hook), and a deeper body is refused with 400 unparsed.
// The bound leaves room for the deepest JSON schema the grammar accepts (32 levels) inside
// a tool or response_format.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { badRequest } from './errors.js';

export const MAX_BODY_DEPTH = 128;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const [OPEN_ARRAY, OPEN_OBJECT, CLOSE_ARRAY, CLOSE_OBJECT] = [0x5b, 0x7b, 0x5d, 0x7d];

/** Throws the 400 when the JSON text in `body` opens more than MAX_BODY_DEPTH brackets at once. */
export function verifyBodyDepth(_req: IncomingMessage, _res: ServerResponse, body: Buffer): void {
  let depth = 0;
  for (let i = 0; i < body.length; i++) {
    const b = body[i]!;
    if (b === QUOTE) i = stringEnd(body, i);
    else if (b === OPEN_ARRAY || b === OPEN_OBJECT) {
      if (++depth > MAX_BODY_DEPTH) throw badRequest(`request body nests deeper than ${MAX_BODY_DEPTH} levels`);
    } else if (b === CLOSE_ARRAY || b === CLOSE_OBJECT) depth--;
  }
}

/** The index of the quote that closes the string opened at `open` (the body's end if none). */
function stringEnd(body: Buffer, open: number): number {
  let at = open;
  for (;;) {
    at = body.indexOf(QUOTE, at + 1);
    if (at < 0) return body.length;
    let backslashes = 0;
    while (body[at - 1 - backslashes] === BACKSLASH) backslashes++;
    if (backslashes % 2 === 0) return at;
  }
}
