// Images on a tiny random-weight Gemma 3 vision-language checkpoint (the real Gemma 3
// tokenizer and template; a two-layer SigLIP tower of width 32 whose 56 x 56 images, 16
// patches, pool into 4 soft tokens of the decoder's width 64), loaded once for:
// - the image encoder on the GPU (src/models/gemma3-vision.ts) against the float64 CPU
//   reference written from transformers' code (test/helpers/gemma3-vision-reference.ts).
//   Tolerance: the GPU computes in f32 what the reference does in f64; over two layers of
//   unit-gain projections the relative rounding stays near 1e-6 per op and the soft tokens
//   are O(1), so 1e-4 absolute leaves two orders of magnitude and still catches a wrong
//   layout (a transposed patch, a missing (1 + w), a causal mask), which moves them by O(0.1);
// - a chat turn with an image through the live server against the CPU reference of the
//   whole multimodal forward pass: its 32 greedy tokens equal, the first token's logprob
//   within 1e-3 (f32 against f64 over a 262k-entry softmax);
// - the live server with the official openai and @anthropic-ai/sdk clients: the same
//   picture as a data URI, an http URL served from 127.0.0.1 (private addresses allowed), a
//   file under --media-path and an Anthropic base64 block gives the same greedy reply; two
//   images in one message and across turns; a next turn about the same picture served from
//   the prompt cache (and answering as a cold prefill does), another picture not; the
//   policies of a server without those allowances. Random weights give random text: a reply is compared with the reply to the
//   same picture sent another way, and another picture must move the distribution;
// - video: a four-second clip generated with ffmpeg, one solid colour a second, stored
//   losslessly (FFV1, RGB) so that its frames are exactly those colours, sent as a data
//   URI, a file under MLXCEL_VIDEO_DIR_ALLOWLIST and an http URL, gives the tokens of its
//   sampled frames sent as images in order; fps and --video-max-frames pick the frames;
//   the local-path, remote and format refusals; no private temp directory left behind.
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type OpenAI from 'openai';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadGemma3Vision } from '../src/models/gemma3-vision.js';
import type { RgbImage } from '../src/models/vision-layers.js';
import { listCheckpointTensors, readTensorF32, writeSafetensors } from '../src/models/safetensors.js';
import { VIDEO_DIR_PREFIX } from '../src/server/media/video.js';
import { Gemma3Reference, Gemma3VisionReference } from './helpers/gemma3-vision-reference.js';
import { useLive, useServer, type Endpoint } from './helpers/live-server.js';
import { testGpu } from './helpers/model-harness.js';
import { waitFor } from './helpers/server-load.js';
import { rng } from './helpers/rng.js';

const mediaRoot = mkdtempSync(join(tmpdir(), 'vision-media-'));
const videoRoot = join(mediaRoot, 'videos');
mkdirSync(videoRoot);
const live = useLive({
  model: { arch: 'gemma3_text', tokenizer: 'gemma3', hidden: 64, layers: 2, heads: 4, kvHeads: 2, headDim: 16, intermediate: 128, tie: true, seed: 5, multimodal: true },
  // An f32 KV cache, as the CPU reference's decoder keeps its keys and values.
  engine: { cacheTypeK: 'f32', cacheTypeV: 'f32' },
  server: { media: { mediaPath: mediaRoot, allowPrivateUrls: true, videoDirs: [videoRoot] } },
});
const strict = useServer(live, { server: { media: { maxImages: 1, videoMaxFrames: 2 } } });

const greedy = { model: 'gemma3', temperature: 0, max_tokens: 4 } as const;
let png: Buffer;
let otherPng: Buffer;
let site: { url: string; hits: number; close(): void };
/** The clip's colours, one a second, and each as a PNG. */
const COLOURS = [[200, 10, 10], [10, 200, 10], [10, 10, 200], [240, 240, 240]] as const;
let clip: Buffer;
let streamedClip: Buffer;
let colourPngs: Buffer[];

beforeAll(async () => {
  const picture = (seed: number) => {
    const pixels = Buffer.alloc(40 * 30 * 3);
    for (let i = 0; i < pixels.length; i++) pixels[i] = (i * 37 + seed * 101) % 256;
    return sharp(pixels, { raw: { width: 40, height: 30, channels: 3 } }).png().toBuffer();
  };
  [png, otherPng] = await Promise.all([picture(1), picture(2)]);
  writeFileSync(join(mediaRoot, 'cat.png'), png);
  const frames = Buffer.concat(COLOURS.map((c) => Buffer.alloc(32 * 24 * 3).map((_, i) => c[i % 3]!)));
  // Written to a file, the clip's header gives its duration; written to a pipe, as a live
  // recording is, it does not.
  const encode = (to: string) => execFileSync('ffmpeg', ['-loglevel', 'error', '-f', 'rawvideo', '-pix_fmt', 'rgb24', '-s', '32x24', '-r', '1', '-i', 'pipe:0', '-c:v', 'ffv1', '-pix_fmt', 'bgr0', '-f', 'matroska', to], { input: frames });
  encode(join(videoRoot, 'clip.mkv'));
  clip = readFileSync(join(videoRoot, 'clip.mkv'));
  streamedClip = encode('pipe:1');
  colourPngs = await Promise.all(COLOURS.map(([r, g, b]) => sharp({ create: { width: 32, height: 24, channels: 3, background: { r, g, b } } }).png().toBuffer()));
  writeFileSync(join(mediaRoot, 'outside.mkv'), clip);
  symlinkSync(join(mediaRoot, 'outside.mkv'), join(videoRoot, 'link.mkv'));
  const server = createServer((req, res) => {
    site.hits++;
    if (req.url === '/clip.mkv') res.writeHead(200, { 'content-type': 'video/x-matroska' }).end(clip);
    else res.writeHead(200, { 'content-type': 'image/png' }).end(png);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  site = { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/cat.png`, hits: 0, close: () => server.close() };
});
afterAll(() => {
  site.close();
  rmSync(mediaRoot, { recursive: true, force: true });
});

const dataUri = (bytes: Buffer) => `data:image/png;base64,${bytes.toString('base64')}`;
const ask = (...urls: string[]): OpenAI.ChatCompletionMessageParam[] => [
  { role: 'user', content: [{ type: 'text', text: 'What is in the picture?' }, ...urls.map((url) => ({ type: 'image_url' as const, image_url: { url } }))] },
];

function randomImage(seed: number, width = 56, height = 56): RgbImage {
  const next = rng(seed);
  return { width, height, pixels: Uint8Array.from({ length: width * height * 3 }, () => Math.floor(next() * 256)) };
}

describe('the Gemma 3 image encoder', () => {
  it('computes the soft tokens of the CPU reference within 1e-4, image after image, and resizes other sizes first', async () => {
    const encoder = live.engine.vision!;
    expect(encoder.tokensPerImage).toBe(4);
    const reference = new Gemma3VisionReference(live.dir);
    for (const seed of [1, 2]) {
      const image = randomImage(seed);
      const got = (await encoder.encode(image)).rows;
      const want = reference.features(image.pixels);
      expect(got.length).toBe(4 * 64);
      let maxDiff = 0;
      let maxValue = 0;
      want.forEach((row, t) => row.forEach((x, j) => {
        maxDiff = Math.max(maxDiff, Math.abs(got[t * 64 + j]! - x));
        maxValue = Math.max(maxValue, Math.abs(x));
      }));
      expect(maxValue).toBeGreaterThan(0.1);
      expect(maxDiff, `image ${seed}`).toBeLessThan(1e-4);
    }
    expect((await encoder.encode(randomImage(4, 80, 30))).rows).toHaveLength(4 * 64);
  });

  it('reads mlx-vlm\'s channels-last patch embedding as the same weights', async () => {
    // The vision tensors alone, the patch embedding [V, 3, P, P] rewritten as [V, P, P, 3].
    const mlx = mkdtempSync(join(tmpdir(), 'vision-mlx-'));
    try {
      for (const file of ['config.json', 'preprocessor_config.json']) copyFileSync(join(live.dir, file), join(mlx, file));
      const tensors = [...listCheckpointTensors(live.dir)].filter(([name]) => !name.startsWith('language_model.')).map(([name, t]) => {
        const data = readTensorF32(t);
        const shape = t.info.shape;
        if (!name.endsWith('patch_embedding.weight')) return { name, dtype: 'F32' as const, shape, data };
        const [V, C, P] = shape as [number, number, number];
        const channelsLast = new Float32Array(data.length);
        for (let o = 0; o < V; o++) for (let c = 0; c < C; c++) for (let y = 0; y < P; y++) for (let x = 0; x < P; x++) channelsLast[((o * P + y) * P + x) * C + c] = data[((o * C + c) * P + y) * P + x]!;
        return { name, dtype: 'F32' as const, shape: [V, P, P, C], data: channelsLast };
      });
      writeSafetensors(join(mlx, 'model.safetensors'), tensors);
      const image = randomImage(3);
      const fromMlx = await (await loadGemma3Vision(await testGpu(), mlx, 256))!.encode(image);
      expect(fromMlx).toEqual(await live.engine.vision!.encode(image));
    } finally {
      rmSync(mlx, { recursive: true, force: true });
    }
  });
});

describe('a chat turn with an image', () => {
  it('gives the 32 greedy tokens of the CPU reference of the multimodal forward pass', async () => {
    const image = randomImage(7);
    const png = await sharp(Buffer.from(image.pixels), { raw: { width: 56, height: 56, channels: 3 } }).png().toBuffer();
    const messages = ask(dataUri(png));
    const res = await live.openai.chat.completions.create({ ...greedy, max_tokens: 32, messages, logprobs: true });
    const { tokenizer } = live.engine;
    const prompt = tokenizer.encode((await live.post('/apply-template', { messages })).body.prompt, true);
    expect(res.usage!.prompt_tokens).toBe(prompt.length);
    const reference = new Gemma3Reference(live.dir);
    const features = new Gemma3VisionReference(live.dir).features(image.pixels);
    const tokens = [...prompt];
    let firstLogprob = 0;
    for (let step = 0; step < 32; step++) {
      // A turn of the event loop between steps, so that idle keep-alive sockets close in time.
      await new Promise((resolve) => setImmediate(resolve));
      const logits = reference.logits(tokens, [features]);
      let best = 0;
      for (let t = 1; t < logits.length; t++) if (logits[t]! > logits[best]!) best = t;
      if (step === 0) {
        const max = logits[best]!;
        firstLogprob = -Math.log(logits.reduce((s, x) => s + Math.exp(x - max), 0));
      }
      tokens.push(best);
    }
    expect(res.choices[0]!.message.content).toBe(tokenizer.decode(tokens.slice(prompt.length)));
    expect(Math.abs(res.choices[0]!.logprobs!.content![0]!.logprob - firstLogprob)).toBeLessThan(1e-3);
  });
});

describe('images on a Gemma 3 vision checkpoint', () => {
  it('give the same greedy reply for the same picture as a data URI, an http URL, a file under --media-path, an Anthropic block and a Responses input_image; read a tool result\'s image', async () => {
    const byData = await live.openai.chat.completions.create({ ...greedy, messages: ask(dataUri(png)), logprobs: true });
    const reply = byData.choices[0]!.message.content;
    // The prompt holds the image's 4 soft tokens with their delimiters, as /apply-template renders it.
    const rendered = await live.post('/apply-template', { messages: ask(dataUri(png)) });
    expect(rendered.body.prompt).toContain(`<start_of_image>${'<image_soft_token>'.repeat(4)}<end_of_image>`);
    expect(byData.usage!.prompt_tokens).toBe(live.engine.tokenizer.encode(rendered.body.prompt, true).length);
    for (const url of [site.url, `file://${join(mediaRoot, 'cat.png')}`]) {
      const res = await live.openai.chat.completions.create({ ...greedy, messages: ask(url) });
      expect(res.choices[0]!.message.content, url).toBe(reply);
    }
    const message = await live.anthropic.messages.create({
      model: 'gemma3', max_tokens: 4, temperature: 0,
      messages: [{ role: 'user', content: [{ type: 'text', text: 'What is in the picture?' }, { type: 'image', source: { type: 'base64', media_type: 'image/png', data: png.toString('base64') } }] }],
    } as never);
    expect((message.content[0] as { text: string }).text).toBe(reply);
    const response = await live.openai.responses.create({
      model: 'gemma3', temperature: 0, max_output_tokens: 4,
      input: [{ role: 'user', content: [{ type: 'input_text', text: 'What is in the picture?' }, { type: 'input_image', image_url: site.url, detail: 'high' }] }],
    });
    expect(response.output_text).toBe(reply);
    // An image a tool returned, inside an Anthropic tool_result block, is read too.
    const fromTool = await live.anthropic.messages.create({
      model: 'gemma3', max_tokens: 4, temperature: 0,
      messages: [
        { role: 'user', content: 'Take a screenshot.' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'screenshot', input: {} }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'image', source: { type: 'url', url: site.url } }] }] },
      ],
      tools: [{ name: 'screenshot', input_schema: { type: 'object', properties: {} } }],
    } as never);
    expect(fromTool.usage.input_tokens).toBeGreaterThan(message.usage.input_tokens);
    // Another picture moves the first token's distribution.
    const other = await live.openai.chat.completions.create({ ...greedy, messages: ask(dataUri(otherPng)), logprobs: true });
    expect(other.choices[0]!.logprobs!.content![0]!.logprob).not.toBe(byData.choices[0]!.logprobs!.content![0]!.logprob);
  });

  it('take two images in one message, and images across turns', async () => {
    const one = await live.openai.chat.completions.create({ ...greedy, messages: ask(dataUri(png)) });
    const two = await live.openai.chat.completions.create({ ...greedy, messages: ask(dataUri(png), dataUri(otherPng)) });
    const perImage = two.usage!.prompt_tokens - one.usage!.prompt_tokens;
    expect(perImage).toBeGreaterThanOrEqual(6);
    const turns = await live.openai.chat.completions.create({
      ...greedy,
      messages: [...ask(dataUri(png)), { role: 'assistant', content: 'A pattern.' }, ...ask(dataUri(otherPng))],
    });
    expect(turns.usage!.prompt_tokens).toBeGreaterThan(two.usage!.prompt_tokens);
  });

  it('reuse a picture\'s cached tokens in the next turn about it, and only for the same picture', async () => {
    const first = await live.openai.chat.completions.create({ ...greedy, messages: ask(dataUri(png)) });
    const prompt = live.engine.tokenizer.encode((await live.post('/apply-template', { messages: ask(dataUri(png)) })).body.prompt, true);
    const imageStart = prompt.indexOf(262144);
    const next = (url: string) => [...ask(url), { role: 'assistant' as const, content: first.choices[0]!.message.content }, { role: 'user' as const, content: 'And the colours?' }];
    const second = await live.openai.chat.completions.create({ ...greedy, messages: next(dataUri(png)) });
    expect(second.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThanOrEqual(imageStart + 4);
    // The same reply as a cold prefill of the whole prompt.
    const cold = await live.post('/v1/chat/completions', { ...greedy, messages: next(dataUri(png)), cache_prompt: false });
    expect(cold.body.choices[0].message.content).toBe(second.choices[0]!.message.content);
    expect(cold.body.usage.prompt_tokens_details.cached_tokens).toBe(0);
    // A picture no request sent before, in the same place.
    const fresh = await sharp(Buffer.from(randomImage(9).pixels), { raw: { width: 56, height: 56, channels: 3 } }).png().toBuffer();
    const other = await live.openai.chat.completions.create({ ...greedy, messages: next(dataUri(fresh)) });
    expect(other.usage!.prompt_tokens_details!.cached_tokens).toBeLessThanOrEqual(imageStart);
  });

  it('refuse, on a server without --media-path and private addresses, local paths and a URL on 127.0.0.1, and more than --max-images; a prompt over the context before fetching', async () => {
    for (const [url, message] of [
      [site.url, /^media URL refused: 127\.0\.0\.1 is a non-public address/],
      [join(mediaRoot, 'cat.png'), /^local media path refused: start the server with --media-path/],
    ] as const) {
      const res = await strict.post('/v1/chat/completions', { ...greedy, messages: ask(url) });
      expect(res, url).toMatchObject({ status: 400, body: { error: { type: 'invalid_request_error', message: expect.stringMatching(message) } } });
    }
    // A prompt too long for the context is refused before its image is fetched.
    const hits = site.hits;
    const long = await live.post('/v1/chat/completions', { ...greedy, messages: [{ role: 'user', content: [{ type: 'text', text: 'picture '.repeat(2100) }, { type: 'image_url', image_url: { url: site.url } }] }] });
    expect(long).toMatchObject({ status: 400, body: { error: { code: 'context_length_exceeded' } } });
    expect(site.hits).toBe(hits);
    const many = await strict.post('/v1/chat/completions', { ...greedy, messages: ask(dataUri(png), dataUri(png)) });
    expect(many).toMatchObject({ status: 400, body: { error: { message: 'the conversation has 2 images; at most 1 are allowed per request (--max-images)' } } });
  });
});

describe('video on a Gemma 3 vision checkpoint', () => {
  // One token: the prompt and the first token's distribution are what the frames decide.
  const oneToken = { ...greedy, max_tokens: 1, logprobs: true } as const;
  const video = (url: string, fps?: number) => ({ type: 'video_url', video_url: fps === undefined ? { url } : { url, fps } });
  const askVideo = (url: string, fps?: number) => [{ role: 'user', content: [{ type: 'text', text: 'What happens in the video?' }, video(url, fps)] }];
  const clipUrl = () => site.url.replace('/cat.png', '/clip.mkv');
  const clipUri = (bytes = clip) => `data:video/x-matroska;base64,${bytes.toString('base64')}`;
  /** The private video directories in the temp dir now. */
  const videoDirs = () => readdirSync(tmpdir()).filter((name) => name.startsWith(VIDEO_DIR_PREFIX));
  const frameCount = async (server: Endpoint, url: string, fps?: number) => {
    const { status, body } = await server.post('/apply-template', { messages: askVideo(url, fps) });
    expect(status).toBe(200);
    return (body.prompt as string).split('<start_of_image>').length - 1;
  };

  it('gives the model its frames in order, as the same frames sent as images do, from a data URI, a file under MLXCEL_VIDEO_DIR_ALLOWLIST and an http URL', async () => {
    const before = videoDirs();
    const asImages = (order: number[]) =>
      live.openai.chat.completions.create({
        ...oneToken,
        messages: [{ role: 'user', content: [{ type: 'text', text: 'What happens in the video?' }, ...order.map((i) => ({ type: 'image_url' as const, image_url: { url: dataUri(colourPngs[i]!) } }))] }],
      });
    const want = await asImages([0, 1, 2, 3]);
    for (const url of [clipUri(), `file://${join(videoRoot, 'clip.mkv')}`, clipUrl()]) {
      const { status, body } = await live.post('/v1/chat/completions', { ...oneToken, messages: askVideo(url, 1) });
      expect(status, url).toBe(200);
      expect(body.usage.prompt_tokens, url).toBe(want.usage!.prompt_tokens);
      expect(body.choices[0].message.content, url).toBe(want.choices[0]!.message.content);
      expect(body.choices[0].logprobs.content[0].logprob, url).toBe(want.choices[0]!.logprobs!.content![0]!.logprob);
    }
    // The frames in another order are another prompt.
    const reversed = await asImages([3, 2, 1, 0]);
    expect(reversed.choices[0]!.logprobs!.content![0]!.logprob).not.toBe(want.choices[0]!.logprobs!.content![0]!.logprob);
    expect(videoDirs()).toEqual(before);
  });

  it('samples at the part\'s fps (2 a second by default), at most --video-max-frames spread over the clip', async () => {
    expect(await frameCount(live, clipUri())).toBe(8);
    expect(await frameCount(live, clipUri(), 1)).toBe(4);
    expect(await frameCount(live, clipUri(), 0.5)).toBe(2);
    // --video-max-frames 2: 2 a second over four seconds becomes one every two seconds (the
    // first and third colours), whether the header gives the duration or the packets do.
    const firstAndThird = await live.openai.chat.completions.create({
      ...oneToken,
      messages: [{ role: 'user', content: [{ type: 'text', text: 'What happens in the video?' }, ...[0, 2].map((i) => ({ type: 'image_url' as const, image_url: { url: dataUri(colourPngs[i]!) } }))] }],
    });
    for (const bytes of [clip, streamedClip]) {
      const { body } = await strict.post('/v1/chat/completions', { ...oneToken, messages: askVideo(clipUri(bytes), 2) });
      expect(body.usage.prompt_tokens).toBe(firstAndThird.usage!.prompt_tokens);
      expect(body.choices[0].logprobs.content[0].logprob).toBe(firstAndThird.choices[0]!.logprobs!.content![0]!.logprob);
    }
  });

  it('refuses local paths outside MLXCEL_VIDEO_DIR_ALLOWLIST, private addresses, playlists, corrupt data, video with audio, and video without ffmpeg (501), leaving no temp file', async () => {
    const before = videoDirs();
    const outside = 'local media path refused: the file is not under MLXCEL_VIDEO_DIR_ALLOWLIST (symlinks resolved)';
    // An HLS playlist naming a local file: a format that reads other files is not opened.
    const playlist = `#EXTM3U\n#EXT-X-TARGETDURATION:4\n#EXTINF:4,\n${join(videoRoot, 'clip.mkv')}\n#EXT-X-ENDLIST\n`;
    const cases: Array<[Endpoint, string, string | RegExp]> = [
      [live, join(mediaRoot, 'outside.mkv'), outside],
      [live, join(videoRoot, 'link.mkv'), outside],
      [live, `${videoRoot}/../videos/clip.mkv`, 'local media path refused: ".." is not allowed in a media path'],
      [strict, join(videoRoot, 'clip.mkv'), /^local media path refused: set MLXCEL_VIDEO_DIR_ALLOWLIST/],
      [strict, clipUrl(), /^media URL refused: 127\.0\.0\.1 is a non-public address/],
      [live, `data:application/vnd.apple.mpegurl;base64,${Buffer.from(playlist).toString('base64')}`, /^video format is not supported/],
      [live, `data:video/mp4;base64,${Buffer.from('not a video').toString('base64')}`, /^video could not be decoded/],
    ];
    for (const [server, url, message] of cases) {
      const res = await server.post('/v1/chat/completions', { ...greedy, messages: askVideo(url) });
      expect(res, url.slice(0, 80)).toMatchObject({ status: 400, body: { error: { type: 'invalid_request_error', message: typeof message === 'string' ? message : expect.stringMatching(message) } } });
    }
    const withAudio = await live.post('/v1/chat/completions', { ...greedy, messages: [{ role: 'user', content: [video(clipUri()), { type: 'input_audio', input_audio: { data: 'UklGRg==', format: 'wav' } }] }] });
    expect(withAudio).toMatchObject({ status: 400, body: { error: { message: 'Combined video and audio inputs are not supported' } } });
    const both = await strict.post('/v1/chat/completions', { ...greedy, messages: [{ role: 'user', content: [video(clipUri()), { type: 'image_url', image_url: { url: dataUri(png) } }] }] });
    expect(both).toMatchObject({ status: 400, body: { error: { message: 'the conversation has 2 images and videos; at most 1 are allowed per request (--max-images)' } } });
    const path = process.env.PATH;
    process.env.PATH = mediaRoot;
    try {
      const hits = site.hits;
      const noFfmpeg = await live.post('/v1/chat/completions', { ...greedy, messages: askVideo(clipUrl()) });
      expect(noFfmpeg).toMatchObject({ status: 501, body: { error: { type: 'not_supported_error', message: expect.stringMatching(/^video input is not supported - hint: install ffmpeg/) } } });
      expect(site.hits).toBe(hits);
    } finally {
      process.env.PATH = path;
    }
    expect(videoDirs()).toEqual(before);
  });

  it('stops sampling and removes the video\'s directory when the client leaves', async () => {
    // ffprobe and ffmpeg that never finish, so that the client leaves while they run.
    const stalled = join(mediaRoot, 'stalled-bin');
    mkdirSync(stalled);
    for (const tool of ['ffmpeg', 'ffprobe']) writeFileSync(join(stalled, tool), '#!/bin/sh\nexec sleep 60\n', { mode: 0o755 });
    const before = videoDirs();
    const path = process.env.PATH;
    process.env.PATH = stalled;
    try {
      const client = new AbortController();
      const request = fetch(`${live.url}/v1/chat/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...greedy, messages: askVideo(clipUri()) }), signal: client.signal,
      }).catch(() => undefined);
      await waitFor(() => videoDirs().length > before.length, 10_000, 'the video written');
      client.abort();
      await request;
      await waitFor(() => videoDirs().length === before.length, 10_000, 'the video directory removed');
    } finally {
      process.env.PATH = path;
    }
  });
});
