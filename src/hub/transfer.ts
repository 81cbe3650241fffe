// One file from the Hub into its blob, robustly: bytes go to blobs/<etag>.incomplete (a
// partial one is resumed with an HTTP Range request), are checked against the Hub's size
// and hash, and only then renamed to blobs/<etag>, so a crash never leaves a truncated file
// under the name that means "complete".
import { createHash, type Hash } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { rename, rm, writeFile } from 'node:fs/promises';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream } from 'node:stream/web';
import { HubError, hubFetch, HubHttpError, networkFailure } from './errors.js';
import { fileSize } from './cache.js';
import { formatBytes } from './progress.js';

export interface BlobJob {
  /** "org/name/path", for messages. */
  label: string;
  /** The resolve URL at a commit. */
  url: string;
  size: number;
  /** The Hub's etag: an LFS file's sha256, else the git blob oid (sha1 of "blob <size>\0" + bytes). */
  etag: string;
  lfs: boolean;
  /** blobs/<etag>. */
  dest: string;
}

export interface TransferOptions {
  token?: string;
  /** Network failures retried (resuming) before giving up. */
  retries: number;
  retryDelayMs: number;
  /** Bytes written (negative: bytes thrown away). */
  onBytes(n: number): void;
  /** A transfer that delivers nothing for this long counts as a network failure. */
  stallMs: number;
  /** Aborts the transfer for good (another file failed). */
  signal?: AbortSignal;
}

export const TRANSFER_DEFAULTS = { retries: 4, retryDelayMs: 1000, stallMs: 60_000 };

/** A file that arrived whole but with the wrong bytes is fetched again this many times. */
const REFETCHES = 1;

export async function fetchBlob(job: BlobJob, options: TransferOptions): Promise<void> {
  const partial = `${job.dest}.incomplete`;
  let failures = 0;
  let refetches = 0;
  // An empty file needs no transfer, only its (empty) partial to verify and rename.
  if (job.size === 0) await writeFile(partial, '');
  for (;;) {
    let have = (await fileSize(partial)) ?? 0;
    if (have > job.size) {
      await rm(partial, { force: true });
      have = 0;
    }
    try {
      if (have < job.size) have = await transfer(job, partial, have, options);
    } catch (err) {
      if (options.signal?.aborted) throw err;
      // Network failures and the server errors of a busy CDN are retried; the rest are final.
      const cause = networkFailure(err) ?? (err instanceof HubHttpError && err.status >= 500 ? `HTTP ${err.status}` : undefined);
      if (cause === undefined) throw diskError(err, job) ?? err;
      if (failures++ >= options.retries) {
        const kept = (await fileSize(partial)) ?? 0;
        throw new HubError(`download of ${job.label} interrupted (${cause}) at ${formatBytes(kept)} of ${formatBytes(job.size)}; start again to resume it`);
      }
      await new Promise((r) => setTimeout(r, options.retryDelayMs * failures));
      continue;
    }
    const digest = await digestOf(job, partial);
    if (have === job.size && digest === job.etag) {
      await rename(partial, job.dest);
      return;
    }
    await rm(partial, { force: true });
    options.onBytes(-have);
    if (refetches++ >= REFETCHES) {
      throw new HubError(`${job.label} failed verification twice (${formatBytes(have)} with ${job.lfs ? 'sha256' : 'git oid'} ${digest}, expected ${formatBytes(job.size)} with ${job.etag})`);
    }
  }
}

/** Appends the bytes from `have` on to `partial`; returns its size after. */
async function transfer(job: BlobJob, partial: string, have: number, options: TransferOptions): Promise<number> {
  const controller = new AbortController();
  let stall = setTimeout(() => controller.abort(new Error('stalled')), options.stallMs);
  try {
    const res = await hubFetch(job.url, {
      headers: { ...(options.token ? { Authorization: `Bearer ${options.token}` } : {}), ...(have > 0 ? { Range: `bytes=${have}-` } : {}) },
      signal: options.signal ? AbortSignal.any([controller.signal, options.signal]) : controller.signal,
    });
    if (!res.body) throw new HubError(`${job.label}: empty response from the Hub`);
    // A server that ignores Range sends the whole file: start over.
    const from = res.status === 206 ? rangeStart(res.headers.get('content-range')) : 0;
    if (from !== have) {
      if (from !== 0) throw new HubError(`${job.label}: the Hub answered a request for bytes from ${have} with bytes from ${from}`);
      options.onBytes(-have);
      have = 0;
    }
    const counter = new Transform({
      transform(chunk: Buffer, _enc, done) {
        clearTimeout(stall);
        stall = setTimeout(() => controller.abort(new Error('stalled')), options.stallMs);
        options.onBytes(chunk.length);
        done(null, chunk);
      },
    });
    await pipeline(Readable.fromWeb(res.body as ReadableStream), counter, createWriteStream(partial, { flags: have > 0 ? 'a' : 'w' }));
  } catch (err) {
    // An abort for a stall surfaces as an AbortError: report it as the network failure it is.
    if (controller.signal.aborted && !options.signal?.aborted) throw Object.assign(new Error('no data for a while'), { code: 'stalled' });
    throw err;
  } finally {
    clearTimeout(stall);
  }
  return (await fileSize(partial)) ?? 0;
}

function rangeStart(header: string | null): number {
  const m = /^bytes (\d+)-/.exec(header ?? '');
  return m ? Number(m[1]) : NaN;
}

/** The file's hash in the etag's terms: sha256 for LFS, git's blob sha1 otherwise. */
async function digestOf(job: BlobJob, path: string): Promise<string> {
  let hash: Hash;
  if (job.lfs) {
    hash = createHash('sha256');
  } else {
    hash = createHash('sha1');
    hash.update(`blob ${(await fileSize(path)) ?? 0}\0`);
  }
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

function diskError(err: unknown, job: BlobJob): HubError | undefined {
  const code = (err as { code?: string }).code;
  if (code === 'ENOSPC' || code === 'EDQUOT') return new HubError(`disk full while writing ${job.label} to ${job.dest}.incomplete; free some space and start again to resume`);
  return undefined;
}
