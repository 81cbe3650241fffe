// The OpenAI error envelope every route answers with: {"error":{"message","type","code"}},
// and the one log line of a failure no route chose to report, under the request's id.
import { randomBytes } from 'node:crypto';
import type { ErrorRequestHandler, RequestHandler, Response } from 'express';
import { GenerationDisabledError } from '../engine/embedding-only-engine.js';
import { MemoryBudgetError } from '../engine/memory-budget.js';
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
  if (err instanceof MemoryBudgetError) {
    return new ApiError(503, 'request_memory_budget_exceeded', err.message, 'request_memory_budget_exceeded', { estimated_bytes: err.estimatedBytes, budget_bytes: err.budgetBytes });
  }
  if (err instanceof GenerationDisabledError) return new ApiError(501, 'not_supported_error', err.message);
  // The router's, for a path parameter that is not valid percent-encoding.
  if (err instanceof URIError) return badRequest(`malformed percent-encoding in the request path: ${err.message}`);
  const e = err as { type?: string; status?: number; expose?: boolean; message?: string };
  if (e.type === 'entity.parse.failed') return badRequest(`malformed JSON in request body: ${e.message}`);
  if (typeof e.status === 'number' && e.status >= 400 && e.status < 500 && e.expose) {
    return new ApiError(e.status, 'invalid_request_error', e.message ?? 'bad request');
  }
  return serverError(e.message ?? String(err));
}

/** Names each request: res.locals.requestId, echoed as X-Request-Id so that a client can
 *  quote the id a fault was logged under. */
export const assignRequestId: RequestHandler = (_req, res, next) => {
  const id = `req_${randomBytes(12).toString('hex')}`;
  res.locals.requestId = id;
  res.setHeader('X-Request-Id', id);
  next();
};

/** Logs a failure no route chose to report (a bug, an engine fault). An ApiError is an
 *  answer a route chose, and what toApiError maps below 500 (a malformed body, a full
 *  queue) is no fault of the server's: neither is logged. */
export function logFault(res: Response, err: unknown): void {
  if (err instanceof ApiError || toApiError(err).type !== 'server_error') return;
  const { method, originalUrl } = res.req;
  console.error(`mlxcel-server: request ${String(res.locals.requestId)} (${method} ${originalUrl}) failed:`, err);
}

export const errorHandler: ErrorRequestHandler = (err, _req, res, _next) => {
  logFault(res, err);
  // A streaming route reports its own failures inside the stream.
  if (res.headersSent) {
    res.end();
    return;
  }
  sendError(res, toApiError(err));
};
