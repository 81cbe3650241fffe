// --api-key: `Authorization: Bearer KEY`, or the raw key in the same header as
// llama-server also accepts, or `x-api-key: KEY` as the Anthropic SDK sends it.
// Query-string keys are not read (they end up in logs).
import { createHash, timingSafeEqual } from 'node:crypto';
import type { RequestHandler } from 'express';
import { ApiError, sendError } from './errors.js';

export function apiKeyAuth(apiKey: string): RequestHandler {
  const expected = digest(apiKey);
  return (req, res, next) => {
    const header = req.headers.authorization;
    const xApiKey = req.headers['x-api-key'];
    const keys = [header?.replace(/^Bearer\s+/i, ''), typeof xApiKey === 'string' ? xApiKey : undefined].filter(
      (k): k is string => k !== undefined,
    );
    if (keys.length === 0) {
      sendError(res, new ApiError(401, 'missing_api_key', 'Missing API key: send it as "Authorization: Bearer <key>" or "x-api-key: <key>"', 'missing_api_key'));
      return;
    }
    // Comparing digests keeps the comparison constant-time whatever the key lengths.
    if (!keys.some((key) => timingSafeEqual(digest(key), expected))) {
      sendError(res, new ApiError(401, 'invalid_api_key', 'Invalid API key', 'invalid_api_key'));
      return;
    }
    next();
  };
}

function digest(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}
