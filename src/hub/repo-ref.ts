// A Hub model named on the command line: "org/name" or "org/name:revision" (a branch, tag
// or commit hash), and whether a --model argument names one or a local directory.

export interface RepoRef {
  /** "org/name" (or a legacy single-segment "name"). */
  repo: string;
  /** Branch, tag or 40-hex commit; "main" when none was given. */
  revision: string;
}

const DEFAULT_REVISION = 'main';

// The Hub's repo-name rule: letters, digits, "-", "_", "."; no "--" or ".." and no leading
// or trailing "-"/"."; at most 96 characters a part.
const PART = /^(?![-.])(?!.*(--|\.\.))[\w.-]{1,96}(?<![-.])$/;

/** `text` as a repo reference, or undefined when it is not one. `single`: a bare "name" counts. */
export function parseRepoRef(text: string, single = false): RepoRef | undefined {
  const colon = text.indexOf(':');
  const repo = colon < 0 ? text : text.slice(0, colon);
  const revision = colon < 0 ? DEFAULT_REVISION : text.slice(colon + 1);
  const parts = repo.split('/');
  if (!(parts.length === 2 || (single && parts.length === 1)) || !parts.every((p) => PART.test(p))) return undefined;
  if (revision === '' || /\s/.test(revision)) return undefined;
  return { repo, revision };
}

export const isCommitHash = (revision: string) => /^[0-9a-f]{40}$/.test(revision);

export const formatRepoRef = (ref: RepoRef) => (ref.revision === DEFAULT_REVISION ? ref.repo : `${ref.repo}:${ref.revision}`);
