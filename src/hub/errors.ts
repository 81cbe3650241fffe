// What goes wrong talking to the Hub, as one line a person can act on.

/** A failure to get a model from the Hub: `message` is the whole story, in one line. */
export class HubError extends Error {}

/** A Hub response that was not a success, with the Hub's own error code (X-Error-Code). */
export class HubHttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string | undefined,
    readonly url: string,
    message: string,
  ) {
    super(message);
  }
}

/** An API call (info, listing) that has not answered in this long has failed. */
const API_TIMEOUT_MS = 30_000;

/**
 * fetch for the Hub: a response that is neither 2xx nor a redirect becomes a HubHttpError,
 * so the library's calls and our own fail the same way. Calls without a signal of their
 * own (the library's API calls) time out.
 */
export const hubFetch: typeof fetch = async (input, init) => {
  const res = await fetch(input, { ...init, signal: init?.signal ?? AbortSignal.timeout(API_TIMEOUT_MS) });
  if (res.ok) return res;
  const body = await res.text().catch(() => '');
  let message = res.headers.get('x-error-message') ?? '';
  if (!message) {
    try {
      message = (JSON.parse(body) as { error?: string }).error ?? '';
    } catch {
      message = body.slice(0, 200);
    }
  }
  throw new HubHttpError(res.status, res.headers.get('x-error-code') ?? undefined, res.url || String(input), message);
};

/** The system error code behind a failed fetch (ECONNREFUSED, ENOTFOUND...), or undefined
 *  when `err` is not a network failure. */
export function networkFailure(err: unknown): string | undefined {
  if (err instanceof HubHttpError || err instanceof HubError || !(err instanceof Error)) return undefined;
  if (err.name === 'TimeoutError' || err.name === 'AbortError') return 'timed out';
  // undici's "fetch failed" (or "terminated") carries the system error as its cause.
  let e: unknown = err;
  let innermost = err.message;
  for (let depth = 0; e instanceof Error && depth < 4; depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string') return code;
    innermost = e.message;
    e = e.cause;
  }
  return err instanceof TypeError && /fetch failed|terminated/.test(err.message) ? innermost : undefined;
}

export interface HubContext {
  endpoint: string;
  repo: string;
  revision: string;
  tokenSet: boolean;
  /** The file being fetched, for errors of the resolve endpoint. */
  path?: string;
}

/** A HubHttpError as a HubError that says what happened and what to do. */
export function describeHttpError(err: HubHttpError, ctx: HubContext): HubError {
  const { repo, revision, endpoint, tokenSet } = ctx;
  const page = `${endpoint}/${repo}`;
  const tokenHint = tokenSet ? 'the token in --hf-token / HF_TOKEN has no access to it' : 'if it is private, set HF_TOKEN (or --hf-token) to a token that can read it';
  switch (err.code) {
    case 'RepoNotFound':
      return new HubError(`model ${repo} not found on ${endpoint} (HTTP ${err.status}); ${tokenHint}`);
    case 'GatedRepo':
      return new HubError(
        `model ${repo} is gated: accept its conditions at ${page}, then ${tokenSet ? 'retry (the token given has no access yet)' : 'set HF_TOKEN (or --hf-token) to a token of that account'}`,
      );
    case 'RevisionNotFound':
      return new HubError(`revision "${revision}" not found in ${repo} on ${endpoint}`);
    case 'EntryNotFound':
      return new HubError(`file ${ctx.path ?? '?'} not found in ${repo} at revision ${revision}`);
  }
  if (err.status === 401) {
    return new HubError(tokenSet ? `${endpoint} refused the token in --hf-token / HF_TOKEN (HTTP 401) for ${repo}` : `model ${repo} needs a token (HTTP 401): set HF_TOKEN or --hf-token`);
  }
  if (err.status === 403) return new HubError(`access to ${repo} denied (HTTP 403${err.message ? `: ${err.message}` : ''}); ${tokenHint}`);
  if (err.status === 404) return new HubError(`model ${repo} (revision "${revision}") not found on ${endpoint} (HTTP 404); ${tokenHint}`);
  return new HubError(`${endpoint} answered HTTP ${err.status} for ${err.url}${err.message ? `: ${err.message}` : ''}`);
}
