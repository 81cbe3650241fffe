// Assembles a kernel's WGSL: the shared prelude, the weight-format functions the kernel
// reads weights through (if any), the shared pieces it builds on, then the kernel file.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseStruct, type StructLayout } from './wgsl-struct.js';

// Resolves to src/kernels from both src/runtime (tsx, vitest) and dist/runtime (built).
const KERNEL_DIR = fileURLToPath(new URL('../../src/kernels/', import.meta.url));

export type WeightFormat = 'f32' | 'f16' | 'bf16' | 'q4' | 'q8';

/** q4 / q8: MLX affine quantization, packed words in a texture (formats/affine.wgsl). */
export function isAffine(format: WeightFormat): format is 'q4' | 'q8' {
  return format === 'q4' || format === 'q8';
}

/** Shared WGSL files a kernel builds on, included before it. */
const SHARED: Record<string, string[]> = {
  matmul: ['linear_out'],
  matvec_q: ['linear_out', 'matvec_input'],
  matvec_q_workgroup: ['linear_out', 'matvec_input'],
  matmul_q: ['linear_out'],
  rope_kv_write: ['kv_cache'],
  attention: ['kv_cache', 'attention_io'],
  attention_decode_workgroup: ['kv_cache', 'attention_io'],
};

const cache = new Map<string, string>();

function read(path: string): string {
  let text = cache.get(path);
  if (text === undefined) {
    text = readFileSync(KERNEL_DIR + path, 'utf8');
    cache.set(path, text);
  }
  return text;
}

/** A WGSL file of src/kernels that a kernel's declarations include, e.g. 'readers/affine_storage'. */
export function kernelPiece(name: string): string {
  return read(`${name}.wgsl`);
}

/** `declarations`: WGSL the runtime adds for this pipeline (bindings and reads it chose, see Ops). */
export function kernelSource(kernel: string, format?: WeightFormat, declarations = ''): string {
  const parts = [read('common.wgsl')];
  if (format) parts.push(read(`formats/${isAffine(format) ? 'affine' : format}.wgsl`));
  for (const shared of SHARED[kernel] ?? []) parts.push(read(`${shared}.wgsl`));
  if (declarations) parts.push(declarations);
  parts.push(read(`${kernel}.wgsl`));
  return parts.join('\n');
}

const structs = new Map<string, StructLayout>();

/** `struct name` as kernel file `file` (e.g. 'linear_out', 'common') declares it. */
export function kernelStruct(file: string, name: string): StructLayout {
  const key = `${file}/${name}`;
  let layout = structs.get(key);
  if (!layout) structs.set(key, (layout = parseStruct(read(`${file}.wgsl`), name)));
  return layout;
}
