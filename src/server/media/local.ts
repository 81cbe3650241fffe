// Reads a local media file under a local policy: nothing without a root; with roots (an
// image's --media-path, a video's MLXCEL_VIDEO_DIR_ALLOWLIST), only a regular file whose
// real path (symlinks resolved) lies under one root's real path, named without "..", with
// no path component over NAME_MAX bytes. The file is opened without following a final
// symlink and checked on the open descriptor, so it cannot be swapped between the check and
// the read. Messages name the rule, never the file's bytes.
import { constants } from 'node:fs';
import { open, realpath } from 'node:fs/promises';
import { isAbsolute, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { badRequest } from '../errors.js';
import { mediaTooLarge } from './remote.js';

/** The longest file name most filesystems take, in bytes. */
const NAME_MAX = 255;

export interface LocalReadOptions {
  /** The directories files may be read under; none: local paths are refused. */
  roots: readonly string[];
  /** The setting that lists the roots, as refusals name it. */
  rootsName: string;
  /** How to allow local paths, for the refusal when there are no roots. */
  enable: string;
  maxBytes: number;
  limitName: string;
}

export async function readLocal(location: string, options: LocalReadOptions): Promise<Buffer> {
  if (options.roots.length === 0) throw badRequest(`local media path refused: ${options.enable}`);
  const path = toPath(location);
  if (!isAbsolute(path)) throw badRequest('local media path refused: the path must be absolute');
  const parts = path.split(sep);
  if (parts.includes('..')) throw badRequest('local media path refused: ".." is not allowed in a media path');
  if (parts.some((part) => Buffer.byteLength(part) > NAME_MAX)) throw badRequest(`local media path refused: a path component is longer than ${NAME_MAX} bytes`);
  const real = await realpath(path).catch(() => {
    throw badRequest(`local media path refused: no such file under ${options.rootsName}`);
  });
  const roots = await Promise.all(options.roots.map((root) => realpath(root).catch(() => undefined)));
  const under = (root: string | undefined) => root !== undefined && real.startsWith(root.endsWith(sep) ? root : root + sep);
  if (!roots.some(under)) throw badRequest(`local media path refused: the file is not under ${options.rootsName} (symlinks resolved)`);
  const file = await open(real, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK).catch(() => {
    throw badRequest('local media path refused: the file cannot be opened');
  });
  try {
    const stat = await file.stat();
    if (!stat.isFile()) throw badRequest('local media path refused: not a regular file');
    if (stat.size > options.maxBytes) throw mediaTooLarge(options.limitName, options.maxBytes);
    return await file.readFile();
  } finally {
    await file.close();
  }
}

function toPath(location: string): string {
  if (!location.startsWith('file:')) return location;
  try {
    return fileURLToPath(location);
  } catch (err) {
    throw badRequest(`local media path refused: ${(err as Error).message}`);
  }
}
