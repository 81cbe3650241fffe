// A Hub model's loader files in the local hub cache: from the cache alone when offline (or
// when the Hub cannot be reached), else resolved to a commit, listed, and the missing files
// fetched in parallel under one progress display.
import { listFiles, modelInfo, type ListFileEntry } from '@huggingface/hub';
import { mkdir, statfs } from 'node:fs/promises';
import { join } from 'node:path';
import { fileSize, RepoCache } from './cache.js';
import { describeHttpError, HubError, hubFetch, HubHttpError, networkFailure, type HubContext } from './errors.js';
import { DownloadProgress, formatBytes, formatDuration, type ProgressOutput } from './progress.js';
import { formatRepoRef, type RepoRef } from './repo-ref.js';
import { missingFiles, pickFiles, shardsOf } from './select-files.js';
import type { HubSettings } from './settings.js';
import { fetchBlob, TRANSFER_DEFAULTS, type TransferOptions } from './transfer.js';

export interface SnapshotOptions {
  /** Where the progress bar or progress lines go. */
  out: ProgressOutput;
  /** Put before every line written ("mlxcel-server: "). */
  prefix: string;
  /** One line of information, and a warning (always shown). */
  log(line: string): void;
  warn(line: string): void;
  /** The live progress while files download, then undefined; for /health. */
  onProgress?(progress: DownloadProgress | undefined): void;
  transfer?: Partial<Pick<TransferOptions, 'retries' | 'retryDelayMs' | 'stallMs'>>;
}

export interface Snapshot {
  dir: string;
  commit: string;
}

/** Files fetched at once. */
const PARALLEL_FILES = 4;

export async function snapshotFromHub(ref: RepoRef, settings: HubSettings, options: SnapshotOptions): Promise<Snapshot> {
  const cache = new RepoCache(settings.cacheDir, ref.repo);
  const name = formatRepoRef(ref);
  if (settings.offline) {
    const cached = await cachedSnapshot(cache, ref.revision);
    if (typeof cached === 'string') throw new HubError(`${name} is ${cached}, and HF_HUB_OFFLINE is set: unset it to download`);
    options.log(`${name}: commit ${cached.commit.slice(0, 7)} from the cache (HF_HUB_OFFLINE), ${cached.dir}`);
    return cached;
  }
  if (settings.token && !settings.token.startsWith('hf_')) throw new HubError('the token in --hf-token / HF_TOKEN must start with "hf_"');
  const ctx: HubContext = { endpoint: settings.endpoint, repo: ref.repo, revision: ref.revision, tokenSet: settings.token !== undefined };
  const hub = { hubUrl: settings.endpoint, accessToken: settings.token, fetch: hubFetch };

  let commit: string;
  try {
    commit = (await modelInfo({ ...hub, name: ref.repo, revision: ref.revision, additionalFields: ['sha'] })).sha;
  } catch (err) {
    const cause = networkFailure(err);
    if (cause === undefined) throw err instanceof HubHttpError ? describeHttpError(err, ctx) : err;
    const cached = await cachedSnapshot(cache, ref.revision);
    if (typeof cached === 'string') throw new HubError(`cannot reach ${settings.endpoint} (${cause}) to download ${name}, and it is ${cached}`);
    options.warn(`cannot reach ${settings.endpoint} (${cause}); using the cached commit ${cached.commit.slice(0, 7)} of ${name}`);
    return cached;
  }

  const entries = new Map<string, ListFileEntry>();
  try {
    for await (const entry of listFiles({ ...hub, repo: { type: 'model', name: ref.repo }, revision: commit, recursive: true })) {
      if (entry.type === 'file') entries.set(entry.path, entry);
    }
  } catch (err) {
    const cause = networkFailure(err);
    if (cause !== undefined) throw new HubError(`lost ${settings.endpoint} (${cause}) while listing ${name}; start again to retry`);
    throw err instanceof HubHttpError ? describeHttpError(err, ctx) : err;
  }
  const pick = pickFiles(name, [...entries.keys()]);
  const fetcher = new SnapshotFetcher(cache, commit, entries, settings, ctx, options);
  const files = [...pick.files];
  if (pick.index) {
    // The index is small and says which shards the weights are in: fetch it first.
    await fetcher.fetch([pick.index], false);
    const shards = shardsOf(join(cache.snapshot(commit), pick.index));
    const absent = shards.filter((s) => !entries.has(s));
    if (absent.length > 0) throw new HubError(`${name}: ${pick.index} names ${absent.join(', ')}, which the repo does not have`);
    files.push(...shards);
  }
  await fetcher.fetch(files, true);
  await cache.writeRef(ref.revision, commit);
  return { dir: cache.snapshot(commit), commit };
}

/** The snapshot `revision` names in the cache, or why there is none ("not in the cache at ..."). */
async function cachedSnapshot(cache: RepoCache, revision: string): Promise<Snapshot | string> {
  const commit = await cache.commitOf(revision);
  if (!commit || (await fileSize(cache.snapshot(commit))) === undefined) return `not in the cache at ${cache.dir}`;
  const dir = cache.snapshot(commit);
  const missing = missingFiles(dir);
  return missing.length > 0 ? `in the cache at ${dir} but incomplete (no ${missing.join(', ')})` : { dir, commit };
}

/** Brings files of one commit into the cache: blobs fetched and verified, snapshot links made. */
class SnapshotFetcher {
  constructor(
    private readonly cache: RepoCache,
    private readonly commit: string,
    private readonly entries: Map<string, ListFileEntry>,
    private readonly settings: HubSettings,
    private readonly ctx: HubContext,
    private readonly options: SnapshotOptions,
  ) {}

  /** Fetches what of `paths` the cache lacks; `report`: with the start/finish lines and progress. */
  async fetch(paths: string[], report: boolean): Promise<void> {
    const { cache, commit, options } = this;
    // One job a blob: files with the same contents share it.
    const jobs = new Map<string, { paths: string[]; size: number; lfs: boolean; partial: number }>();
    for (const path of paths) {
      if (path.startsWith('/') || path.split('/').includes('..')) throw new HubError(`${this.ctx.repo}: refusing the file name ${path}`);
      const entry = this.entries.get(path)!;
      const etag = entry.lfs?.oid ?? entry.oid;
      if (!etag) throw new HubError(`${this.ctx.repo}: the Hub listed ${path} without a hash`);
      const size = entry.lfs?.size ?? entry.size;
      if ((await fileSize(join(cache.snapshot(commit), path))) === size) continue;
      // Python (or another revision) may have the blob already: then only the link is new.
      if ((await fileSize(cache.blob(etag))) === size) {
        await cache.link(commit, path, etag);
        continue;
      }
      const job = jobs.get(etag);
      if (job) job.paths.push(path);
      else jobs.set(etag, { paths: [path], size, lfs: entry.lfs !== undefined, partial: Math.min((await fileSize(`${cache.blob(etag)}.incomplete`)) ?? 0, size) });
    }
    const name = formatRepoRef(this.ctx);
    if (jobs.size === 0) {
      if (report) options.log(`${name}: commit ${commit.slice(0, 7)} from the cache, ${cache.snapshot(commit)}`);
      return;
    }
    const total = [...jobs.values()].reduce((n, j) => n + j.size, 0);
    const resumed = [...jobs.values()].reduce((n, j) => n + j.partial, 0);
    await mkdir(join(cache.dir, 'blobs'), { recursive: true });
    const { bavail, bsize } = await statfs(join(cache.dir, 'blobs'));
    if (total - resumed > bavail * bsize) {
      throw new HubError(`not enough disk space for ${name}: ${formatBytes(total - resumed)} to download, ${formatBytes(bavail * bsize)} free in ${cache.dir}`);
    }
    if (report) {
      options.log(`downloading ${name} (commit ${commit.slice(0, 7)}) from ${this.settings.endpoint}: ${jobs.size} file${jobs.size === 1 ? '' : 's'}, ${formatBytes(total)}${resumed > 0 ? ` (${formatBytes(resumed)} of it already there)` : ''}, into ${cache.snapshot(commit)}`);
    }
    const started = Date.now();
    const progress = report ? new DownloadProgress(options.out, options.prefix, name, total, jobs.size, resumed) : undefined;
    options.onProgress?.(progress);
    const abort = new AbortController();
    const transfer: TransferOptions = { ...TRANSFER_DEFAULTS, ...options.transfer, token: this.settings.token, signal: abort.signal, onBytes: (n) => progress?.add(n) };
    const queue = [...jobs];
    let firstError: unknown;
    const worker = async () => {
      for (let next = queue.shift(); next && !abort.signal.aborted; next = queue.shift()) {
        const [etag, job] = next;
        const path = job.paths[0]!;
        const url = `${this.settings.endpoint}/${this.ctx.repo}/resolve/${commit}/${path.split('/').map(encodeURIComponent).join('/')}`;
        try {
          await fetchBlob({ label: `${this.ctx.repo}/${path}`, url, size: job.size, etag, lfs: job.lfs, dest: cache.blob(etag) }, transfer);
        } catch (err) {
          firstError ??= err instanceof HubHttpError ? describeHttpError(err, { ...this.ctx, path }) : err;
          abort.abort();
          return;
        }
        for (const p of job.paths) await cache.link(commit, p, etag);
        progress?.fileDone();
      }
    };
    await Promise.all(Array.from({ length: Math.min(PARALLEL_FILES, jobs.size) }, worker));
    progress?.finish();
    options.onProgress?.(undefined);
    if (firstError !== undefined) throw firstError;
    if (report) options.log(`downloaded ${formatBytes(total - resumed)} in ${formatDuration((Date.now() - started) / 1000)}`);
  }
}
