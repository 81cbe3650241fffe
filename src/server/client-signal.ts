// A request's lifetime as an AbortSignal, so a client that disconnects (streaming or
// not) frees its place in the engine instead of generating for nobody.
import type { Request, Response } from 'express';

export function clientSignal(req: Request, res: Response): AbortSignal {
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
