// A media part's url to its bytes, under the server's media policy: a base64 data URI, an
// http(s) URL (./remote.ts), or a file:// URL or bare absolute path (./local.ts) under the
// kind's local roots (--media-path for images, MLXCEL_VIDEO_DIR_ALLOWLIST for videos).
// Every form is bounded by --max-image-payload-size before it is decoded.
import { badRequest } from '../errors.js';
import { nonPublicRange } from './address.js';
import { decodeImage, type DecodedImage } from './image.js';
import { readLocal, type LocalReadOptions } from './local.js';
import type { MediaPolicy } from './policy.js';
import { fetchRemote, mediaTooLarge } from './remote.js';

const PAYLOAD_LIMIT = '--max-image-payload-size';

type MediaKind = 'image' | 'video';

export async function loadImage(url: string, policy: MediaPolicy): Promise<DecodedImage> {
  return decodeImage(await mediaBytes(url, policy, 'image'));
}

/** A video part's bytes; the caller hands them to the decoder (./video.ts). */
export function videoBytes(url: string, policy: MediaPolicy): Promise<Buffer> {
  return mediaBytes(url, policy, 'video');
}

type LocalRule = Pick<LocalReadOptions, 'roots' | 'rootsName' | 'enable'>;

function localRule(policy: MediaPolicy, kind: MediaKind): LocalRule {
  if (kind === 'video') {
    return { roots: policy.videoDirs, rootsName: 'MLXCEL_VIDEO_DIR_ALLOWLIST', enable: 'set MLXCEL_VIDEO_DIR_ALLOWLIST to the directories local videos may be read from' };
  }
  return { roots: policy.mediaPath === undefined ? [] : [policy.mediaPath], rootsName: '--media-path', enable: 'start the server with --media-path DIR to allow files under DIR' };
}

async function mediaBytes(url: string, policy: MediaPolicy, kind: MediaKind): Promise<Buffer> {
  const maxBytes = policy.maxImagePayloadBytes;
  if (url.startsWith('data:')) return dataUri(url, maxBytes, kind);
  if (url.startsWith('/') || url.startsWith('file:')) return readLocal(url, { ...localRule(policy, kind), maxBytes, limitName: PAYLOAD_LIMIT });
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw badRequest(`${kind} url must be a data: URI, an http(s) URL, a file:// URL or an absolute path`);
  }
  return fetchRemote(parsed, { refuseAddress: policy.allowPrivateUrls ? () => undefined : nonPublicRange, maxBytes, limitName: PAYLOAD_LIMIT });
}

/** `data:<type>;base64,<payload>`; the size is checked on the base64 length before decoding. */
function dataUri(url: string, maxBytes: number, kind: MediaKind): Buffer {
  const match = /^data:([^,;]*)((?:;[^,;]*)*?);base64,/i.exec(url);
  if (!match) throw badRequest(`${kind} data URI must be base64: data:${kind}/<type>;base64,<data>`);
  const payload = url.slice(match[0].length);
  if (Math.floor((payload.length * 3) / 4) - 2 > maxBytes) throw mediaTooLarge(PAYLOAD_LIMIT, maxBytes);
  const bytes = Buffer.from(payload, 'base64');
  if (bytes.length > maxBytes) throw mediaTooLarge(PAYLOAD_LIMIT, maxBytes);
  return bytes;
}
