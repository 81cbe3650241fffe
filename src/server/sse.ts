// Server-Sent Events framing shared by the streaming routes: `data: <json>\n\n` per event,
// errors reported in-band once the 200 headers are out.
import type { Response } from 'express';
import { logFault, toApiError } from './errors.js';

export function startSse(res: Response): void {
  res.status(200);
  res.setHeader('Content-Type', 'text/event-stream');
  res.setHeader('Cache-Control', 'no-cache');
  res.setHeader('Connection', 'keep-alive');
  // Proxies such as nginx would otherwise buffer the stream.
  res.setHeader('X-Accel-Buffering', 'no');
  res.flushHeaders();
}

export function sendSse(res: Response, data: unknown): void {
  if (!res.writableEnded && !res.destroyed) res.write(`data: ${JSON.stringify(data)}\n\n`);
}

/** A named event (`event: <name>`), as the Responses and Anthropic streams frame theirs. */
export function sendSseEvent(res: Response, event: string, data: unknown): void {
  if (!res.writableEnded && !res.destroyed) res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
}

/** `[DONE]` terminates OpenAI streams; llama-server's native stream just ends. */
export function endSse(res: Response, doneMarker: boolean): void {
  if (res.writableEnded || res.destroyed) return;
  if (doneMarker) res.write('data: [DONE]\n\n');
  res.end();
}

/**
 * Runs a stream body, turning a failure after the headers into an error event (as
 * llama-server does) rather than a silently truncated stream; `closeOnError` then writes
 * the route's closing events (an OpenAI stream's finish_reason "error" chunk and [DONE]).
 */
export async function runSse(res: Response, body: () => Promise<void>, closeOnError?: () => void): Promise<void> {
  startSse(res);
  try {
    await body();
  } catch (err) {
    // A client that left makes the engine stop; that is not worth a log line.
    if (!res.destroyed) logFault(res, err);
    sendSse(res, toApiError(err).toJSON());
    closeOnError?.();
    if (!res.writableEnded) res.end();
  }
}
