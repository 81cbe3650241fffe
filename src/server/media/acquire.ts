// An image part's url to its decoded pixels, under the server's media policy: a base64
// data URI, an http(s) URL (./remote.ts), or a file:// URL or bare absolute path
// (./local.ts). Every form is bounded by --max-image-payload-size before it is decoded.
import { badRequest } from '../errors.js';
import { nonPublicRange } from './address.js';
import { decodeImage, type DecodedImage } from './image.js';
import { readLocal } from './local.js';
import type { MediaPolicy } from './policy.js';
import { fetchRemote, mediaTooLarge } from './remote.js';

const PAYLOAD_LIMIT = '--max-image-payload-size';

export async function loadImage(url: string, policy: MediaPolicy): Promise<DecodedImage> {
  return decodeImage(await imageBytes(url, policy));
}

async function imageBytes(url: string, policy: MediaPolicy): Promise<Buffer> {
  const maxBytes = policy.maxImagePayloadBytes;
  if (url.startsWith('data:')) return dataUri(url, maxBytes);
  if (url.startsWith('/') || url.startsWith('file:')) return readLocal(url, { root: policy.mediaPath, maxBytes, limitName: PAYLOAD_LIMIT });
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw badRequest('image url must be a data: URI, an http(s) URL, a file:// URL or an absolute path');
  }
  return fetchRemote(parsed, { refuseAddress: policy.allowPrivateUrls ? () => undefined : nonPublicRange, maxBytes, limitName: PAYLOAD_LIMIT });
}

/** `data:<type>;base64,<payload>`; the size is checked on the base64 length before decoding. */
function dataUri(url: string, maxBytes: number): Buffer {
  const match = /^data:([^,;]*)((?:;[^,;]*)*?);base64,/i.exec(url);
  if (!match) throw badRequest('image data URI must be base64: data:image/<type>;base64,<data>');
  const payload = url.slice(match[0].length);
  if (Math.floor((payload.length * 3) / 4) - 2 > maxBytes) throw mediaTooLarge(PAYLOAD_LIMIT, maxBytes);
  const bytes = Buffer.from(payload, 'base64');
  if (bytes.length > maxBytes) throw mediaTooLarge(PAYLOAD_LIMIT, maxBytes);
  return bytes;
}
