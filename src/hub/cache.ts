// The hub cache as Python's huggingface_hub lays it out, so a model fetched by either tool
// serves the other:
//   <cache>/models--org--name/blobs/<etag>                  file contents, named by the Hub's
//                                                            etag (LFS sha256, else git oid)
//   <cache>/models--org--name/snapshots/<commit>/<path>     relative symlink into blobs/
//   <cache>/models--org--name/refs/<revision>               the commit a branch/tag was at
import { getRepoFolderName } from '@huggingface/hub';
import { mkdir, readFile, rename, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { dirname, join, relative } from 'node:path';
import { isCommitHash } from './repo-ref.js';

export class RepoCache {
  readonly dir: string;

  constructor(cacheDir: string, readonly repo: string) {
    this.dir = join(cacheDir, getRepoFolderName({ type: 'model', name: repo }));
  }

  blob(etag: string): string {
    return join(this.dir, 'blobs', etag);
  }

  snapshot(commit: string): string {
    return join(this.dir, 'snapshots', commit);
  }

  /** The commit `revision` names in the cache: itself when a hash, else what refs/ records. */
  async commitOf(revision: string): Promise<string | undefined> {
    if (isCommitHash(revision)) return revision;
    try {
      const commit = (await readFile(join(this.dir, 'refs', revision), 'utf8')).trim();
      return isCommitHash(commit) ? commit : undefined;
    } catch {
      return undefined;
    }
  }

  /** Records that `revision` (a branch or tag) is at `commit`, as Python does (no newline). */
  async writeRef(revision: string, commit: string): Promise<void> {
    if (isCommitHash(revision)) return;
    const ref = join(this.dir, 'refs', revision);
    await mkdir(dirname(ref), { recursive: true });
    await writeFile(`${ref}.tmp`, commit);
    await rename(`${ref}.tmp`, ref);
  }

  /** Points snapshots/<commit>/<path> at blobs/<etag> with a relative link (atomically). */
  async link(commit: string, path: string, etag: string): Promise<void> {
    const link = join(this.snapshot(commit), path);
    await mkdir(dirname(link), { recursive: true });
    const tmp = `${link}.tmp-link`;
    await rm(tmp, { force: true });
    await symlink(relative(dirname(link), this.blob(etag)), tmp);
    await rename(tmp, link);
  }
}

/** A file's size through symlinks, or undefined when it (or its blob) is missing. */
export async function fileSize(path: string): Promise<number | undefined> {
  try {
    return (await stat(path)).size;
  } catch {
    return undefined;
  }
}
