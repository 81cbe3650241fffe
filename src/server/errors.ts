// The OpenAI error envelope every route answers with: {"error":{"message","type","code"}}.
import type { ErrorRequestHandler, Response } from 'express';
import { QueueFullError } from '../engine/types.js';

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly type: string,
    message: string,
    readonly code: string | null = null,
    /** Extra fields beside message/type/code, e.g. token counts of a context overflow. */
    readonly details: Record<string, unknown> = {},
  ) {
    super(message);
  }

  toJSON(): { error: Record<string, unknown> } {
    return { error: { message: this.message, type: this.type, code: this.code, ...this.details } };
  }
}

export const badRequest = (message: string, code: string | null = null, details?: Record<string, unknown>) =>
  new ApiError(400, 'invalid_request_error', message, code, details);

export const serverError = (message: string) => new ApiError(500, 'server_error', message);

export function sendError(res: Response, err: ApiError): void {
  // A route family with its own envelope (Anthropic's) sets res.locals.errorBody.
  const body = res.locals.errorBody as ((err: ApiError) => unknown) | undefined;
  res.status(err.status).json(body ? body(err) : err.toJSON());
}

/** Maps anything thrown in a route, body-parser's errors included, onto the envelope. */
export function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  if (err instanceof QueueFullError) return new ApiError(503, 'server_busy', err.message);
  const e = err as { type?: string; status?: number; expose?: boolean; message?: string };
  if (e.type === 'entity.parse.failed') return badRequest(`malformed JSON in request body: ${e.message}`);
  if (typeof e.status === 'number' && e.status >= 400 && e.status < 500 && e.expose) {
    return new ApiError(e.status, 'invalid_request_error', e.message ?? 'bad request');
  }
  return serverError(e.message ?? String(err));
}

/** A failure no route chose to report (a bug, an engine fault): worth a log line. */
export function isUnexpected(err: unknown): boolean {
  return !(err instanceof ApiError) && toApiError(err).type === 'server_error';
}

export const errorHandler: ErrorRequestHandler = (err, _req, res, _next) => {
  const apiError = toApiError(err);
  if (isUnexpected(err)) console.error(err);
  // A streaming route reports its own failures inside the stream.
  if (res.headersSent) {
    res.end();
    return;
  }
  sendError(res, apiError);
};
