// The 4-bit and 8-bit paths (packed weights dequantized inside matvec_q / matmul_q /
// embedding) against the same weights dequantized to f32 on the host and run through the
// float kernels. Both sides multiply the same f32 values, so they differ only by
// summation order: the per-group "s * dot(q, x) + b * sum(x)" factoring versus a plain
// dot product.
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { dequantizeAffine, quantizeCheckpoint, type QuantBits } from '../src/models/quantize.js';
import { listCheckpointTensors, readSafetensorsBytes, readTensorF32, writeSafetensors, type SafetensorsWriteTensor } from '../src/models/safetensors.js';
import { greedy, openRunner } from './helpers/model-harness.js';
import { makeRandomCheckpoint } from './helpers/random-checkpoint.js';

/** Writes the f32 checkpoint that a quantized one stands for. */
function dequantizeCheckpoint(qDir: string, outDir: string, bits: QuantBits, groupSize: number): void {
  const tensors = listCheckpointTensors(qDir);
  const out: SafetensorsWriteTensor[] = [];
  for (const [name, t] of tensors) {
    if (name.endsWith('.scales') || name.endsWith('.biases')) continue;
    if (t.info.dtype !== 'U32') {
      out.push({ name, dtype: t.info.dtype as 'F32', shape: t.info.shape, data: readSafetensorsBytes(t.path, t.header, name) });
      continue;
    }
    const prefix = name.slice(0, -'.weight'.length);
    const [N, packedCols] = t.info.shape;
    const K = (packedCols * 32) / bits;
    const packed = new Uint32Array(readSafetensorsBytes(t.path, t.header, name).slice().buffer);
    const w = dequantizeAffine(packed, readTensorF32(tensors.get(`${prefix}.scales`)!), readTensorF32(tensors.get(`${prefix}.biases`)!), N, K, bits, groupSize);
    out.push({ name, dtype: 'F32', shape: [N, K], data: w });
  }
  mkdirSync(outDir, { recursive: true });
  writeSafetensors(join(outDir, 'model.safetensors'), out);
  const config = JSON.parse(readFileSync(join(qDir, 'config.json'), 'utf8'));
  delete config.quantization;
  delete config.quantization_config;
  writeFileSync(join(outDir, 'config.json'), JSON.stringify(config));
  for (const f of readdirSync(qDir)) if (f.startsWith('tokenizer') || f === 'generation_config.json') copyFileSync(join(qDir, f), join(outDir, f));
}

describe('quantized weights', () => {
  const root = mkdtempSync(join(tmpdir(), 'mlxcel-quant-'));
  // bf16, so the quantized checkpoints keep bf16 scales and biases, as mlx-community's do
  // (and as test/kernels/matmul.test.ts's cases mostly do, whose compiled kernels these share).
  const base = join(root, 'bf16');
  makeRandomCheckpoint({ arch: 'qwen3', tokenizer: 'stories', hidden: 128, layers: 2, heads: 4, kvHeads: 2, headDim: 32, intermediate: 256, seed: 7, tie: true, dtype: 'BF16' }, base);
  const prompt = [1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421];

  for (const [bits, groupSize] of [[4, 32], [4, 64], [4, 128], [8, 32], [8, 64], [8, 128]] as Array<[QuantBits, number]>) {
    it(`${bits}-bit group ${groupSize} matches its f32 dequantization`, async () => {
      const q = join(root, `q${bits}g${groupSize}`);
      const d = join(root, `d${bits}g${groupSize}`);
      quantizeCheckpoint(base, q, { bits, groupSize });
      dequantizeCheckpoint(q, d, bits, groupSize);
      // Prompt long enough that prefill takes matmul_q (> 2 rows); decode takes matvec_q.
      const a = await greedy(await openRunner(q), prompt, 16);
      const b = await greedy(await openRunner(d), prompt, 16);
      let maxDiff = 0;
      let maxAbs = 0;
      for (let i = 0; i < a.promptLogits.length; i++) {
        maxDiff = Math.max(maxDiff, Math.abs(a.promptLogits[i] - b.promptLogits[i]));
        maxAbs = Math.max(maxAbs, Math.abs(b.promptLogits[i]));
      }
      // f32 sums of ~100-term products of unit-scale values in different orders: errors of
      // a few ulps per layer, far below 1e-3 of the logit scale.
      expect(maxDiff).toBeLessThan(1e-3 * Math.max(1, maxAbs));
      expect(a.tokens).toEqual(b.tokens);
    });
  }

  // Decode steps there run matvec_q_workgroup.wgsl and attention_decode_workgroup.wgsl; the
  // prefill kernels are the same on both sides.
  it('4-bit group 64 decodes the same through the GPU layouts (Ops told the adapter is a GPU) as through the CPU ones', async () => {
    const q = join(root, 'gpu-layouts-q4g64');
    quantizeCheckpoint(base, q, { bits: 4, groupSize: 64 });
    const cpu = await openRunner(q);
    const gpu = await openRunner(q, 256, { asGpu: true });
    const a = await greedy(cpu, prompt, 16);
    const b = await greedy(gpu, prompt, 16);
    expect(b.tokens).toEqual(a.tokens);
    // The last decode step's logits: summation order differs, nothing else.
    const la = await cpu.readLogits(1);
    const lb = await gpu.readLogits(1);
    let maxDiff = 0;
    let maxAbs = 0;
    for (let i = 0; i < la.length; i++) {
      maxDiff = Math.max(maxDiff, Math.abs(la[i] - lb[i]));
      maxAbs = Math.max(maxAbs, Math.abs(la[i]));
    }
    expect(maxDiff).toBeLessThan(1e-3 * Math.max(1, maxAbs));
  });
});
