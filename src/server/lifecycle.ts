// What an orchestrator asks of a replica: is it alive (GET /live: the process answers and
// its model did not fail to load), is it ready for traffic (GET /ready: the model is loaded,
// awake, and the server is not draining), and a graceful stop. drain() refuses new work
// (POST and DELETE answer 503 with Retry-After; reads keep answering), waits for the
// admitted requests and streams to finish, and when the grace period runs out aborts them
// with an error each route reports in its own shape (a stream's error event), never a
// silently cut stream. GET /health keeps the REST reference's meaning.
import { Router, type RequestHandler } from 'express';
import { ApiError, sendError } from './errors.js';
import type { ModelState } from './model-state.js';

/** --shutdown-grace-secs' default: under Kubernetes' default 30 s termination grace period. */
export const DEFAULT_SHUTDOWN_GRACE_SECS = 25;
/** What a refused client is told to wait before retrying (another replica, behind a balancer). */
const RETRY_AFTER_SECS = 1;
/** After the grace period, how long the aborted streams get to write their error events. */
const ABORT_FLUSH_MS = 2000;

export class Lifecycle {
  private stopping = false;
  private readonly deadline = new AbortController();
  private active = 0;
  private onIdle: (() => void) | undefined;

  get draining(): boolean {
    return this.stopping;
  }

  /**
   * Counts every request in until its response closes; refuses new work while draining.
   * res.locals.deadline is aborted, with the error routes report, when the grace period
   * runs out (./request-context.ts folds it into the generation's signal).
   */
  readonly admit: RequestHandler = (req, res, next) => {
    if (this.draining && req.method !== 'GET' && req.method !== 'HEAD' && req.method !== 'OPTIONS') {
      res.setHeader('Retry-After', String(RETRY_AFTER_SECS));
      sendError(res, new ApiError(503, 'server_busy', 'The server is shutting down and takes no new requests; retry on another replica.'));
      return;
    }
    res.locals.deadline = this.deadline.signal;
    this.active++;
    res.once('close', () => {
      if (--this.active === 0) this.onIdle?.();
    });
    next();
  };

  /**
   * Stops taking work and waits up to `graceMs` for what was admitted; then aborts what is
   * left and gives it ABORT_FLUSH_MS to report. Resolves whether everything finished in time.
   */
  async drain(graceMs: number): Promise<boolean> {
    this.stopping = true;
    if (await this.idle(graceMs)) return true;
    this.deadline.abort(new ApiError(503, 'server_busy', `The server is shutting down: the request did not finish within its ${graceMs / 1000} s grace period (--shutdown-grace-secs).`));
    await this.idle(ABORT_FLUSH_MS);
    return false;
  }

  private idle(timeoutMs: number): Promise<boolean> {
    if (this.active === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), timeoutMs);
      this.onIdle = () => {
        clearTimeout(timer);
        resolve(true);
      };
    });
  }
}

/** GET /live and GET /ready, open like /health (before auth). */
export function lifecycleRoutes(models: ModelState, lifecycle: Lifecycle): Router {
  const router = Router();
  router.get('/live', (_req, res) => {
    try {
      models.current;
      res.json({ status: 'alive' });
    } catch (err) {
      sendError(res, err as ApiError);
    }
  });
  router.get('/ready', (_req, res) => {
    let status = 'ready';
    try {
      const model = models.current;
      if (lifecycle.draining) status = 'draining';
      else if (!model) status = 'loading model';
      else if (model.engine.isSleeping()) status = 'sleeping';
    } catch {
      status = 'failed';
    }
    res.status(status === 'ready' ? 200 : 503).json({ status });
  });
  return router;
}
