// The GPU bytes of a checkpoint's quantized weights as loaded, for the Qwen3-0.6B-shaped
// bench checkpoint in 4 and in 3 bits: the packed words (rows padded to whole texels:
// tensors.ts rowBytes) and the scales and biases, counted from the checkpoint's tensors with
// the loader's own row sizes, beside the same 3-bit weights held as 4-bit (how 2- and 3-bit
// checkpoints loaded before they were read at their stored width). Each model is also
// loaded, to check that it loads as counted (the startup line's format).
//
// Run: npx tsx bench/weight-bytes.ts
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Checkpoint } from '../src/models/checkpoint.js';
import { ENGINE_DEFAULTS } from '../src/engine/engine.js';
import { loadModel } from '../src/models/model.js';
import { openGpu } from '../src/runtime/gpu.js';
import { rowBytes } from '../src/runtime/tensors.js';
import type { AffineFormat } from '../src/runtime/kernel-source.js';
import { QWEN3_06B, QWEN3_06B_Q3, writeBenchModel, type BenchShape } from './bench-model.js';

const MiB = 2 ** 20;

/** Bytes of the packed words (as `format`, default: as stored) and of the scales and biases. */
function weightBytes(dir: string, bits: number, format?: AffineFormat): { packed: number; affine: number } {
  const ckpt = new Checkpoint(dir);
  let packed = 0;
  let affine = 0;
  for (const name of ckpt.names()) {
    const { dtype, shape } = ckpt.entry(name).info;
    if (name.endsWith('.weight') && dtype === 'U32') packed += shape[0]! * rowBytes(format ?? (`q${bits}` as AffineFormat), (shape[1]! * 32) / bits);
    // bf16 scale and bias side by side, rows padded to quads (tensors.ts affineTexture).
    if (name.endsWith('.scales')) affine += Math.ceil(shape[0]! / 4) * 4 * shape[1]! * 2 * 2;
  }
  ckpt.close();
  return { packed, affine };
}

const gpu = await openGpu('auto', { quietDawn: true });
const rows: string[] = [];
const f = (b: number) => (b / MiB).toFixed(1);
for (const s of [QWEN3_06B, QWEN3_06B_Q3] as BenchShape[]) {
  const dir = writeBenchModel(join(tmpdir(), 'mlxcel-bench', `qwen3-0.6b-${s.bits}bit`), s);
  const { weightFormat } = await loadModel(gpu, dir, { maxTokens: 16, maxSeqs: 1, kvTokens: 256, maxContext: 256, blockSize: 16, kvTypes: { k: ENGINE_DEFAULTS.cacheTypeK, v: ENGINE_DEFAULTS.cacheTypeV } });
  const w = weightBytes(dir, s.bits);
  rows.push(`| ${s.label}, as stored (loads as ${weightFormat}) | ${f(w.packed)} | ${f(w.affine)} | ${f(w.packed + w.affine)} |`);
  if (s.bits < 4) {
    const wide = weightBytes(dir, s.bits, 'q4');
    rows.push(`| ${s.label}, widened to q4 (before) | ${f(wide.packed)} | ${f(wide.affine)} | ${f(wide.packed + wide.affine)} |`);
  }
}
console.log('| checkpoint | packed words (MiB) | scales + biases (MiB) | quantized weights on the GPU (MiB) |');
console.log('|---|---:|---:|---:|');
for (const r of rows) console.log(r);
process.exit(0);
