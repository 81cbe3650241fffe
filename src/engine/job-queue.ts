// The bounded request queue of a model served by its own worker (the embedder, the
// transcriber, the speaker): a request is refused at once when the queue is full, rejected
// when it has not finished within the timeout, and the worker runs while jobs are queued.
// How the worker takes jobs is its own: all queued at once (the embedder packs them into
// passes) or one at a time in order (take()).
import type { Gpu } from '../runtime/gpu.js';
import { QueueFullError } from './types.js';

/** --audio-queue-depth and --audio-request-timeout-secs: the audio workers' (transcriber, speaker) queue. */
export const AUDIO_QUEUE_DEFAULTS = { maxQueue: 8, timeoutSecs: 120 } as const;

/** How an audio worker (the transcriber, the speaker) is loaded. */
export interface AudioWorkerOptions {
  modelDir: string;
  alias?: string;
  /** Requests that may wait behind the running one. */
  maxQueue: number;
  /** A request not finished this long after it queued is rejected with the worker's timeout error. */
  timeoutMs: number;
  backend?: string;
  quietDawn?: boolean;
  /** An already opened device to load onto (beside a chat model). */
  gpu?: Gpu;
  log?: (line: string) => void;
}

export interface Job<Req, Res> {
  readonly request: Req;
  /** performance.now() past which the job has timed out, whether or not its timer has fired yet
   *  (a long stretch of GPU work can hold the event loop past it). */
  readonly deadline: number;
  done: boolean;
  resolve(result: Res): void;
  reject(error: Error): void;
  timer: NodeJS.Timeout;
}

export interface JobQueueOptions {
  /** Unfinished jobs (waiting or running) the queue holds; one more is refused with QueueFullError. */
  capacity: number;
  timeoutMs: number;
  /** The rejection of a job past its timeout. */
  timeoutError: (ms: number) => Error;
  /** What the worker does while jobs are queued; called again until none is left. */
  drain: () => Promise<void>;
}

export class JobQueue<Req, Res> {
  /** Jobs not yet taken, in order. */
  readonly waiting: Array<Job<Req, Res>> = [];
  /** Jobs taken by the worker's current drain: they count as pending until it returns, finished or not (a timed-out job's work still holds the worker). */
  private readonly taken = new Set<Job<Req, Res>>();
  private running = false;
  private closed = false;

  constructor(private readonly options: JobQueueOptions) {}

  /** Jobs waiting or running. */
  get pending(): number {
    return this.waiting.length + this.taken.size;
  }

  get timeoutError(): Error {
    return this.options.timeoutError(this.options.timeoutMs);
  }

  /** Queues the request. Throws QueueFullError synchronously when the queue is full. */
  push(request: Req): Promise<Res> {
    if (this.closed) throw new Error('the server is shutting down');
    if (this.pending >= this.options.capacity) throw new QueueFullError(this.waiting.length);
    return new Promise((resolve, reject) => {
      const job: Job<Req, Res> = {
        request, resolve, reject, done: false, deadline: performance.now() + this.options.timeoutMs,
        timer: setTimeout(() => this.finish(job, this.timeoutError), this.options.timeoutMs),
      };
      this.waiting.push(job);
      void this.work();
    });
  }

  /** The next waiting job, now running. */
  take(): Job<Req, Res> | undefined {
    const job = this.waiting.shift();
    if (job) this.taken.add(job);
    return job;
  }

  /** Whether the job may go on: not finished, and not past its deadline. */
  live(job: Job<Req, Res>): boolean {
    return !job.done && performance.now() <= job.deadline;
  }

  /** Settles the job (once): with the error, else with the result. */
  finish(job: Job<Req, Res>, error?: Error, result?: Res): void {
    if (job.done) return;
    job.done = true;
    clearTimeout(job.timer);
    const i = this.waiting.indexOf(job);
    if (i >= 0) this.waiting.splice(i, 1);
    if (error) job.reject(error);
    else job.resolve(result!);
  }

  /** Rejects every job and waits for the worker to stop. */
  async close(): Promise<void> {
    this.closed = true;
    for (const job of [...this.waiting, ...this.taken]) this.finish(job, new Error('the server is shutting down'));
    while (this.running) await new Promise((r) => setTimeout(r, 10));
  }

  private async work(): Promise<void> {
    if (this.running) return;
    this.running = true;
    try {
      while (this.waiting.length > 0) {
        try {
          await this.options.drain();
        } finally {
          this.taken.clear();
        }
      }
    } finally {
      this.running = false;
    }
  }
}
