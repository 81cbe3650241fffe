// The media-access policies of the REST reference ("Remote and local media access") and
// image decoding, one test per rule: remote fetches against HTTP servers on this host (each
// counts the requests it saw, so "refused before connecting" is checked as no request
// arriving), local reads in a temporary --media-path, and sharp decoding of generated
// images. No engine and no GPU: these run on the server side before any model sees a pixel.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer, type RequestListener, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { crc32, deflateSync } from 'node:zlib';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiError } from '../src/server/errors.js';
import { nonPublicRange } from '../src/server/media/address.js';
import { loadImage } from '../src/server/media/acquire.js';
import { decodeImage } from '../src/server/media/image.js';
import { DEFAULT_MEDIA_POLICY, jsonBodyLimit, type MediaPolicy } from '../src/server/media/policy.js';
import { fetchRemote, MAX_REDIRECTS } from '../src/server/media/remote.js';

const red = { r: 200, g: 10, b: 10 };
const png = (width: number, height: number, background = red) => sharp({ create: { width, height, channels: 3, background } }).png().toBuffer();

/** What a refused call threw: status and message. */
async function refusal(promise: Promise<unknown>): Promise<{ status: number; message: string }> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err, 'expected a refusal').toBeInstanceOf(ApiError);
  return { status: (err as ApiError).status, message: (err as ApiError).message };
}

interface Site {
  url: string;
  hits: string[];
  server: Server;
}

async function site(handler: RequestListener, host = '127.0.0.1'): Promise<Site> {
  const hits: string[] = [];
  const server = createServer((req, res) => {
    hits.push(req.url ?? '');
    handler(req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  return { url: `http://${host}:${(server.address() as AddressInfo).port}`, hits, server };
}

describe('address policy', () => {
  it('names every non-public range, IPv4-mapped IPv6 forms included, and passes public addresses', () => {
    const refused: Array<[string, RegExp]> = [
      ['127.0.0.1', /^loopback/],
      ['10.1.2.3', /^private/],
      ['172.20.0.1', /^private/],
      ['192.168.1.1', /^private/],
      ['100.64.0.1', /^carrier-grade NAT/],
      ['169.254.169.254', /^link-local/],
      ['224.0.0.251', /^multicast/],
      ['192.0.2.7', /^documentation/],
      ['203.0.113.9', /^documentation/],
      ['240.0.0.1', /^reserved/],
      ['255.255.255.255', /^reserved/],
      ['0.0.0.0', /^unspecified/],
      ['::', /^unspecified/],
      ['::1', /^loopback/],
      ['fd12:3456::1', /^unique-local/],
      ['fe80::1', /^link-local/],
      ['ff02::1', /^multicast/],
      ['2001:db8::1', /^documentation/],
      ['::ffff:127.0.0.1', /^loopback/],
      ['::ffff:7f00:1', /^loopback/],
      ['::ffff:169.254.169.254', /^link-local/],
      ['::ffff:a00:1', /^private/],
      ['::127.0.0.1', /^IPv4-compatible/],
    ];
    for (const [address, range] of refused) expect(nonPublicRange(address), address).toMatch(range);
    for (const address of ['8.8.8.8', '1.1.1.1', '172.32.0.1', '2606:4700:4700::1111', '::ffff:8.8.8.8']) expect(nonPublicRange(address), address).toBeUndefined();
  });
});

describe('remote media', () => {
  let image: Buffer;
  let origin: Site;
  let other: Site;
  const sites: Site[] = [];
  const strict: MediaPolicy = { ...DEFAULT_MEDIA_POLICY };
  const open: MediaPolicy = { ...DEFAULT_MEDIA_POLICY, allowPrivateUrls: true };

  beforeAll(async () => {
    image = await png(4, 3);
    origin = await site((req, res) => {
      const url = new URL(req.url ?? '/', 'http://x');
      const hop = Number(url.searchParams.get('hop') ?? 0);
      if (url.pathname === '/chain') {
        if (hop > 0) res.writeHead(302, { location: `/chain?hop=${hop - 1}` }).end();
        else res.writeHead(200, { 'content-type': 'image/png' }).end(image);
      } else if (url.pathname === '/to') res.writeHead(307, { location: url.searchParams.get('target')! }).end();
      else if (url.pathname === '/big') res.writeHead(200, { 'content-length': 2048 }).end(Buffer.alloc(2048));
      else if (url.pathname === '/big-chunked') {
        // No length announced: the limit is enforced on the bytes as they stream.
        res.writeHead(200);
        res.write(Buffer.alloc(1024));
        res.end(Buffer.alloc(1024));
      } else if (url.pathname === '/slow') setTimeout(() => res.end(image), 2000);
      else if (url.pathname === '/missing') res.writeHead(404).end('not here');
      else res.writeHead(200, { 'content-type': 'image/png' }).end(image);
    });
    other = await site((_req, res) => res.end(image), '127.0.0.2');
    sites.push(origin, other);
  });
  afterAll(() => sites.forEach((s) => s.server.close()));

  it('fetch an image with MLXCEL_ALLOW_PRIVATE_MEDIA_URLS=1, following up to 5 redirects', async () => {
    const direct = await loadImage(`${origin.url}/cat.png`, open);
    expect(direct).toMatchObject({ width: 4, height: 3 });
    expect(direct.pixels.subarray(0, 3)).toEqual(Buffer.from([200, 10, 10]));
    expect((await loadImage(`${origin.url}/chain?hop=${MAX_REDIRECTS}`, open)).hash).toBe(direct.hash);
    expect(await refusal(loadImage(`${origin.url}/chain?hop=${MAX_REDIRECTS + 1}`, open))).toEqual({ status: 400, message: 'media URL refused: more than 5 redirects' });
    expect((await refusal(loadImage(`${origin.url}/missing`, open))).message).toMatch(/answered HTTP 404$/);
  });

  it('refuse a non-public address before connecting: a loopback literal, a hostname resolving to loopback, an IPv4-mapped IPv6 literal', async () => {
    const before = origin.hits.length;
    const { port } = new URL(origin.url);
    for (const [url, message] of [
      [`http://127.0.0.1:${port}/cat.png`, /^media URL refused: 127\.0\.0\.1 is a non-public address, loopback \(127\.0\.0\.0\/8\); set MLXCEL_ALLOW_PRIVATE_MEDIA_URLS=1/],
      [`http://localhost:${port}/cat.png`, /^media URL refused: (127\.0\.0\.1|::1) is a non-public address, loopback .*\(localhost resolves to (127\.0\.0\.1|::1)\)/],
      [`http://[::ffff:127.0.0.1]:${port}/cat.png`, /^media URL refused: ::ffff:7f00:1 is a non-public address, loopback/],
      [`http://169.254.169.254/latest/meta-data/`, /link-local \(169\.254\.0\.0\/16\)/],
      [`http://0x7f000001:${port}/cat.png`, /127\.0\.0\.1 is a non-public address/],
    ] as const) {
      expect(await refusal(loadImage(url, strict)), url).toEqual({ status: 400, message: expect.stringMatching(message) });
    }
    expect(origin.hits.length).toBe(before);
  });

  it('check every redirect: a chain from an allowed address into a non-public one stops before connecting to it', async () => {
    // Here 127.0.0.1 stands for the public internet and every other address is private.
    const refuseAddress = (address: string) => (address === '127.0.0.1' ? undefined : 'private (test)');
    const limit = { refuseAddress, maxBytes: 1 << 20, limitName: '--max-image-payload-size' };
    expect(await fetchRemote(new URL(`${origin.url}/to?target=${encodeURIComponent(`${origin.url}/cat.png`)}`), limit)).toEqual(image);
    const into = `${origin.url}/to?target=${encodeURIComponent(`${origin.url}/to?target=${encodeURIComponent(`${other.url}/cat.png`)}`)}`;
    expect(await refusal(fetchRemote(new URL(into), limit))).toEqual({ status: 400, message: 'media URL refused: 127.0.0.2 is a non-public address, private (test); set MLXCEL_ALLOW_PRIVATE_MEDIA_URLS=1 to allow private addresses' });
    expect(other.hits).toEqual([]);
    // A redirect to another scheme is refused as the first URL would be.
    expect((await refusal(fetchRemote(new URL(`${origin.url}/to?target=file:///etc/passwd`), limit))).message).toBe('media URL refused: only http and https URLs are fetched, not file:');
  });

  it('refuse credentials in the URL and schemes other than http and https, even with private addresses allowed', async () => {
    expect(await refusal(loadImage(`http://user:secret@${new URL(origin.url).host}/cat.png`, open))).toEqual({ status: 400, message: 'media URL refused: credentials in the URL are not allowed' });
    expect((await refusal(loadImage('ftp://example.com/cat.png', open))).message).toBe('media URL refused: only http and https URLs are fetched, not ftp:');
    expect((await refusal(loadImage('cat.png', open))).message).toMatch(/^image url must be a data: URI, an http\(s\) URL/);
  });

  it('bound the download while it streams (413) and the whole fetch in time', async () => {
    const small = { ...open, maxImagePayloadBytes: 1500 };
    for (const path of ['/big', '/big-chunked']) {
      expect(await refusal(loadImage(`${origin.url}${path}`, small)), path).toEqual({ status: 413, message: 'media payload exceeds --max-image-payload-size (1500 bytes)' });
    }
    const started = Date.now();
    const slow = await refusal(fetchRemote(new URL(`${origin.url}/slow`), { refuseAddress: () => undefined, maxBytes: 1 << 20, limitName: 'x', timeoutMs: 200 }));
    expect(slow).toEqual({ status: 400, message: 'media URL refused: no complete answer within 0.2 s' });
    expect(Date.now() - started).toBeLessThan(1500);
  });
});

describe('local media', () => {
  let root: string;
  let outside: string;
  let policy: MediaPolicy;

  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), 'media-root-'));
    outside = mkdtempSync(join(tmpdir(), 'media-outside-'));
    policy = { ...DEFAULT_MEDIA_POLICY, mediaPath: root };
    writeFileSync(join(root, 'cat.png'), await png(2, 2));
    writeFileSync(join(outside, 'secret.png'), await png(2, 2));
    mkdirSync(join(root, 'sub'));
    symlinkSync(join(outside, 'secret.png'), join(root, 'escape.png'));
    symlinkSync(outside, join(root, 'sub', 'out'));
    symlinkSync(join(root, 'cat.png'), join(root, 'sub', 'alias.png'));
    execFileSync('mkfifo', [join(root, 'fifo')]);
  });
  afterAll(() => {
    rmSync(root, { recursive: true, force: true });
    rmSync(outside, { recursive: true, force: true });
  });

  it('read a regular file under --media-path, as a file:// URL or a bare path, through a symlink that stays inside', async () => {
    const file = join(root, 'cat.png');
    const direct = await loadImage(file, policy);
    expect(direct).toMatchObject({ width: 2, height: 2 });
    expect((await loadImage(pathToFileURL(file).href, policy)).hash).toBe(direct.hash);
    expect((await loadImage(join(root, 'sub', 'alias.png'), policy)).hash).toBe(direct.hash);
  });

  it('refuse local paths without --media-path', async () => {
    expect(await refusal(loadImage(join(root, 'cat.png'), DEFAULT_MEDIA_POLICY))).toEqual({
      status: 400,
      message: 'local media path refused: start the server with --media-path DIR to allow files under DIR',
    });
  });

  it('refuse "..", symlinks out of the root, files outside it, non-regular files and over-long names', async () => {
    const cases: Array<[string, string]> = [
      [`${root}/sub/../cat.png`, 'local media path refused: ".." is not allowed in a media path'],
      [join(root, 'escape.png'), 'local media path refused: the file is not under --media-path (symlinks resolved)'],
      [join(root, 'sub', 'out', 'secret.png'), 'local media path refused: the file is not under --media-path (symlinks resolved)'],
      [join(outside, 'secret.png'), 'local media path refused: the file is not under --media-path (symlinks resolved)'],
      [pathToFileURL(join(outside, 'secret.png')).href, 'local media path refused: the file is not under --media-path (symlinks resolved)'],
      [join(root, 'sub'), 'local media path refused: not a regular file'],
      [join(root, 'fifo'), 'local media path refused: not a regular file'],
      [join(root, `${'é'.repeat(128)}.png`), 'local media path refused: a path component is longer than 255 bytes'],
      [join(root, 'absent.png'), 'local media path refused: no such file under --media-path'],
      ['file://otherhost/etc/passwd', expect.stringMatching(/^local media path refused: File URL host must be "localhost" or empty/) as unknown as string],
    ];
    for (const [path, message] of cases) expect(await refusal(loadImage(path, policy)), path).toEqual({ status: 400, message });
    expect(await refusal(loadImage(join(root, 'cat.png'), { ...policy, maxImagePayloadBytes: 10 }))).toEqual({
      status: 413,
      message: 'media payload exceeds --max-image-payload-size (10 bytes)',
    });
  });
});

describe('image decoding', () => {
  /** A PNG that is all header: IHDR claiming width x height, one row's worth of IDAT, IEND. */
  function pngHeader(width: number, height: number): Buffer {
    const chunk = (type: string, data: Buffer) => {
      const body = Buffer.concat([Buffer.from(type, 'latin1'), data]);
      const out = Buffer.alloc(8 + data.length + 4);
      out.writeUInt32BE(data.length, 0);
      body.copy(out, 4);
      out.writeUInt32BE(crc32(body), 8 + data.length);
      return out;
    };
    const ihdr = Buffer.alloc(13);
    ihdr.writeUInt32BE(width, 0);
    ihdr.writeUInt32BE(height, 4);
    ihdr.set([8, 2, 0, 0, 0], 8);
    return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk('IHDR', ihdr), chunk('IDAT', deflateSync(Buffer.alloc(61))), chunk('IEND', Buffer.alloc(0))]);
  }
  const dataUri = (type: string, bytes: Buffer) => `data:${type};base64,${bytes.toString('base64')}`;

  it('decode PNG, JPEG, WebP and a GIF\'s first frame to RGB, with EXIF orientation applied and alpha dropped', async () => {
    const base = sharp({ create: { width: 4, height: 2, channels: 4, background: { ...red, alpha: 0.5 } } });
    const fromPng = await decodeImage(await base.clone().png().toBuffer());
    expect(fromPng).toMatchObject({ width: 4, height: 2 });
    expect([...fromPng.pixels.subarray(0, 6)]).toEqual([200, 10, 10, 200, 10, 10]);
    // The same pixels, losslessly in another format, hash alike.
    expect((await decodeImage(await base.clone().webp({ lossless: true }).toBuffer())).hash).toBe(fromPng.hash);
    const rotated = await decodeImage(await base.clone().jpeg().withMetadata({ orientation: 6 }).toBuffer());
    expect(rotated).toMatchObject({ width: 2, height: 4 });
    const frames = [red, { r: 10, g: 10, b: 200 }].map((background) => sharp({ create: { width: 3, height: 3, channels: 3, background } }).png().toBuffer());
    const gif = await sharp(await Promise.all(frames), { join: { animated: true } }).gif().toBuffer();
    expect((await sharp(gif).metadata()).pages).toBe(2);
    const first = await decodeImage(gif);
    expect(first).toMatchObject({ width: 3, height: 3 });
    expect(first.pixels[0]! > 150 && first.pixels[2]! < 60).toBe(true);
  });

  it('refuse a 20000x20000 PNG from its header, before decoding, and bytes that are no image', async () => {
    const bomb = pngHeader(20000, 20000);
    expect(bomb.length).toBeLessThan(80);
    const started = Date.now();
    expect(await refusal(decodeImage(bomb))).toEqual({ status: 400, message: 'image is 20000x20000 pixels; at most 16384 a side and 67108864 in all are decoded' });
    expect(Date.now() - started).toBeLessThan(500);
    expect(await refusal(loadImage(dataUri('image/png', bomb), DEFAULT_MEDIA_POLICY))).toMatchObject({ status: 400, message: /^image is 20000x20000/ });
    expect(await refusal(decodeImage(Buffer.from('GIF89a, but not really')))).toEqual({ status: 400, message: 'image could not be read: not a JPEG, PNG, WebP or GIF, or corrupt' });
    const tiff = await sharp({ create: { width: 2, height: 2, channels: 3, background: red } }).tiff().toBuffer();
    expect(await refusal(decodeImage(tiff))).toEqual({ status: 400, message: 'image format tiff is not supported: JPEG, PNG, WebP and GIF are' });
  });

  it('read base64 data URIs within --max-image-payload-size (413 beyond, checked before decoding the base64)', async () => {
    const bytes = await png(3, 3);
    expect(await loadImage(dataUri('image/png', bytes), DEFAULT_MEDIA_POLICY)).toMatchObject({ width: 3, height: 3 });
    expect(await refusal(loadImage(dataUri('image/png', bytes), { ...DEFAULT_MEDIA_POLICY, maxImagePayloadBytes: bytes.length - 1 }))).toEqual({
      status: 413,
      message: `media payload exceeds --max-image-payload-size (${bytes.length - 1} bytes)`,
    });
    expect((await refusal(loadImage('data:image/png,rawbytes', DEFAULT_MEDIA_POLICY))).message).toBe('image data URI must be base64: data:image/<type>;base64,<data>');
  });

  it('size the JSON body limit for --max-images data URIs of --max-image-payload-size', () => {
    const mib = 1024 * 1024;
    expect(jsonBodyLimit({ ...DEFAULT_MEDIA_POLICY, maxImages: 0 })).toBe(32 * mib);
    expect(jsonBodyLimit({ ...DEFAULT_MEDIA_POLICY, maxImages: 2, maxImagePayloadBytes: 3 * mib })).toBe(32 * mib + 8 * mib);
  });
});
