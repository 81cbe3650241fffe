// What a generation takes from the HTTP request besides its body: the client's lifetime
// (and the server's shutdown deadline) as an AbortSignal, and its X-Priority.
import type { Request, Response } from 'express';
import { PRIORITIES, type Priority } from '../engine/types.js';
import { badRequest } from './errors.js';

export interface RequestContext {
  signal: AbortSignal;
  priority?: Priority;
}

export function requestContext(req: Request, res: Response): RequestContext {
  const header = req.get('x-priority');
  const priority = header?.trim().toLowerCase();
  if (priority !== undefined && !(PRIORITIES as string[]).includes(priority)) {
    throw badRequest(`X-Priority must be one of: ${PRIORITIES.join(', ')}`);
  }
  // Set by the lifecycle gate (./lifecycle.ts): aborted with an error when the shutdown
  // grace period runs out, which the generation then fails with.
  const deadline = res.locals.deadline as AbortSignal | undefined;
  const client = clientSignal(req, res);
  return { signal: deadline ? AbortSignal.any([client, deadline]) : client, priority: priority as Priority | undefined };
}

/** Aborts when the client disconnects (streaming or not), freeing its engine sequence. */
function clientSignal(req: Request, res: Response): AbortSignal {
  const controller = new AbortController();
  // The socket may already be gone: the client can leave while the body is still parsed.
  if (req.socket.destroyed) {
    controller.abort();
  } else {
    // 'close' also follows a normal end; only an unfinished response means the client left.
    res.once('close', () => {
      if (!res.writableFinished) controller.abort();
    });
  }
  return controller.signal;
}
