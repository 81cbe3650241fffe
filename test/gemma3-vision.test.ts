// Gemma 3's image preprocessing (src/models/gemma3-vision.ts) on hand-computed cases, and
// its refusals. The encoder itself is checked against its CPU reference in
// test/server-vision.e2e.test.ts, which loads the checkpoint anyway.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { preprocessImage, readImagePreprocessor, unfoldPatches } from '../src/models/gemma3-vision.js';

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
    const x = await preprocessImage(image, pre, 2, 2);
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
    const x = await preprocessImage(image, readImagePreprocessor(dir, 2), 2, 2);
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
