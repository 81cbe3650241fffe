// MXFP4 (OCP microscaling FP4) on the host, for the tests: blocks of 32 values, each 32
// e2m1 codes (sign, two exponent bits, one mantissa bit) and one e8m0 scale byte e, the
// block's values e2m1 * 2^(e - 127). GPT-OSS's checkpoints (and MLX's mxfp4 mode) store the
// codes two per byte, low nibble first, 16 bytes a block, the scales as their own tensor;
// llama.cpp's block_mxfp4 is the scale byte, then 16 bytes whose low nibbles are values
// 0-15 and high nibbles values 16-31.

import { MXFP4_BLOCK } from '../../src/runtime/tensors.js';

/** Each code's value. */
export const E2M1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0, -0.5, -1, -1.5, -2, -3, -4, -6];

/** A row-major matrix in MXFP4 as a checkpoint stores it: `blocks` (16 bytes a block) and `scales` (a byte a block). */
export interface Mxfp4 {
  blocks: Uint8Array;
  scales: Uint8Array;
}

/** Codes (one per value, 0-15) and a scale byte per block, packed two codes a byte, low nibble first. */
export function packMxfp4(codes: Uint8Array, scales: Uint8Array): Mxfp4 {
  if (codes.length !== scales.length * MXFP4_BLOCK) throw new Error(`${codes.length} codes for ${scales.length} blocks`);
  const blocks = new Uint8Array(codes.length / 2);
  for (let i = 0; i < blocks.length; i++) blocks[i] = codes[2 * i]! | (codes[2 * i + 1]! << 4);
  return { blocks, scales };
}

/**
 * The nearest MXFP4 encoding of `values` (a multiple of 32 of them): per block the scale
 * 2^(floor(log2(max |v|)) - 2) (OCP's shared exponent: the largest value lands in [4, 8)),
 * each value the nearest code (6 where it lands past 6).
 */
export function quantizeMxfp4(values: Float32Array): Mxfp4 {
  const codes = new Uint8Array(values.length);
  const scales = new Uint8Array(values.length / MXFP4_BLOCK);
  for (let b = 0; b < scales.length; b++) {
    let amax = 0;
    for (let i = 0; i < MXFP4_BLOCK; i++) amax = Math.max(amax, Math.abs(values[b * MXFP4_BLOCK + i]!));
    const e = amax === 0 ? 127 : Math.min(254, Math.max(0, Math.floor(Math.log2(amax)) - 2 + 127));
    scales[b] = e;
    for (let i = 0; i < MXFP4_BLOCK; i++) {
      const v = values[b * MXFP4_BLOCK + i]! / 2 ** (e - 127);
      let best = 0;
      for (let c = 1; c < 8; c++) if (Math.abs(Math.abs(v) - E2M1[c]!) < Math.abs(Math.abs(v) - E2M1[best]!)) best = c;
      codes[b * MXFP4_BLOCK + i] = best | (v < 0 ? 8 : 0);
    }
  }
  return packMxfp4(codes, scales);
}

/** The values an MXFP4 matrix holds, in float64: code value times 2^(e - 127). */
export function decodeMxfp4(m: Mxfp4): Float64Array {
  const out = new Float64Array(m.blocks.length * 2);
  for (let i = 0; i < out.length; i++) {
    const code = (m.blocks[i >> 1]! >> ((i & 1) * 4)) & 0xf;
    out[i] = E2M1[code]! * 2 ** (m.scales[Math.floor(i / MXFP4_BLOCK)]! - 127);
  }
  return out;
}

/** The same blocks as llama.cpp's block_mxfp4 (GGML_TYPE_MXFP4): 17 bytes a block. */
export function ggmlMxfp4(m: Mxfp4): Uint8Array {
  const out = new Uint8Array(m.scales.length * 17);
  for (let b = 0; b < m.scales.length; b++) {
    out[b * 17] = m.scales[b]!;
    const code = (i: number) => (m.blocks[b * 16 + (i >> 1)]! >> ((i & 1) * 4)) & 0xf;
    for (let j = 0; j < 16; j++) out[b * 17 + 1 + j] = code(j) | (code(j + 16) << 4);
  }
  return out;
}
