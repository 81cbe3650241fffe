// Reads a local media file under the local policy: nothing without --media-path; with it,
// only a regular file whose real path (symlinks resolved) lies under the root's real path,
// named without "..", with no path component over NAME_MAX bytes. The file is opened
// without following a final symlink and checked on the open descriptor, so it cannot be
// swapped between the check and the read. Messages name the rule, never the file's bytes.
import { constants } from 'node:fs';
import { open, realpath } from 'node:fs/promises';
import { isAbsolute, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { badRequest } from '../errors.js';
import { mediaTooLarge } from './remote.js';

/** The longest file name most filesystems take, in bytes. */
const NAME_MAX = 255;

export interface LocalReadOptions {
  /** --media-path; undefined: local paths are refused. */
  root: string | undefined;
  maxBytes: number;
  limitName: string;
}

/** `location`: a file:// URL or a bare absolute path. */
export async function readLocal(location: string, options: LocalReadOptions): Promise<Buffer> {
  if (options.root === undefined) throw badRequest('local media path refused: start the server with --media-path DIR to allow files under DIR');
  const path = toPath(location);
  if (!isAbsolute(path)) throw badRequest('local media path refused: the path must be absolute');
  const parts = path.split(sep);
  if (parts.includes('..')) throw badRequest('local media path refused: ".." is not allowed in a media path');
  if (parts.some((part) => Buffer.byteLength(part) > NAME_MAX)) throw badRequest(`local media path refused: a path component is longer than ${NAME_MAX} bytes`);
  let real: string;
  let root: string;
  try {
    [real, root] = await Promise.all([realpath(path), realpath(options.root)]);
  } catch {
    throw badRequest('local media path refused: no such file under --media-path');
  }
  if (!real.startsWith(root.endsWith(sep) ? root : root + sep)) throw badRequest('local media path refused: the file is not under --media-path (symlinks resolved)');
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
