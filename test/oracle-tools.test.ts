// The test-side model tooling: half floats, safetensors, MLX affine quantization, the GGUF
// writer, the llama.cpp oracle and the HF-semantics CPU reference, checked against each other
// and against stories260K's published outputs (the random checkpoints' GGUFs, tokenizers and
// reference are checked with the engine, in oracle-engine.test.ts, on the same files).
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits } from '../src/models/half.js';
import { dequantizeAffine, QUANT_BITS, quantizeAffine, quantizeCheckpoint, widenPacked, type QuantBits } from '../src/models/quantize.js';
import { readSafetensorsBytes, readSafetensorsHeader, writeSafetensors } from '../src/models/safetensors.js';
import { llama3RopeFactors, readGguf, writeGgufFromHf } from './helpers/gguf-writer.js';
import { HfReference } from './helpers/hf-reference.js';
import { disposeOracle, maxLogProbDiff, oracleGreedy } from './helpers/llama-oracle.js';
import { makeRng } from './helpers/random-checkpoint.js';
import { storiesExpected } from './helpers/stories-expected.js';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const STORIES = join(repo, 'models/stories260k');
/** sha256 of llama.cpp's convert_hf_to_gguf.py output for models/stories260k (f32). */
const REFERENCE_GGUF_SHA256 = '86437841ab1a3bf2af0d5b6b966bfc4d8360994d0c8e96abdb05d4d92ee1d7f0';
const tmp = mkdtempSync(join(tmpdir(), 'mlxcel-oracle-tools-'));

afterAll(async () => {
  await disposeOracle();
  rmSync(tmp, { recursive: true, force: true });
});

describe('half', () => {
  it('rounds f32 to f16 to nearest even, with subnormals, overflow and NaN', () => {
    expect(f32ToF16Bits(1)).toBe(0x3c00);
    expect(f32ToF16Bits(-0)).toBe(0x8000);
    expect(f32ToF16Bits(65504)).toBe(0x7bff);
    expect(f32ToF16Bits(65520)).toBe(0x7c00); // halfway to 2^16 rounds up to Inf
    expect(f32ToF16Bits(1 + 2 ** -11)).toBe(0x3c00); // tie, even mantissa
    expect(f32ToF16Bits(1 + 3 * 2 ** -11)).toBe(0x3c02); // tie, rounds up to even
    expect(f32ToF16Bits(2 ** -24)).toBe(0x0001);
    expect(f32ToF16Bits(2 ** -25)).toBe(0x0000); // tie between 0 and the smallest subnormal
    expect(f32ToF16Bits(3 * 2 ** -25)).toBe(0x0002);
    expect(f32ToF16Bits(NaN)).toBe(0x7e00);
    for (let h = 0; h < 0x10000; h++) {
      if ((h & 0x7c00) === 0x7c00 && h & 0x3ff) continue; // NaNs
      expect(f32ToF16Bits(f16BitsToF32(h))).toBe(h);
    }
  });

  it('rounds f32 to bf16 to nearest even', () => {
    expect(f32ToBf16Bits(1)).toBe(0x3f80);
    expect(f32ToBf16Bits(1 + 2 ** -8)).toBe(0x3f80);
    expect(f32ToBf16Bits(1 + 3 * 2 ** -8)).toBe(0x3f82);
    expect(Number.isNaN(bf16BitsToF32(f32ToBf16Bits(NaN)))).toBe(true);
    for (let b = 0; b < 0x10000; b++) {
      if ((b & 0x7f80) === 0x7f80 && b & 0x7f) continue;
      expect(f32ToBf16Bits(bf16BitsToF32(b))).toBe(b);
    }
  });
});

describe('safetensors', () => {
  it('round-trips tensors, dtypes and metadata with an 8-byte aligned, space-padded header', () => {
    const path = join(tmp, 'rt.safetensors');
    const a = Float32Array.from({ length: 6 }, (_, i) => i - 2.5);
    const b = Uint16Array.from([0x3c00, 0xbc00, 0x7bff]);
    const c = Uint32Array.from([1, 2, 3, 0xffffffff]);
    const d = Uint16Array.from([0x3f80, 0x4000]);
    writeSafetensors(path, [
      { name: 'a', dtype: 'F32', shape: [2, 3], data: a },
      { name: 'b', dtype: 'F16', shape: [3], data: b },
      { name: 'c.weight', dtype: 'U32', shape: [2, 2], data: c },
      { name: 'd', dtype: 'BF16', shape: [1, 2], data: d },
    ], { format: 'pt' });
    const h = readSafetensorsHeader(path);
    expect(h.dataStart % 8).toBe(0);
    expect(h.metadata).toEqual({ format: 'pt' });
    expect(h.tensors.a).toEqual({ dtype: 'F32', shape: [2, 3], data_offsets: [0, 24] });
    expect(h.tensors['c.weight']!.data_offsets).toEqual([30, 46]);
    const raw = readFileSync(path);
    expect(raw.toString('utf8', 8, h.dataStart)).toMatch(/} *$/);
    expect(new Float32Array(readSafetensorsBytes(path, h, 'a').buffer)).toEqual(a);
    expect(new Uint16Array(readSafetensorsBytes(path, h, 'b').buffer)).toEqual(b);
    expect(new Uint32Array(readSafetensorsBytes(path, h, 'c.weight').buffer)).toEqual(c);
    expect(new Uint16Array(readSafetensorsBytes(path, h, 'd').buffer)).toEqual(d);
    expect(() => writeSafetensors(path, [{ name: 'x', dtype: 'F32', shape: [3], data: a }])).toThrow(/bytes of data/);
  });

  it('reads the stories260K checkpoint', () => {
    const h = readSafetensorsHeader(join(STORIES, 'model.safetensors'));
    expect(Object.keys(h.tensors)).toHaveLength(47);
    expect(h.tensors['model.layers.0.mlp.down_proj.weight']).toMatchObject({ dtype: 'F32', shape: [64, 172] });
  });
});

describe('MLX affine quantization', () => {
  it('follows MLX: zero-anchored grid, negative scale when max dominates, far endpoint clipped', () => {
    // |max| >= |min|: scale negative, q = 0 decodes to max.
    const up = Float32Array.from({ length: 32 }, (_, i) => (i * 1.5) / 31);
    let q = quantizeAffine(up, 1, 32, 4, 32);
    expect(q.scales[0]).toBeCloseTo(-0.1, 7);
    expect(q.biases[0]).toBe(1.5);
    expect(q.packed[0]! & 0xf).toBe(15); // w = 0
    expect(q.packed[3]! >>> 28).toBe(0); // w = 1.5 (element 31: word 3, top nibble)
    // |min| > |max|: edge = min = -1, q0 = round(-1 / (1.99/15)) = -8, scale = 0.125, and
    // 0.99 needs q = 15.92 -> clipped to 15 -> 0.875: an error of 0.92 * scale.
    const down = Float32Array.from({ length: 32 }, (_, i) => (i === 0 ? -1 : i === 1 ? 0.99 : 0));
    q = quantizeAffine(down, 1, 32, 4, 32);
    expect(q.scales[0]).toBe(0.125);
    expect(q.biases[0]).toBe(-1);
    const w = dequantizeAffine(q.packed, q.scales, q.biases, 1, 32, 4, 32);
    expect(w[0]).toBe(-1);
    expect(w[1]).toBe(0.875);
    expect(w[2]).toBe(0); // zero is exact
    // All-negative group: the GPU kernels' max starts at 0, so the grid spans [min, 0].
    q = quantizeAffine(Float32Array.from({ length: 32 }, (_, i) => -1 - i / 31), 1, 32, 4, 32);
    expect(q.biases[0]).toBe(-2);
    expect(q.scales[0]).toBeCloseTo(2 / 15, 6);
  });

  // mlx's 3-bit packing (8 values in 3 bytes: byte 0 = w0 | w1 << 3 | w2 << 6, byte 1 =
  // w2 >> 2 | w3 << 1 | w4 << 4 | w5 << 7, ...): one little-endian bit stream, so element 10
  // straddles words 0 and 1 (bits 30-32), and widening to 4 or 8 bits keeps every value.
  it('3-bit packing: a little-endian bit stream whose fields straddle words; widenPacked keeps the values', () => {
    const q = Array.from({ length: 32 }, (_, k) => (k * 5 + 3) % 8);
    const bytes = new Uint8Array(12);
    for (let k = 0; k < 32; k++) for (let b = 0; b < 3; b++) if ((q[k]! >> b) & 1) bytes[(k * 3 + b) >> 3]! |= 1 << ((k * 3 + b) & 7);
    expect(bytes[0]).toBe(q[0]! | (q[1]! << 3) | ((q[2]! << 6) & 0xff));
    const packed = new Uint32Array(bytes.buffer);
    const ones = new Float32Array(1).fill(1);
    expect(Array.from(dequantizeAffine(packed, ones, new Float32Array(1), 1, 32, 3, 32))).toEqual(q);
    for (const to of [4, 8] as QuantBits[]) {
      const wide = new Uint32Array((32 * to) / 32);
      widenPacked(packed, 3, wide, to, 32);
      expect(Array.from(dequantizeAffine(wide, ones, new Float32Array(1), 1, 32, to, 32))).toEqual(q);
    }
  });

  for (const bits of QUANT_BITS) {
    for (const gs of [32, 64, 128]) {
      it(`${bits}-bit, group ${gs}: error <= |scale|/2, except elements clipped at the grid's far end (< |scale|)`, () => {
        const N = 16;
        const K = 256;
        const nBins = (1 << bits) - 1;
        const rng = makeRng(bits * 1000 + gs);
        const w = Float32Array.from({ length: N * K }, () => rng.normal() * 0.05);
        w.fill(0.25, 0, gs); // constant group
        for (let i = gs; i < 2 * gs; i++) w[i] = -Math.abs(w[i]!) - 0.01; // all-negative group
        for (let i = 2 * gs; i < 3 * gs; i++) w[i] = Math.abs(w[i]!) + 0.3; // all-positive, offset
        const q = quantizeAffine(w, N, K, bits, gs);
        expect(q.packed.length).toBe((N * K * bits) / 32);
        expect(q.scales.length).toBe((N * K) / gs);
        const back = dequantizeAffine(q.packed, q.scales, q.biases, N, K, bits, gs);
        let clipped = 0;
        for (let k = 0; k < N * K; k++) {
          const g = Math.floor(k / gs);
          const s = Math.abs(q.scales[g]!);
          const err = Math.abs(back[k]! - w[k]!);
          if (err <= (s / 2) * (1 + 1e-5) + 1e-7) continue;
          // Only elements beyond the last grid point (q = 2^bits - 1) may miss by more.
          clipped++;
          expect(Math.fround(q.scales[g]! * nBins + q.biases[g]!)).toBeCloseTo(back[k]!, 6);
          expect(err).toBeLessThan(s);
        }
        expect(clipped).toBeLessThan(N * K * 0.03); // observed up to 1.1% (4-bit, group 32)
      });
    }
  }

  it('packs element k at bit (k % (32/bits)) * bits of word k / (32/bits)', () => {
    const w = Float32Array.from({ length: 64 }, (_, k) => (k % 16) / 15); // q = k % 16 with scale 1/15
    const q4 = quantizeAffine(w, 1, 64, 4, 64);
    expect(q4.scales[0]).toBeCloseTo(-1 / 15, 7);
    for (let k = 0; k < 64; k++) expect((q4.packed[k >> 3]! >>> ((k & 7) * 4)) & 0xf).toBe(15 - (k % 16));
    const q8 = quantizeAffine(w, 1, 64, 8, 64);
    for (let k = 0; k < 64; k++) {
      const q = (q8.packed[k >> 2]! >>> ((k & 3) * 8)) & 0xff;
      expect(w[k]!).toBeCloseTo(q8.scales[0]! * q + q8.biases[0]!, 6);
    }
  });

  it('quantizes a checkpoint into the mlx-lm layout', () => {
    for (const bits of [8, 4] as QuantBits[]) {
      const out = join(tmp, `stories-q${bits}`);
      const { quantized, kept } = quantizeCheckpoint(STORIES, out, { bits, groupSize: 32 });
      // down_proj has K = 172, not a multiple of 32: mlx-lm leaves it in float. Norms too.
      expect(quantized).toContain('model.embed_tokens.weight');
      expect(quantized).toContain('model.layers.4.mlp.up_proj.weight');
      expect(kept).toContain('model.layers.0.mlp.down_proj.weight');
      expect(kept).toContain('model.norm.weight');
      expect(quantized.length + kept.length).toBe(47);
      const config = JSON.parse(readFileSync(join(out, 'config.json'), 'utf8'));
      expect(config.quantization).toEqual({ group_size: 32, bits, mode: 'affine' });
      expect(config.quantization_config).toEqual(config.quantization);
      expect(existsSync(join(out, 'tokenizer.json')) && existsSync(join(out, 'model.safetensors.index.json'))).toBe(true);
      const h = readSafetensorsHeader(join(out, 'model.safetensors'));
      expect(h.metadata).toEqual({ format: 'mlx' });
      expect(h.tensors['model.layers.0.self_attn.k_proj.weight']).toMatchObject({ dtype: 'U32', shape: [32, (64 * bits) / 32] });
      expect(h.tensors['model.layers.0.self_attn.k_proj.scales']).toMatchObject({ dtype: 'F32', shape: [32, 2] });
      expect(h.tensors['model.layers.0.self_attn.k_proj.biases']).toMatchObject({ dtype: 'F32', shape: [32, 2] });
    }
    // The CPU reference runs the quantized checkpoint; 8-bit stays close to the float model.
    const prompt = [1, 403, 407, 261, 378];
    const base = new HfReference(STORIES).logits(prompt);
    const q8 = new HfReference(join(tmp, 'stories-q8')).logits(prompt);
    const q4 = new HfReference(join(tmp, 'stories-q4')).logits(prompt);
    const maxDiff = (a: Float64Array, b: Float64Array) => a.reduce((m, v, i) => Math.max(m, Math.abs(v - b[i]!)), 0);
    expect(maxDiff(base, q8)).toBeLessThan(0.5); // observed 0.21 (logits span ~30)
    expect(maxDiff(base, q4)).toBeLessThan(5); // observed 2.4
    expect(maxDiff(base, q4)).toBeGreaterThan(maxDiff(base, q8));
  });
});

describe('stories260K through the GGUF writer and llama.cpp', () => {
  // expected.json case 2 ("Once upon a time", 64 new tokens), copied from the README.
  const prompt = [1, 403, 407, 261, 378];
  const expected = [
    432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282, 295, 433,
    426, 385, 328, 432, 358, 394, 261, 370, 432, 352, 266, 268, 388, 426, 338, 391, 266, 267, 337, 335, 312, 432, 398, 312, 286, 267,
    414, 270, 333, 415, 426, 13, 438, 310, 439, 419, 357, 336,
  ];
  const gguf = join(tmp, 'stories260k-f32.gguf');

  it('writes a GGUF byte-identical to the reference conversion', () => {
    writeGgufFromHf(STORIES, gguf, { name: 'stories260K' });
    const info = readGguf(gguf);
    expect(info.metadata.get('tokenizer.ggml.model')).toBe('llama');
    expect(info.tensors.find((t) => t.name === 'token_embd.weight')?.dims).toEqual([64, 512]);
    expect(createHash('sha256').update(readFileSync(gguf)).digest('hex')).toBe(REFERENCE_GGUF_SHA256);
  });

  it('computes llama3 RoPE factors like transformers (_compute_llama3_parameters)', () => {
    const f = llama3RopeFactors({
      hidden_size: 64, num_attention_heads: 4, head_dim: 16, rope_theta: 10000,
      rope_scaling: { rope_type: 'llama3', factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 64 },
    });
    // wavelengths 6.3 (< 64/4: kept), 19.9 and 62.8 (smoothed), >= 199 (> 64: divided by 8)
    expect([...f].map((v) => +v.toFixed(5))).toEqual([1, 1.29398, 7.66739, 8, 8, 8, 8, 8]);
  });

  it('llama.cpp and the HF reference reproduce expected.json case 2', async () => {
    const r = await oracleGreedy(gguf, prompt, 64, { margins: true });
    expect(r.tokens).toEqual(expected);
    expect(Math.min(...r.margins!)).toBeCloseTo(0.071, 2);
    const ref = new HfReference(STORIES);
    expect(ref.greedy(prompt, 16)).toEqual(expected.slice(0, 16));
    expect(maxLogProbDiff(ref.logits(prompt), r.firstLogProbs)).toBeLessThan(1e-4);
    const { logits } = storiesExpected.reference_logits;
    expect(maxLogProbDiff(logits, r.firstLogProbs)).toBeLessThan(1e-4); // observed 1.1e-5
    const mine = ref.logits(prompt);
    expect(Math.max(...logits.map((v, i) => Math.abs(v - mine[i]!)))).toBeLessThan(1e-4); // raw logits: observed 5.5e-6
  });

  it('an f16 GGUF (2-D weights f16, norms f32) still reproduces case 2', async () => {
    const f16 = join(tmp, 'stories260k-f16.gguf');
    writeGgufFromHf(STORIES, f16, { outType: 'F16' });
    const info = readGguf(f16);
    expect(info.metadata.get('general.file_type')).toBe(1);
    expect(info.tensors.find((t) => t.name === 'blk.0.attn_q.weight')?.type).toBe(1);
    expect(info.tensors.find((t) => t.name === 'blk.0.attn_norm.weight')?.type).toBe(0);
    expect((await oracleGreedy(f16, prompt, 64)).tokens).toEqual(expected);
  });
});
