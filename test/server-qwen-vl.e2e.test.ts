// Images on a tiny random-weight Qwen2.5-VL checkpoint (Qwen3's real tokenizer and
// template, whose vision tokens Qwen2.5-VL shares; a two-block windowed ViT of width 32,
// windows of 2 x 2 tokens, the second block over the whole image, merged into the decoder's
// width 64; the decoder's rotary pairs split 2 / 3 / 3 by mrope_section), loaded once with a
// prefill batch of 32 tokens so that a prompt with an image prefills in chunks, for:
// - smart_resize, the window order and the multimodal-RoPE positions on hand-computed cases;
// - the image encoder on the GPU (src/models/qwen2-5-vl-vision.ts) against the float64 CPU
//   reference written from transformers' code (test/helpers/qwen2-5-vl-reference.ts), on a
//   3 x 4 token image (windows of 4, 4, 2 and 2 tokens) and a 2 x 3 one. Tolerance as for
//   Gemma 3's: f32 against f64 over two blocks of unit-gain projections keeps the relative
//   rounding near 1e-6 per op on O(1) tokens, so 1e-4 absolute leaves two orders of
//   magnitude and still catches a wrong window, rotary position or patch order (O(0.1));
//   mlx-vlm's layout (vision_tower., channels-last Conv3d) gives the same tokens;
// - a chat turn with an image through the live server against the CPU reference of the
//   whole multimodal forward pass: its 32 greedy tokens equal; the next turn, served from the
//   prompt cache past the image, answers as a cold prefill does; an Anthropic base64 block
//   answers as the data URI does;
// - an image of more tokens than one prefill batch: 400, before it is encoded;
// - a video part (a two-second lossless clip made with ffmpeg) sampled into frames that the
//   model takes as the same frames sent as images: each its own token count and grid.
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type OpenAI from 'openai';
import sharp from 'sharp';
import { describe, expect, it } from 'vitest';
import { mropePositions } from '../src/engine/forward.js';
import { loadQwen25VlVision, smartResize, windowOrder } from '../src/models/qwen2-5-vl-vision.js';
import { quantizeAffine } from '../src/models/quantize.js';
import { listCheckpointTensors, readTensorF32, writeSafetensors } from '../src/models/safetensors.js';
import type { RgbImage } from '../src/models/vision-layers.js';
import { useLive } from './helpers/live-server.js';
import { testGpu } from './helpers/model-harness.js';
import { Qwen25VlReference } from './helpers/qwen2-5-vl-reference.js';
import { rng } from './helpers/rng.js';

const live = useLive({
  model: { arch: 'qwen2', tokenizer: 'qwen3', hidden: 64, layers: 2, heads: 4, kvHeads: 2, headDim: 16, intermediate: 128, tie: true, seed: 11, multimodal: true },
  // An f32 KV cache, as the CPU reference keeps its keys and values.
  engine: { cacheTypeK: 'f32', cacheTypeV: 'f32', batchSize: 32 },
});

const greedy = { model: 'qwen-vl', temperature: 0, max_tokens: 4 } as const;
const PAD = 151655;

function randomImage(seed: number, width: number, height: number): RgbImage {
  const next = rng(seed);
  return { width, height, pixels: Uint8Array.from({ length: width * height * 3 }, () => Math.floor(next() * 256)) };
}
const png = (image: RgbImage) => sharp(Buffer.from(image.pixels), { raw: { width: image.width, height: image.height, channels: 3 } }).png().toBuffer();
const dataUri = (bytes: Buffer) => `data:image/png;base64,${bytes.toString('base64')}`;
const ask = (url: string, text = 'What is in the picture?'): OpenAI.ChatCompletionMessageParam[] => [
  { role: 'user', content: [{ type: 'text', text }, { type: 'image_url', image_url: { url } }, { type: 'text', text: 'Answer in one line.' }] },
];

describe('Qwen2.5-VL on hand-computed cases', () => {
  it('sizes images as transformers\' smart_resize: multiples of 28, Python\'s round half to even, scaled into the pixel bounds', () => {
    expect(smartResize(56, 84, 28, 3136, 50176)).toEqual({ height: 56, width: 84 });
    // 70 / 28 = 2.5 rounds to 2, 98 / 28 = 3.5 to 4.
    expect(smartResize(70, 98, 28, 3136, 50176)).toEqual({ height: 56, width: 112 });
    // 280 x 280 is 78400 pixels: beta = sqrt(78400 / 50176) = 1.25, floor(280 / 1.25 / 28) = 8.
    expect(smartResize(280, 280, 28, 3136, 50176)).toEqual({ height: 224, width: 224 });
    // 28 x 28 < 3136: beta = sqrt(3136 / 600), ceil(20 beta / 28) = 2, ceil(30 beta / 28) = 3.
    expect(smartResize(20, 30, 28, 3136, 50176)).toEqual({ height: 56, width: 84 });
    expect(() => smartResize(1, 300, 28, 3136, 50176)).toThrow(/aspect ratio over 200/);
  });

  it('orders a grid\'s tokens window by window, the last row and column of windows short', () => {
    expect(windowOrder(3, 4, 2)).toEqual({ tokens: [0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 10, 11], windows: [4, 4, 2, 2] });
    expect(windowOrder(2, 2, 4)).toEqual({ tokens: [0, 1, 2, 3], windows: [4] });
  });

  it('gives text one position in all three streams, an image (p, p + row, p + column), and the text after it p + max(h, w) on', () => {
    const image = { start: 3, rows: new Float32Array(6), key: 0, grid: { h: 2, w: 3 } };
    const whole = mropePositions([{ tokens: new Array<number>(12).fill(0), startPos: 0, table: [], seqImages: [image] }], 1);
    expect([...whole]).toEqual([0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3, 4, 3, 3, 5, 3, 4, 3, 3, 4, 4, 3, 4, 5, 6, 6, 6, 7, 7, 7, 8, 8, 8]);
    // A chunk from the middle of the sequence, and a decode step past it, beside a text-only sequence.
    const chunks = [
      { tokens: [0, 0, 0], startPos: 7, table: [], seqImages: [image] },
      { tokens: [0], startPos: 20, table: [], seqImages: [image] },
      { tokens: [0], startPos: 5, table: [] },
    ];
    expect([...mropePositions(chunks, 1)]).toEqual([3, 4, 4, 3, 4, 5, 6, 6, 6, 17, 17, 17, 5, 5, 5]);
  });
});

describe('the Qwen2.5-VL image encoder', () => {
  it('computes the image tokens of the CPU reference within 1e-4, window-ordered blocks and merger included, in grid order', async () => {
    const encoder = live.engine.vision!;
    const reference = new Qwen25VlReference(live.dir);
    for (const [seed, width, height, h, w] of [[1, 112, 84, 3, 4], [2, 84, 56, 2, 3]] as const) {
      const image = randomImage(seed, width, height);
      expect(encoder.tokens(image)).toBe(h * w);
      const got = await encoder.encode(image);
      expect(got.grid).toEqual({ h, w });
      const want = reference.features(image.pixels, width, height);
      expect(got.rows.length).toBe(h * w * 64);
      let maxDiff = 0;
      let maxValue = 0;
      want.forEach((row, t) => row.forEach((x, j) => {
        maxDiff = Math.max(maxDiff, Math.abs(got.rows[t * 64 + j]! - x));
        maxValue = Math.max(maxValue, Math.abs(x));
      }));
      expect(maxValue).toBeGreaterThan(0.1);
      expect(maxDiff, `image ${seed}`).toBeLessThan(1e-4);
    }
  });

  it('reads mlx-vlm\'s layout (vision_tower., channels-last Conv3d) as the same weights, and its quantized linear layers', async () => {
    const mlx = mkdtempSync(join(tmpdir(), 'qwen-vl-mlx-'));
    try {
      const tensors = [...listCheckpointTensors(live.dir)].map(([name, t]) => {
        const data = readTensorF32(t);
        const renamed = name.replace(/^model\.visual\./, 'vision_tower.').replace(/^model\.language_model\./, 'language_model.model.');
        if (!name.endsWith('patch_embed.proj.weight')) return { name: renamed, dtype: 'F32' as const, shape: t.info.shape, data };
        const [V, C, T, P] = t.info.shape as [number, number, number, number];
        const channelsLast = new Float32Array(data.length);
        for (let o = 0; o < V; o++) for (let c = 0; c < C; c++) for (let f = 0; f < T; f++) for (let y = 0; y < P; y++) for (let x = 0; x < P; x++) {
          channelsLast[(((o * T + f) * P + y) * P + x) * C + c] = data[(((o * C + c) * T + f) * P + y) * P + x]!;
        }
        return { name: renamed, dtype: 'F32' as const, shape: [V, T, P, P, C], data: channelsLast };
      });
      writeSafetensors(join(mlx, 'model.safetensors'), tensors);
      for (const file of ['config.json', 'preprocessor_config.json']) copyFileSync(join(live.dir, file), join(mlx, file));
      const image = randomImage(3, 84, 56);
      const float = await live.engine.vision!.encode(image);
      const fromMlx = await (await loadQwen25VlVision(await testGpu(), mlx, 32))!.encode(image);
      expect(fromMlx).toEqual(float);
      // Its linear layers quantized as mlx-vlm's 8-bit conversion writes them: close to the float tower, not equal.
      const quantized = tensors.flatMap((t) => {
        if (!t.name.startsWith('vision_tower.') || t.shape.length !== 2) return [t];
        const [rows, cols] = t.shape as [number, number];
        const q = quantizeAffine(t.data, rows, cols, 8, 32);
        const prefix = t.name.replace(/\.weight$/, '');
        return [
          { name: t.name, dtype: 'U32' as const, shape: [rows, cols / 4], data: q.packed },
          { name: `${prefix}.scales`, dtype: 'F32' as const, shape: [rows, cols / 32], data: q.scales },
          { name: `${prefix}.biases`, dtype: 'F32' as const, shape: [rows, cols / 32], data: q.biases },
        ];
      });
      writeSafetensors(join(mlx, 'model.safetensors'), quantized);
      const config = JSON.parse(readFileSync(join(mlx, 'config.json'), 'utf8')) as Record<string, unknown>;
      writeFileSync(join(mlx, 'config.json'), JSON.stringify({ ...config, quantization: { group_size: 32, bits: 8 } }));
      const fromQuantized = await (await loadQwen25VlVision(await testGpu(), mlx, 32))!.encode(image);
      const diff = Math.max(...fromQuantized.rows.map((x, i) => Math.abs(x - float.rows[i]!)));
      expect(diff).toBeGreaterThan(0);
      expect(diff).toBeLessThan(0.05);
    } finally {
      rmSync(mlx, { recursive: true, force: true });
    }
  });
});

describe('Qwen2.5-VL vision configs', () => {
  it('refuses a vision config field it does not implement, naming it', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'qwen-vl-config-'));
    try {
      const config = JSON.parse(readFileSync(join(live.dir, 'config.json'), 'utf8')) as { vision_config: Record<string, unknown> };
      for (const [field, value, message] of [
        ['hidden_act', 'gelu', /vision_config: hidden_act "gelu" is not supported/],
        ['temporal_patch_size', 3, /vision_config: temporal_patch_size 3 is not supported/],
        ['window_size', 100, /vision_config: window_size 100 is not a multiple of patch_size x spatial_merge_size = 28/],
        ['fullatt_block_indexes', [2], /vision_config: fullatt_block_indexes must list block indexes below depth 2/],
      ] as const) {
        writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...config, vision_config: { ...config.vision_config, [field]: value } }));
        await expect(loadQwen25VlVision(await testGpu(), dir, 32), field).rejects.toThrow(message);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('a chat turn with an image on Qwen2.5-VL', () => {
  it('gives the 32 greedy tokens of the CPU reference of the multimodal forward pass, over prefill chunks of 32', async () => {
    const image = randomImage(7, 112, 84);
    const messages = ask(dataUri(await png(image)), 'Describe what is in the picture, then say which colours it has and where they are.');
    const res = await live.openai.chat.completions.create({ ...greedy, max_tokens: 32, messages });
    // /apply-template shows the template's single pad; the prompt holds one per image token.
    const rendered = (await live.post('/apply-template', { messages })).body.prompt as string;
    expect(rendered).toContain('<|vision_start|><|image_pad|><|vision_end|>');
    const { tokenizer } = live.engine;
    const prompt = tokenizer.encode(rendered.replace('<|image_pad|>', '<|image_pad|>'.repeat(12)), false);
    expect(prompt.filter((t) => t === PAD)).toHaveLength(12);
    expect(res.usage!.prompt_tokens).toBe(prompt.length);
    expect(prompt.length).toBeGreaterThan(32);
    const reference = new Qwen25VlReference(live.dir);
    const images = [{ rows: reference.features(image.pixels, 112, 84), grid: { h: 3, w: 4 } }];
    const tokens = [...prompt];
    for (let step = 0; step < 32; step++) {
      // A turn of the event loop between steps, so that idle keep-alive sockets close in time.
      await new Promise((resolve) => setImmediate(resolve));
      const logits = reference.logits(tokens, images);
      let best = 0;
      for (let t = 1; t < logits.length; t++) if (logits[t]! > logits[best]!) best = t;
      tokens.push(best);
    }
    expect(res.choices[0]!.message.content).toBe(tokenizer.decode(tokens.slice(prompt.length)));
  });

  it('serves the next turn from the prompt cache past the image as a cold prefill answers it; an Anthropic block as the data URI', async () => {
    const url = dataUri(await png(randomImage(8, 84, 56)));
    const first = await live.openai.chat.completions.create({ ...greedy, messages: ask(url) });
    const next = [...ask(url), { role: 'assistant' as const, content: first.choices[0]!.message.content }, { role: 'user' as const, content: 'And the colours?' }];
    const second = await live.openai.chat.completions.create({ ...greedy, messages: next });
    const rendered = (await live.post('/apply-template', { messages: ask(url) })).body.prompt as string;
    const imageEnd = live.engine.tokenizer.encode(rendered.replace('<|image_pad|>', '<|image_pad|>'.repeat(6)), false).lastIndexOf(PAD) + 1;
    expect(second.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThanOrEqual(imageEnd);
    const cold = await live.post('/v1/chat/completions', { ...greedy, messages: next, cache_prompt: false });
    expect(cold.body.usage.prompt_tokens_details.cached_tokens).toBe(0);
    expect(cold.body.choices[0].message.content).toBe(second.choices[0]!.message.content);
    const message = await live.anthropic.messages.create({
      model: 'qwen-vl', max_tokens: 4, temperature: 0,
      messages: [{ role: 'user', content: [{ type: 'text', text: 'What is in the picture?' }, { type: 'image', source: { type: 'base64', media_type: 'image/png', data: url.slice('data:image/png;base64,'.length) } }] }],
    } as never);
    expect((message.content[0] as { text: string }).text).toBe(first.choices[0]!.message.content);
  });

  it('refuses an image of more tokens than one prefill batch holds with 400, before encoding it', async () => {
    // 280 x 280 pixels become 8 x 8 = 64 tokens (max_pixels), over the batch of 32.
    const res = await live.post('/v1/chat/completions', { ...greedy, messages: ask(dataUri(await png(randomImage(9, 280, 280)))) });
    expect(res).toMatchObject({
      status: 400,
      body: { error: { type: 'invalid_request_error', message: 'an image of 280x280 pixels is 64 tokens; one prefill batch holds 32 (raise --batch-size, or lower --image-max-tokens)' } },
    });
    // The server goes on serving.
    expect((await live.openai.chat.completions.create({ ...greedy, messages: [{ role: 'user', content: 'Hello' }] })).choices).toHaveLength(1);
  });

  it('takes a video part as its sampled frames, each as the same picture sent as an image', async () => {
    // Two 84 x 56 frames (3 x 2 tokens each), one a second, in a lossless clip.
    const frames = [randomImage(10, 84, 56), randomImage(11, 84, 56)];
    const clip = execFileSync('ffmpeg', ['-loglevel', 'error', '-f', 'rawvideo', '-pix_fmt', 'rgb24', '-s', '84x56', '-r', '1', '-i', 'pipe:0', '-c:v', 'ffv1', '-pix_fmt', 'bgr0', '-f', 'matroska', 'pipe:1'], {
      input: Buffer.concat(frames.map((f) => f.pixels)),
    });
    const text = { type: 'text', text: 'What happens in the video?' };
    const images = await live.openai.chat.completions.create({
      ...greedy, max_tokens: 1, logprobs: true,
      messages: [{ role: 'user', content: [text as OpenAI.ChatCompletionContentPartText, ...(await Promise.all(frames.map(png))).map((bytes) => ({ type: 'image_url' as const, image_url: { url: dataUri(bytes) } }))] }],
    });
    const video = await live.post('/v1/chat/completions', {
      ...greedy, max_tokens: 1, logprobs: true,
      messages: [{ role: 'user', content: [text, { type: 'video_url', video_url: { url: `data:video/x-matroska;base64,${clip.toString('base64')}`, fps: 1 } }] }],
    });
    expect(video.status).toBe(200);
    expect(video.body.usage.prompt_tokens).toBe(images.usage!.prompt_tokens);
    expect(video.body.choices[0].logprobs.content[0].logprob).toBe(images.choices[0]!.logprobs!.content![0]!.logprob);
    expect(video.body.choices[0].message.content).toBe(images.choices[0]!.message.content);
  });
});
