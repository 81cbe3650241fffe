// KvRows.copyBlocks (src/engine/kv-cache.ts): the leading rows of KV blocks copied within
// each of a model's cache textures through the scratch buffer, as a fork copies its
// prompt's partly filled last block and the prompt cache a partly matching one. Block sizes
// whose texels lie inside one texture row, straddle two rows, or span whole rows and a
// part; whole blocks and leading rows; a copy out of a block an earlier copy wrote. The
// copies land exactly and leave every other texel as it was, in f32 and f16 textures. And
// KvRows.resize: the pool's textures replaced by larger or smaller ones, keeping the
// blocks both hold.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KvRows } from '../../src/engine/kv-cache.js';
import { kvCacheBytes, type KvCache } from '../../src/models/model.js';
import type { KvLayer } from '../../src/runtime/ops/attention.js';
import { KV_TEXEL_BYTES, KV_TEXTURE_WIDTH, kvTypeOf } from '../../src/runtime/tensors.js';
import { Harness } from './harness.js';

let h: Harness;
beforeAll(async () => { h = await Harness.open(); });
afterAll(() => h?.destroy());

/** Floats per row (kvHeads * headDim): 16 texels. */
const ROW_FLOATS = 64;

/** A one-layer KvCache over textures `layer` of `blocks` blocks. */
function kvCache(blockSize: number, blocks: number, layer: KvLayer): KvCache {
  const types = { k: kvTypeOf(layer.k), v: kvTypeOf(layer.v) };
  const tokenBytes = (ROW_FLOATS / 4) * (KV_TEXEL_BYTES[types.k] + KV_TEXEL_BYTES[types.v]);
  return { blockSize, blocks, maxBlocks: blocks, ringSlots: 0, types, kvDim: ROW_FLOATS, tokenBytes, layers: [layer] };
}

/** Distinct values every KV type holds exactly (f16: below 1024, in halves), texture t's offset by t. */
const fill = (floats: number, t: number) => Float32Array.from({ length: floats }, (_, i) => t * 256 + (i % 509) / 2);

describe('KvRows.copyBlocks', () => {
  // Rows per block: texels per block 128 (a row's part), 2560 (across a row boundary),
  // 2 * KV_TEXTURE_WIDTH (two whole rows), 6144 (a row and a half). Keys f32, values f16
  // (each texture's texel size), and both f16.
  it.each([
    [8, 'f32', 'f16'], [160, 'f32', 'f16'], [(2 * KV_TEXTURE_WIDTH * 4) / ROW_FLOATS, 'f16', 'f16'], [384, 'f32', 'f16'],
  ] as const)('copies the leading rows of blocks of %i rows in every texture (keys %s, values %s)', async (blockSize, kType, vType) => {
    const blocks = 5;
    const blockFloats = blockSize * ROW_FLOATS;
    const floats = blocks * blockFloats;
    const k = h.kvCache(fill(floats, 1), 'k', kType);
    const v = h.kvCache(fill(floats, 0), 'v', vType);
    const rows = new KvRows(h.device, kvCache(blockSize, blocks, { k, v }), ROW_FLOATS);
    const partial = blockSize - 3;
    rows.copyBlocks([
      { from: 1, to: 3, rows: blockSize },
      { from: 4, to: 0, rows: partial },
      // Out of the block the first copy wrote: copies run in order.
      { from: 3, to: 2, rows: blockSize },
    ]);
    for (const [t, texture] of [v, k].entries()) {
      const expected = fill(floats, t);
      const block = (b: number, n = blockSize) => expected.slice(b * blockFloats, b * blockFloats + n * ROW_FLOATS);
      const [one, four] = [block(1), block(4, partial)];
      expected.set(one, 3 * blockFloats);
      expected.set(four, 0);
      expected.set(one, 2 * blockFloats);
      expect(await h.readKvCache(texture, floats)).toEqual(expected);
    }
  });
});

describe('KvRows.resize', () => {
  it('grows and shrinks every layer\'s textures, keeping the blocks both sizes hold', async () => {
    // 40 rows of 16 texels: a block is 640 texels, so 7 blocks cross a texture row.
    const blockSize = 40;
    const blockFloats = blockSize * ROW_FLOATS;
    const k = h.kvCache(fill(3 * blockFloats, 1), 'k', 'f16');
    const v = h.kvCache(fill(3 * blockFloats, 2), 'v', 'f32');
    const cache = kvCache(blockSize, 3, { k, v });
    const rows = new KvRows(h.device, cache, ROW_FLOATS);
    const before = kvCacheBytes(cache);
    rows.resize(20);
    expect(cache.blocks).toBe(20);
    const grown = kvCacheBytes(cache);
    expect(grown).toBeGreaterThan(before);
    expect(cache.layers[0]!.k).not.toBe(k);
    for (const [t, texture] of [cache.layers[0]!.k, cache.layers[0]!.v].entries()) {
      expect(await h.readKvCache(texture, 3 * blockFloats)).toEqual(fill(3 * blockFloats, t + 1));
    }
    // Written past the old size, then cut back to two blocks: the first two survive.
    rows.write([15], blockSize, new Uint8Array(rows.bytes(blockSize)));
    rows.resize(2);
    expect(cache.blocks).toBe(2);
    expect(kvCacheBytes(cache)).toBeLessThan(grown);
    for (const [t, texture] of [cache.layers[0]!.k, cache.layers[0]!.v].entries()) {
      expect(await h.readKvCache(texture, 2 * blockFloats)).toEqual(fill(2 * blockFloats, t + 1));
    }
  });
});
