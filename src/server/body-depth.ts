// Request bodies nest at most MAX_BODY_DEPTH levels of objects and arrays. JSON.parse
// reads any depth, but what the routes do with a body afterwards (validate it, render it
// through the chat template, echo parts of it back with JSON.stringify) recurses, so a
// deep enough body would overflow the stack; it is refused with 400 before any route.
// The bound leaves room for the deepest JSON schema the grammar accepts (32 levels)
// inside a tool or response_format.
import type { RequestHandler } from 'express';
import { badRequest } from './errors.js';

export const MAX_BODY_DEPTH = 128;

export const limitBodyDepth: RequestHandler = (req, _res, next) => {
  next(nestsDeeper(req.body, MAX_BODY_DEPTH) ? badRequest(`request body nests deeper than ${MAX_BODY_DEPTH} levels`) : undefined);
};

/** Iterative: the value may be deeper than the stack. The root object is level 1. */
function nestsDeeper(root: unknown, limit: number): boolean {
  const work: Array<[unknown, number]> = [[root, 1]];
  while (work.length > 0) {
    const [value, depth] = work.pop()!;
    if (typeof value !== 'object' || value === null) continue;
    if (depth > limit) return true;
    for (const child of Object.values(value)) work.push([child, depth + 1]);
  }
  return false;
}
