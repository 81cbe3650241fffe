// KvBlockCopier (src/runtime/kv-block-copy.ts): whole KV blocks copied within each of a
// model's cache textures through the staging buffer, for block sizes whose texels lie
// inside one texture row, straddle two rows, or span whole rows and a part; the copies land
// exactly on the destination blocks and leave every other texel as it was.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KvBlockCopier } from '../../src/runtime/kv-block-copy.js';
import { KV_TEXTURE_WIDTH } from '../../src/runtime/tensors.js';
import { Harness } from './harness.js';

let h: Harness;
beforeAll(async () => { h = await Harness.open(); });
afterAll(() => h?.destroy());

describe('KvBlockCopier', () => {
  // Texels per block: a row's part, across a row boundary, two whole rows, a row and a half.
  it.each([128, 2560, 2 * KV_TEXTURE_WIDTH, 6144])('copies blocks of %i texels in every texture', async (blockTexels) => {
    const blocks = 5;
    const floats = blocks * blockTexels * 4;
    const fill = (t: number) => Float32Array.from({ length: floats }, (_, i) => t * 1e6 + i);
    const textures = [h.kvCache(fill(1), 'k'), h.kvCache(fill(2), 'v')];
    const copier = new KvBlockCopier(h.device, textures, blockTexels);
    const copies = [{ from: 1, to: 3 }, { from: 4, to: 0 }];
    const encoder = h.device.createCommandEncoder();
    copier.encode(encoder, copies);
    h.device.queue.submit([encoder.finish()]);
    for (const [t, texture] of textures.entries()) {
      const expected = fill(t + 1);
      const block = (b: number) => expected.slice(b * blockTexels * 4, (b + 1) * blockTexels * 4);
      const [one, four] = [block(1), block(4)];
      expected.set(one, 3 * blockTexels * 4);
      expected.set(four, 0);
      expect(await h.readKvCache(texture, floats)).toEqual(expected);
    }
  });
});
