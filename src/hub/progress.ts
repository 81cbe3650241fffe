// Download progress a person can read: on a terminal one bar redrawn in place (bytes, rate,
// ETA); otherwise (a log, CI) a plain line every few seconds. /health reads snapshot().

export interface ProgressOutput {
  write(text: string): unknown;
  isTTY?: boolean;
  columns?: number;
}

export type DownloadSnapshot = {
  stage: 'download';
  repo: string;
  files_done: number;
  files_total: number;
  bytes_done: number;
  bytes_total: number;
};

const BAR_EVERY_MS = 200;
const LINE_EVERY_MS = 5000;
/** The rate is measured over this much recent time. */
const RATE_WINDOW_MS = 5000;
/** " 42% 1.23 GB / 4.56 GB 12.3 MB/s ETA 3m05s", padded. */
const TAIL_WIDTH = 42;

export class DownloadProgress {
  private bytesDone = 0;
  private filesDone = 0;
  private readonly samples: { t: number; bytes: number }[] = [];
  private readonly timer: NodeJS.Timeout;

  /** `done`: bytes already on disk (resumed), counted as done but not toward the rate. */
  constructor(
    private readonly out: ProgressOutput,
    private readonly prefix: string,
    private readonly repo: string,
    private readonly bytesTotal: number,
    private readonly filesTotal: number,
    done = 0,
  ) {
    this.bytesDone = done;
    this.samples.push({ t: Date.now(), bytes: done });
    this.timer = setInterval(() => this.render(), out.isTTY ? BAR_EVERY_MS : LINE_EVERY_MS);
    this.timer.unref();
    if (out.isTTY) this.render();
  }

  add(bytes: number): void {
    this.bytesDone += bytes;
  }

  /** Bytes that were counted but had to be thrown away (a file that failed verification). */
  discard(bytes: number): void {
    this.bytesDone -= bytes;
  }

  fileDone(): void {
    this.filesDone++;
  }

  /** Takes the bar off the terminal line so another line can be printed; it is redrawn next tick. */
  clear(): void {
    if (this.out.isTTY) this.out.write('\r\x1b[K');
  }

  /** Stops redrawing; on a terminal, leaves the final bar on its own line. */
  finish(): void {
    clearInterval(this.timer);
    if (this.out.isTTY) {
      this.render();
      this.out.write('\n');
    }
  }

  snapshot(): DownloadSnapshot {
    return { stage: 'download', repo: this.repo, files_done: this.filesDone, files_total: this.filesTotal, bytes_done: this.bytesDone, bytes_total: this.bytesTotal };
  }

  private render(): void {
    const now = Date.now();
    this.samples.push({ t: now, bytes: this.bytesDone });
    while (this.samples.length > 2 && now - this.samples[1]!.t >= RATE_WINDOW_MS) this.samples.shift();
    const first = this.samples[0]!;
    const rate = now > first.t ? ((this.bytesDone - first.bytes) * 1000) / (now - first.t) : 0;
    const left = this.bytesTotal - this.bytesDone;
    const eta = rate > 0 ? formatDuration(left / rate) : '?';
    const fraction = this.bytesTotal > 0 ? Math.min(1, this.bytesDone / this.bytesTotal) : 1;
    const percent = `${Math.floor(fraction * 100)}%`;
    const amounts = `${formatBytes(this.bytesDone)} / ${formatBytes(this.bytesTotal)}`;
    if (this.out.isTTY) {
      // The tail keeps one width, so the bar does not shift as the numbers change.
      const tail = `${percent.padStart(4)} ${amounts} ${formatBytes(rate)}/s ETA ${eta}`.padEnd(TAIL_WIDTH);
      this.out.write(`\r${barLine(this.repo, fraction, tail, this.out.columns ?? 80)}\x1b[K`);
    } else {
      this.out.write(`${this.prefix}downloading ${this.repo}: ${percent} (${amounts}, file ${this.filesDone} of ${this.filesTotal} done), ${formatBytes(rate)}/s, ETA ${eta}\n`);
    }
  }
}

/** "org/name [#####.....] <tail>" in the terminal's width: the bar gets 10 to 30 columns,
 *  a long repo name is cut to leave it 10; a terminal too narrow for that gets no bar. */
export function barLine(repo: string, fraction: number, tail: string, columns: number): string {
  const room = columns - 1 - tail.length - 4;
  if (room < 18) return `${repo} ${tail}`.slice(0, columns - 1);
  const label = repo.length > room - 10 ? `${repo.slice(0, room - 11)}~` : repo;
  const width = Math.min(30, room - label.length);
  const filled = Math.round(fraction * width);
  return `${label} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${tail}`;
}

/** Decimal units, as the Hub shows sizes: "1.23 GB". */
export function formatBytes(n: number): string {
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) {
    n /= 1000;
    i++;
  }
  return i === 0 ? `${Math.round(n)} B` : `${n.toFixed(n < 10 ? 2 : n < 100 ? 1 : 0)} ${units[i]}`;
}

/** "42s", "3m05s", "1h02m". */
export function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds)) return '?';
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}
