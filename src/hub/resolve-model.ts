// The one step every model flag goes through: a local directory is used as it is; a Hub
// repo id becomes a snapshot directory in the hub cache, downloaded if need be.
import { existsSync, statSync } from 'node:fs';
import { resolve } from 'node:path';
import { HubError } from './errors.js';
import { parseRepoRef, type RepoRef } from './repo-ref.js';
import type { HubSettings } from './settings.js';
import { snapshotFromHub, type SnapshotOptions } from './snapshot.js';

/** A model flag's value: a Hub repo (-hf), or a directory or a repo id (--model): a
 *  directory when one exists at that path. */
export type ModelArg = { kind: 'repo'; ref: RepoRef } | { kind: 'path-or-repo'; text: string };

export interface ResolvedModel {
  dir: string;
  /** The model's name when it came from the Hub ("org/name"); a directory's is its own name. */
  id?: string;
}

/** `flag` names the option in errors (--spec-draft-model resolves the same way). */
export async function resolveModel(arg: ModelArg, settings: HubSettings, options: SnapshotOptions, flag = '--model'): Promise<ResolvedModel> {
  let ref: RepoRef;
  if (arg.kind === 'repo') {
    ref = arg.ref;
  } else if (existsSync(arg.text)) {
    if (!statSync(arg.text).isDirectory()) throw new HubError(`${flag} ${arg.text} is a file; give the checkpoint's directory`);
    return { dir: resolve(arg.text) };
  } else {
    const parsed = parseRepoRef(arg.text);
    if (!parsed) throw new HubError(`${flag} ${arg.text}: no such directory, and not a Hub repo id (org/name[:revision])`);
    ref = parsed;
  }
  const snapshot = await snapshotFromHub(ref, settings, options);
  return { dir: snapshot.dir, id: ref.repo };
}
