// Fetches a media URL under the remote policy: http and https only, no credentials in
// the URL, and every address it would reach allowed by the address policy (public only,
// unless MLXCEL_ALLOW_PRIVATE_MEDIA_URLS=1):
// the host's resolved addresses are checked before connecting and the connection is pinned
// to the checked one, each redirect (at most MAX_REDIRECTS) is checked the same way, and
// the socket's peer address is checked again once connected. The whole fetch, redirects
// included, has REMOTE_TIMEOUT_MS; the body is counted while it streams and the fetch
// stops (413) as soon as it passes the byte limit.
import { lookup } from 'node:dns/promises';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { isIP, type LookupFunction, type Socket } from 'node:net';
import { ApiError, badRequest } from '../errors.js';

export const MAX_REDIRECTS = 5;
const REMOTE_TIMEOUT_MS = 10_000;

export interface RemoteFetchOptions {
  /** Why an address may not be reached (the range it lies in), or undefined when it may. */
  refuseAddress: (address: string) => string | undefined;
  /** The body's byte limit (--max-image-payload-size). */
  maxBytes: number;
  /** What the limit is called in the 413 message. */
  limitName: string;
  timeoutMs?: number;
}

/** 413 for media past its byte limit, `limitName` being the flag that sets it. */
export const mediaTooLarge = (limitName: string, maxBytes: number) =>
  new ApiError(413, 'invalid_request_error', `media payload exceeds ${limitName} (${maxBytes} bytes)`);

const REDIRECTS = new Set([301, 302, 303, 307, 308]);

export async function fetchRemote(url: URL, options: RemoteFetchOptions): Promise<Buffer> {
  const timeoutMs = options.timeoutMs ?? REMOTE_TIMEOUT_MS;
  const signal = AbortSignal.timeout(timeoutMs);
  try {
    let current = url;
    for (let redirects = 0; ; redirects++) {
      checkUrl(current);
      const address = await withSignal(resolveAllowed(current.hostname, options.refuseAddress), signal);
      const res = await get(current, address, options.refuseAddress, signal);
      const location = res.headers.location;
      if (REDIRECTS.has(res.statusCode ?? 0) && location) {
        res.destroy();
        if (redirects === MAX_REDIRECTS) throw badRequest(`media URL refused: more than ${MAX_REDIRECTS} redirects`);
        current = new URL(location, current);
        continue;
      }
      if (!res.statusCode || res.statusCode < 200 || res.statusCode > 299) {
        res.destroy();
        throw badRequest(`media URL fetch failed: ${current.host} answered HTTP ${res.statusCode}`);
      }
      return await readBounded(res, options);
    }
  } catch (err) {
    if (err instanceof ApiError) throw err;
    if (signal.aborted) throw badRequest(`media URL refused: no complete answer within ${timeoutMs / 1000} s`);
    throw badRequest(`media URL fetch failed: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
}

function checkUrl(url: URL): void {
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw badRequest(`media URL refused: only http and https URLs are fetched, not ${url.protocol}`);
  if (url.username || url.password) throw badRequest('media URL refused: credentials in the URL are not allowed');
}

interface Address {
  address: string;
  family: 4 | 6;
}

/** The address to connect to; every address the host resolves to must be allowed. */
async function resolveAllowed(hostname: string, refuseAddress: RemoteFetchOptions['refuseAddress']): Promise<Address> {
  const host = hostname.replace(/^\[(.*)\]$/, '$1');
  const family = isIP(host);
  const addresses: Address[] = family !== 0 ? [{ address: host, family: family as 4 | 6 }] : ((await lookup(host, { all: true })) as Address[]);
  for (const { address } of addresses) {
    const range = refuseAddress(address);
    if (range) throw refusedAddress(hostname, address, range);
  }
  return addresses[0]!;
}

function refusedAddress(hostname: string, address: string, range: string): ApiError {
  const via = hostname.replace(/^\[(.*)\]$/, '$1') === address ? '' : ` (${hostname} resolves to ${address})`;
  return badRequest(`media URL refused: ${address} is a non-public address, ${range}${via}; set MLXCEL_ALLOW_PRIVATE_MEDIA_URLS=1 to allow private addresses`);
}

function get(url: URL, pinned: Address, refuseAddress: RemoteFetchOptions['refuseAddress'], signal: AbortSignal): Promise<IncomingMessage> {
  // The connection goes to the checked address whatever DNS would answer now.
  const pin: LookupFunction = (_host, opts, callback) => {
    if (opts.all) (callback as unknown as (e: null, all: Address[]) => void)(null, [pinned]);
    else callback(null, pinned.address, pinned.family);
  };
  return new Promise((resolve, reject) => {
    const req = (url.protocol === 'https:' ? httpsRequest : httpRequest)(url, { lookup: pin, agent: false, signal, headers: { accept: 'image/*,*/*;q=0.5' } }, resolve);
    req.on('error', reject);
    req.on('socket', (socket: Socket) => {
      socket.once('connect', () => {
        const peer = socket.remoteAddress;
        const range = peer === undefined ? undefined : refuseAddress(peer);
        if (range) req.destroy(refusedAddress(url.hostname, peer!, range));
      });
    });
    req.end();
  });
}

async function readBounded(res: IncomingMessage, options: RemoteFetchOptions): Promise<Buffer> {
  const tooLarge = () => mediaTooLarge(options.limitName, options.maxBytes);
  const declared = Number(res.headers['content-length']);
  if (declared > options.maxBytes) {
    res.destroy();
    throw tooLarge();
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of res as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > options.maxBytes) {
      res.destroy();
      throw tooLarge();
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

function withSignal<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise((resolve, reject) => {
    const abort = () => reject(signal.reason);
    if (signal.aborted) abort();
    signal.addEventListener('abort', abort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', abort));
  });
}
