// The load's progress after the download's: tensors uploaded and pipelines compiled. The load
// blocks the event loop, so this draws from the engine's callbacks (terminal and pipe writes
// are synchronous on Linux and macOS), not from a timer: on a terminal a bar at most every
// 100 ms, in a log a line every 5 s of loading.
import type { LoadProgress } from './models/model.js';
import { barLine, type ProgressOutput } from './hub/progress.js';

const BAR_EVERY_MS = 100;
const LINE_EVERY_MS = 5000;

export class LoadDisplay {
  private progress: LoadProgress = { tensors: 0, tensorsTotal: 0, pipelines: 0 };
  private drawnAt = Date.now();
  private onLine = false;

  constructor(
    private readonly out: ProgressOutput,
    private readonly prefix: string,
  ) {}

  update(progress: LoadProgress): void {
    this.progress = { ...progress };
    const now = Date.now();
    if (now - this.drawnAt < (this.out.isTTY ? BAR_EVERY_MS : LINE_EVERY_MS)) return;
    this.drawnAt = now;
    const { tensors, tensorsTotal, pipelines } = this.progress;
    if (this.out.isTTY) {
      const tail = `${tensors}/${tensorsTotal} tensors, ${pipelines} pipelines`;
      this.out.write(`\r${barLine('loading', tensorsTotal > 0 ? tensors / tensorsTotal : 0, tail, this.out.columns ?? 80)}\x1b[K`);
      this.onLine = true;
    } else {
      this.out.write(`${this.prefix}loading: ${tensors} of ${tensorsTotal} tensors uploaded, ${pipelines} pipelines compiled\n`);
    }
  }

  /** Takes the bar off the terminal line so another line can be printed. */
  clear(): void {
    if (!this.onLine) return;
    this.out.write('\r\x1b[K');
    this.onLine = false;
  }

  snapshot() {
    const { tensors, tensorsTotal, pipelines } = this.progress;
    return { stage: 'load', tensors_done: tensors, tensors_total: tensorsTotal, pipelines_compiled: pipelines };
  }
}
