// Image bytes to RGB pixels through sharp: JPEG, PNG, WebP and GIF (its first frame), EXIF
// orientation applied, alpha dropped as transformers' convert_rgb drops it. The size is
// read from the header first and an image beyond the limits is refused before any pixel
// is decoded, so a small file that claims a huge canvas never allocates it.
import { createHash } from 'node:crypto';
import sharp from 'sharp';
import { badRequest } from '../errors.js';

export const MAX_IMAGE_SIDE = 16384;
export const MAX_IMAGE_PIXELS = 8192 * 8192;
const FORMATS = new Set(['jpeg', 'png', 'webp', 'gif']);

export interface DecodedImage {
  width: number;
  height: number;
  /** Row-major RGB, 3 bytes a pixel. */
  pixels: Buffer;
  /** SHA-256 of the size and the pixels: the same picture in any encoding hashes alike. */
  hash: string;
}

export async function decodeImage(bytes: Buffer): Promise<DecodedImage> {
  const options = { limitInputPixels: MAX_IMAGE_PIXELS, pages: 1, failOn: 'error' } as const;
  // The header alone; sharp's own pixel limit would refuse a large one without its size.
  const meta = await sharp(bytes, { ...options, limitInputPixels: false })
    .metadata()
    .catch(() => {
      throw badRequest('image could not be read: not a JPEG, PNG, WebP or GIF, or corrupt');
    });
  if (!meta.format || !FORMATS.has(meta.format)) throw badRequest(`image format ${meta.format ?? 'unknown'} is not supported: JPEG, PNG, WebP and GIF are`);
  const { width, height } = meta;
  if (width > MAX_IMAGE_SIDE || height > MAX_IMAGE_SIDE || width * height > MAX_IMAGE_PIXELS) {
    throw badRequest(`image is ${width}x${height} pixels; at most ${MAX_IMAGE_SIDE} a side and ${MAX_IMAGE_PIXELS} in all are decoded`);
  }
  const { data, info } = await sharp(bytes, options)
    .autoOrient()
    .removeAlpha()
    .toColourspace('srgb')
    .raw()
    .toBuffer({ resolveWithObject: true })
    .catch(() => {
      throw badRequest('image could not be decoded: corrupt image data');
    });
  if (info.channels !== 3) throw badRequest(`image decoded to ${info.channels} channels, not RGB`);
  return rgbImage(info.width, info.height, data);
}

/** Decoded RGB pixels with their hash. */
export function rgbImage(width: number, height: number, pixels: Buffer): DecodedImage {
  const hash = createHash('sha256').update(`${width}x${height}:`).update(pixels).digest('hex');
  return { width, height, pixels, hash };
}
