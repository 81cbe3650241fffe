// Gemma 3's image encoder on the GPU (src/models/gemma3-vision.ts: SigLIP tower, pooling
// projector) against the CPU reference written from transformers' code
// (test/helpers/gemma3-vision-reference.ts), on a tiny random multimodal checkpoint: two
// tower layers of width 32, 56 x 56 images in 16 patches pooled to 4 soft tokens of the
// decoder's width 64. And the preprocessing on hand-computed cases and its refusals.
//
// Tolerance: the GPU computes in f32 what the reference computes in f64. Over two layers
// of unit-gain projections the relative rounding stays near 1e-6 per op; the soft tokens
// are O(1), so 1e-4 absolute leaves two orders of magnitude and still catches a wrong
// layout (a transposed patch, a missing (1 + w), a causal mask), which moves them by O(0.1).
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadGemma3Vision, preprocessImage, readImagePreprocessor, unfoldPatches, type RgbImage, type VisionEncoder } from '../src/models/gemma3-vision.js';
import { Gemma3VisionReference } from './helpers/gemma3-vision-reference.js';
import { testGpu } from './helpers/model-harness.js';
import { makeRandomCheckpoint } from './helpers/random-checkpoint.js';
import { rng } from './helpers/rng.js';

const TOLERANCE = 1e-4;
const SIZE = 56;

function randomImage(seed: number, width = SIZE, height = SIZE): RgbImage {
  const next = rng(seed);
  return { width, height, pixels: Uint8Array.from({ length: width * height * 3 }, () => Math.floor(next() * 256)) };
}

describe('gemma3 vision encoder', () => {
  let dir: string;
  let encoder: VisionEncoder;
  let reference: Gemma3VisionReference;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'mlxcel-gemma3-vision-'));
    makeRandomCheckpoint({ arch: 'gemma3_text', tokenizer: 'gemma3', hidden: 64, layers: 2, heads: 4, kvHeads: 2, headDim: 16, intermediate: 128, tie: true, seed: 5, multimodal: true }, dir);
    encoder = (await loadGemma3Vision(await testGpu(), dir))!;
    reference = new Gemma3VisionReference(dir);
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('computes the soft tokens of the CPU reference within 1e-4, image after image', async () => {
    expect(encoder.tokensPerImage).toBe(4);
    for (const seed of [1, 2]) {
      const image = randomImage(seed);
      const got = await encoder.encode(image);
      const want = reference.features(image.pixels);
      expect(got.length).toBe(4 * 64);
      let maxDiff = 0;
      let maxValue = 0;
      want.forEach((row, t) => row.forEach((x, j) => {
        maxDiff = Math.max(maxDiff, Math.abs(got[t * 64 + j]! - x));
        maxValue = Math.max(maxValue, Math.abs(x));
      }));
      expect(maxValue).toBeGreaterThan(0.1);
      expect(maxDiff, `image ${seed}`).toBeLessThan(TOLERANCE);
    }
  });

  it('reads mlx-vlm\'s channels-last patch embedding as the same weights', async () => {
    const mlx = mkdtempSync(join(tmpdir(), 'mlxcel-gemma3-vision-mlx-'));
    try {
      cpSync(dir, mlx, { recursive: true });
      // Rewrite the conv weight [V, 3, P, P] as [V, P, P, 3] in the safetensors file.
      const file = join(mlx, 'model.safetensors');
      const bytes = readFileSync(file);
      const headerLength = Number(bytes.readBigUInt64LE(0));
      const header = JSON.parse(bytes.subarray(8, 8 + headerLength).toString('utf8')) as Record<string, { shape: number[]; data_offsets: [number, number] }>;
      const entry = header['vision_tower.vision_model.embeddings.patch_embedding.weight']!;
      const [V, C, P] = entry.shape as [number, number, number];
      const start = 8 + headerLength + entry.data_offsets[0];
      const torch = new Float32Array(bytes.buffer.slice(bytes.byteOffset + start, bytes.byteOffset + start + V * C * P * P * 4));
      const channelsLast = new Float32Array(torch.length);
      for (let o = 0; o < V; o++) for (let c = 0; c < C; c++) for (let y = 0; y < P; y++) for (let x = 0; x < P; x++) channelsLast[((o * P + y) * P + x) * C + c] = torch[((o * C + c) * P + y) * P + x]!;
      Buffer.from(channelsLast.buffer).copy(bytes, start);
      entry.shape = [V, P, P, C];
      const newHeader = Buffer.from(JSON.stringify(header).padEnd(headerLength, ' '));
      expect(newHeader.length).toBe(headerLength);
      newHeader.copy(bytes, 8);
      writeFileSync(file, bytes);
      const image = randomImage(3);
      const fromMlx = await (await loadGemma3Vision(await testGpu(), mlx))!.encode(image);
      expect(fromMlx).toEqual(await encoder.encode(image));
    } finally {
      rmSync(mlx, { recursive: true, force: true });
    }
  });

  it('resizes other sizes to the tower\'s square input first', async () => {
    expect(await encoder.encode(randomImage(4, 80, 30))).toHaveLength(4 * 64);
  });
});

describe('gemma3 image preprocessing', () => {
  let dir: string;
  const write = (config: Record<string, unknown>) => writeFileSync(join(dir, 'preprocessor_config.json'), JSON.stringify(config));
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'mlxcel-gemma3-pre-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('rescales and normalises per channel, channels first, and unfolds patches in the conv weight\'s order', async () => {
    write({ size: { height: 2, width: 2 }, resample: 2, do_rescale: true, rescale_factor: 1 / 255, do_normalize: true, image_mean: [0.5, 0.5, 0.5], image_std: [0.5, 0.5, 0.25] });
    const pre = readImagePreprocessor(dir, 2);
    // Pixels (r, g, b): 255 -> (1 - 0.5) / 0.5 = 1, 0 -> -1, 51 -> (0.2 - 0.5) / 0.5 = -0.6; blue over 0.25: 255 -> 2.
    const image = { width: 2, height: 2, pixels: Uint8Array.from([255, 0, 255, 0, 255, 0, 51, 51, 51, 255, 255, 255]) };
    const x = await preprocessImage(image, pre);
    expect(Array.from(x, (v) => Math.round(v * 1e6) / 1e6)).toEqual([1, -1, -0.6, 1, -1, 1, -0.6, 1, 2, -2, -1.2, 2]);
    // One 2 x 2 patch: its row is the channels-first image itself.
    expect(unfoldPatches(x, 2, 2)).toEqual(x);
    // Four 1 x 1 patches in row-major order, each (r, g, b).
    expect(Array.from(unfoldPatches(x, 2, 1), (v) => Math.round(v * 1e6) / 1e6)).toEqual([1, -1, 2, -1, 1, -2, -0.6, -0.6, -1.2, 1, 1, 2]);
  });

  it('resizes with the resample filter to the square size', async () => {
    write({ size: { height: 2, width: 2 }, resample: 0, do_rescale: true, rescale_factor: 1 / 255, do_normalize: false });
    // Nearest from 4 x 2 to 2 x 2: the left half black, the right half white, per channel.
    const row = [0, 0, 0, 0, 0, 0, 255, 255, 255, 255, 255, 255];
    const image = { width: 4, height: 2, pixels: Uint8Array.from([...row, ...row]) };
    const x = await preprocessImage(image, readImagePreprocessor(dir, 2));
    expect(Array.from(x)).toEqual([0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1]);
  });

  it('refuses what it does not implement, naming the field', () => {
    write({ size: { height: 2, width: 2 }, do_pan_and_scan: true });
    expect(() => readImagePreprocessor(dir, 2)).toThrow(/do_pan_and_scan true is not supported/);
    write({ size: { height: 4, width: 4 } });
    expect(() => readImagePreprocessor(dir, 2)).toThrow(/size must be 2 x 2/);
    write({ resample: 5 });
    expect(() => readImagePreprocessor(dir, 2)).toThrow(/resample 5 is not supported/);
    rmSync(join(dir, 'preprocessor_config.json'));
    expect(() => readImagePreprocessor(dir, 2)).toThrow(/no preprocessor_config.json/);
  });
});
