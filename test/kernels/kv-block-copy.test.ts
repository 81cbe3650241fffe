// KvRows.copyBlocks (src/engine/kv-cache.ts): the leading rows of KV blocks copied within
// each of a model's cache textures through the scratch buffer, as a fork copies its
// prompt's partly filled last block and the prompt cache a partly matching one. Block sizes
// whose texels lie inside one texture row, straddle two rows, or span whole rows and a
// part; whole blocks and leading rows; a copy out of a block an earlier copy wrote. The
// copies land exactly and leave every other texel as it was.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KvRows } from '../../src/engine/kv-cache.js';
import { KV_TEXTURE_WIDTH } from '../../src/runtime/tensors.js';
import { Harness } from './harness.js';

let h: Harness;
beforeAll(async () => { h = await Harness.open(); });
afterAll(() => h?.destroy());

/** Floats per row (kvHeads * headDim): 16 texels. */
const ROW_FLOATS = 64;

describe('KvRows.copyBlocks', () => {
  // Rows per block: texels per block 128 (a row's part), 2560 (across a row boundary),
  // 2 * KV_TEXTURE_WIDTH (two whole rows), 6144 (a row and a half).
  it.each([8, 160, (2 * KV_TEXTURE_WIDTH * 4) / ROW_FLOATS, 384])('copies the leading rows of blocks of %i rows in every texture', async (blockSize) => {
    const blocks = 5;
    const blockFloats = blockSize * ROW_FLOATS;
    const floats = blocks * blockFloats;
    const fill = (t: number) => Float32Array.from({ length: floats }, (_, i) => t * 1e6 + i);
    const k = h.kvCache(fill(1), 'k');
    const v = h.kvCache(fill(2), 'v');
    const rows = new KvRows(h.device, { blockSize, blocks, k: [k], v: [v] }, ROW_FLOATS);
    const partial = blockSize - 3;
    rows.copyBlocks([
      { from: 1, to: 3, rows: blockSize },
      { from: 4, to: 0, rows: partial },
      // Out of the block the first copy wrote: copies run in order.
      { from: 3, to: 2, rows: blockSize },
    ]);
    for (const [t, texture] of [k, v].entries()) {
      const expected = fill(t + 1);
      const block = (b: number, n = blockSize) => expected.slice(b * blockFloats, b * blockFloats + n * ROW_FLOATS);
      const [one, four] = [block(1), block(4, partial)];
      expected.set(one, 3 * blockFloats);
      expected.set(four, 0);
      expected.set(one, 2 * blockFloats);
      expect(await h.readKvCache(texture, floats)).toEqual(expected);
    }
  });
});
