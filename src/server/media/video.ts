// A video part's frames, sampled with ffmpeg for a model that takes them as ordered images.
// The video's bytes (./acquire.ts: a data URI, a download, or a file under
// MLXCEL_VIDEO_DIR_ALLOWLIST) are written as a create-new 0600 file in a private 0700
// directory, the only path ffprobe and ffmpeg are given, and the directory is removed
// afterwards whatever happens. Both run from argument arrays (no shell) under a timeout and
// the request's signal, reading that file through the `file` protocol alone and with the
// single-file container demuxers alone, so that a playlist, a concat list or any other
// format that names further files or URLs is refused rather than followed.
//
// Sampling: `fps` frames a second (DEFAULT_VIDEO_FPS when the part gives none), spread
// evenly over the whole clip, at most --video-max-frames of them: past that the rate drops
// to max / duration. Frames larger than FRAME_MAX_SIDE a side are scaled down into that
// square, keeping their aspect ratio; ffmpeg applies the stream's rotation first.
import { execFile } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { ApiError, badRequest } from '../errors.js';
import { MAX_IMAGE_PIXELS, MAX_IMAGE_SIDE, rgbImage, type DecodedImage } from './image.js';

/** Frames a second when a video part sets no fps. */
export const DEFAULT_VIDEO_FPS = 2;
/** Probing and sampling one video, together. */
const VIDEO_TIMEOUT_MS = 30_000;
const FRAME_MAX_SIDE = 1280;
/** The demuxers of single-file containers: MP4/MOV (and 3GP), Matroska/WebM, AVI, MPEG-TS, GIF. */
const DEMUXERS = 'mov,matroska,avi,mpegts,gif';
/** The prefix of the private directories the videos are written in. */
export const VIDEO_DIR_PREFIX = 'mlxcel-video-';

interface VideoTools {
  ffmpeg: string;
  ffprobe: string;
}

/** ffmpeg and ffprobe as found on PATH now, or undefined when either is missing. */
export function videoTools(): VideoTools | undefined {
  const ffmpeg = onPath('ffmpeg');
  const ffprobe = onPath('ffprobe');
  return ffmpeg && ffprobe ? { ffmpeg, ffprobe } : undefined;
}

function onPath(name: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (!dir) continue;
    const path = join(dir, name);
    try {
      accessSync(path, constants.X_OK);
      return path;
    } catch {
      // not in this directory
    }
  }
  return undefined;
}

export interface SampleOptions {
  /** Frames a second; DEFAULT_VIDEO_FPS when undefined. */
  fps?: number;
  /** --video-max-frames. */
  maxFrames: number;
  /** The request's lifetime: ffmpeg is stopped when it aborts. */
  signal?: AbortSignal;
}

/** The video's sampled frames, in order; 400 for what cannot be read as a video. */
export async function sampleVideo(tools: VideoTools, bytes: Buffer, options: SampleOptions): Promise<DecodedImage[]> {
  const dir = await mkdtemp(join(tmpdir(), VIDEO_DIR_PREFIX));
  try {
    const file = join(dir, 'video');
    await writeFile(file, bytes, { flag: 'wx', mode: 0o600 });
    const timeout = AbortSignal.timeout(VIDEO_TIMEOUT_MS);
    const signal = options.signal ? AbortSignal.any([timeout, options.signal]) : timeout;
    const limits = ['-protocol_whitelist', 'file', '-format_whitelist', DEMUXERS];
    const probed = await run(tools.ffprobe, ['-v', 'error', '-select_streams', 'v:0', '-show_entries', 'format=duration:stream=width,height', '-of', 'json', ...limits, file], signal, 1 << 20);
    const { streams, format } = JSON.parse(probed.toString()) as { streams?: Array<{ width?: number; height?: number }>; format?: { duration?: string } };
    const { width = 0, height = 0 } = streams?.[0] ?? {};
    if (width <= 0 || height <= 0) throw badRequest('video has no video stream');
    if (width > MAX_IMAGE_SIDE || height > MAX_IMAGE_SIDE || width * height > MAX_IMAGE_PIXELS) {
      throw badRequest(`video is ${width}x${height} pixels; at most ${MAX_IMAGE_SIDE} a side and ${MAX_IMAGE_PIXELS} in all are decoded`);
    }
    const duration = Number(format?.duration) > 0 ? Number(format!.duration) : await packetSpan(tools.ffprobe, [...limits, file], signal);
    const fps = options.fps ?? DEFAULT_VIDEO_FPS;
    const rate = duration > 0 ? Math.min(fps, options.maxFrames / duration) : fps;
    const filters = [`fps=${rate}`];
    if (Math.max(width, height) > FRAME_MAX_SIDE) filters.push(`scale=${FRAME_MAX_SIDE}:${FRAME_MAX_SIDE}:force_original_aspect_ratio=decrease`);
    const out = ['-map', '0:v:0', '-vf', filters.join(','), '-frames:v', String(options.maxFrames), '-f', 'image2pipe', '-c:v', 'ppm', '-pix_fmt', 'rgb24', 'pipe:1'];
    const frameBytes = FRAME_MAX_SIDE * FRAME_MAX_SIDE * 3 + 64;
    const frames = ppmFrames(await run(tools.ffmpeg, ['-nostdin', '-hide_banner', '-loglevel', 'error', ...limits, '-i', file, ...out], signal, options.maxFrames * frameBytes));
    if (frames.length === 0) throw badRequest('video has no frames');
    return frames;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * The video stream's span from its packets' timestamps, for a file whose header gives no
 * duration (a live recording, such as a browser's WebM); NaN when it has none either.
 */
async function packetSpan(ffprobe: string, source: string[], signal: AbortSignal): Promise<number> {
  const listing = await run(ffprobe, ['-v', 'error', '-select_streams', 'v:0', '-show_entries', 'packet=pts_time,duration_time', '-of', 'csv=p=0', ...source], signal, 64 << 20);
  let first = Infinity;
  let end = -Infinity;
  for (const line of listing.toString().split('\n')) {
    const [pts, length] = line.split(',').map(Number);
    if (!Number.isFinite(pts)) continue;
    first = Math.min(first, pts!);
    end = Math.max(end, pts! + (Number.isFinite(length) ? length! : 0));
  }
  return end - first;
}

/** A tool's stdout; its failure as the 400 that says why, never echoing what it read. */
function run(command: string, args: string[], signal: AbortSignal, maxBuffer: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    execFile(command, args, { encoding: 'buffer', signal, maxBuffer, killSignal: 'SIGKILL' }, (err, stdout, stderr) => {
      if (!err) return resolve(stdout);
      if (signal.aborted) {
        const timedOut = signal.reason instanceof DOMException && signal.reason.name === 'TimeoutError';
        if (timedOut) return reject(badRequest(`video could not be sampled within ${VIDEO_TIMEOUT_MS / 1000} s`));
        // The request ended: the server's shutdown deadline (its ApiError), or the client left (no one reads the answer).
        return reject(signal.reason instanceof ApiError ? signal.reason : badRequest('video sampling stopped: the request was cancelled'));
      }
      if (stderr.toString().includes('not on whitelist')) {
        return reject(badRequest('video format is not supported: MP4/MOV, Matroska/WebM, AVI, MPEG-TS and GIF are (playlists and lists of other files are refused)'));
      }
      reject(badRequest('video could not be decoded: not a supported video, or corrupt'));
    });
  });
}

/** ffmpeg's image2pipe of PPM frames: `P6\n<w> <h>\n255\n` then w*h RGB triplets, frame after frame. */
function ppmFrames(data: Buffer): DecodedImage[] {
  const frames: DecodedImage[] = [];
  for (let at = 0; at < data.length; ) {
    const header = /^P6\s(\d+)\s(\d+)\s255\s/.exec(data.subarray(at, at + 32).toString('latin1'));
    if (!header) throw badRequest('video could not be decoded: unexpected frame data from ffmpeg');
    const width = Number(header[1]);
    const height = Number(header[2]);
    const start = at + header[0].length;
    at = start + width * height * 3;
    if (at > data.length) throw badRequest('video could not be decoded: a frame was cut short');
    frames.push(rgbImage(width, height, Buffer.from(data.subarray(start, at))));
  }
  return frames;
}
