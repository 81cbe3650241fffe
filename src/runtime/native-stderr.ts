// Keeps chosen lines that native code writes to file descriptor 2 itself (Dawn's fprintf to
// stderr, which never passes through process.stderr) out of the output during one synchronous
// call. Node has no dup2, so fd 2 is closed and a capture file opened in its place (open takes
// the lowest free descriptor); afterwards the original target is reopened through
// /proc/self/fd, which gives back the same terminal or pipe, and the captured lines not chosen
// are passed on. A socket or regular file cannot come back that way (ENXIO; an offset shared
// with stdout), so for those, and off Linux, the call runs with stderr as it is.
import { closeSync, constants, fstatSync, openSync, readSync, unlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const { O_NOCTTY, O_NONBLOCK, O_WRONLY } = constants;

/** Runs `call`; the lines it writes to fd 2 that match `drop` are not printed. */
export function withoutStderrLines<T>(drop: RegExp, call: () => T): T {
  const flags = reopenFlags();
  const original = flags === undefined ? undefined : tryOpen('/proc/self/fd/2', flags);
  if (flags === undefined || original === undefined) return call();
  const path = join(tmpdir(), `mlxcel-stderr-${process.pid}`);
  const capture = tryOpen(path, 'wx+', 0o600);
  if (capture === undefined) {
    closeSync(original);
    return call();
  }
  unlinkSync(path);
  const restore = () => openAsStderr(`/proc/self/fd/${original}`, flags) || openAsStderr('/dev/null', O_WRONLY);
  try {
    closeSync(2);
    // The close and the open are adjacent: only a file another thread opened between them
    // could take fd 2, and then it is that thread's to keep.
    if (!openAsStderr(`/proc/self/fd/${capture}`, O_WRONLY)) {
      if (!isOpen(2)) restore();
      return call();
    }
    try {
      return call();
    } finally {
      closeSync(2);
      restore();
    }
  } finally {
    closeSync(original);
    const kept = captured(capture).split('\n').filter((line) => !drop.test(line)).join('\n');
    closeSync(capture);
    if (kept.length > 0) process.stderr.write(kept);
  }
}

/** The flags that reopen fd 2's target as the same stream, or undefined where none do. */
function reopenFlags(): number | undefined {
  // A write queued on process.stderr would be left waiting on the closed descriptor.
  if (process.platform !== 'linux' || !isOpen(2) || process.stderr.writableLength > 0) return undefined;
  const stat = fstatSync(2);
  // Non-blocking, opening a pipe whose reader has gone fails rather than waits (libuv keeps
  // its pipes non-blocking too). A terminal must not become the controlling one.
  if (stat.isFIFO()) return O_WRONLY | O_NONBLOCK;
  if (stat.isCharacterDevice()) return O_WRONLY | O_NOCTTY;
  return undefined;
}

/** Opens `path` as fd 2, which must be free; false when the open failed or took another descriptor. */
function openAsStderr(path: string, flags: number): boolean {
  const fd = tryOpen(path, flags);
  if (fd !== undefined && fd !== 2) closeSync(fd);
  return fd === 2;
}

function tryOpen(path: string, flags: number | string, mode?: number): number | undefined {
  try {
    return openSync(path, flags, mode);
  } catch {
    return undefined;
  }
}

function isOpen(fd: number): boolean {
  try {
    fstatSync(fd);
    return true;
  } catch {
    return false;
  }
}

function captured(fd: number): string {
  const bytes = Buffer.alloc(fstatSync(fd).size);
  let done = 0;
  while (done < bytes.length) {
    const n = readSync(fd, bytes, done, bytes.length - done, done);
    if (n === 0) break;
    done += n;
  }
  return bytes.toString('utf8', 0, done);
}
