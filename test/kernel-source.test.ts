// Kernel assembly (src/runtime/kernel-source.ts): a kernel file's #include, #if and #const
// lines expanded for the variant the runtime picks, every variant value read, and the
// enumerations the host reads from the WGSL.
import { describe, expect, it } from 'vitest';
import { kernelEnum, kernelSource } from '../src/runtime/kernel-source.js';

const matvec = { BITS: 4, GROUP_SIZE: 64, W_READ: 'storage', X_UNIFORM: true, X_VEC4S: 16, NORM_UNIFORM: false };
const count = (text: string, needle: string | RegExp) => text.split(needle).length - 1;
/** The unrolled chunk calls of matvec_q's K loop. */
const chunkCalls = /chunk_dots\(c[ ,]/;

describe('kernel assembly', () => {
  it('expands each include once, in place, and leaves no directive behind', () => {
    const code = kernelSource('matvec_q', matvec);
    expect(code).not.toMatch(/^#/m);
    // common.wgsl comes in through matvec_q, linear_out and formats/affine: once.
    expect(count(code, 'struct Step {')).toBe(1);
    expect(code.indexOf('struct Step {')).toBeLessThan(code.indexOf('fn store_y('));
    expect(code).toContain('texture_storage_2d<rgba32uint, read>');
    expect(kernelSource('matvec_q', { ...matvec, W_READ: 'sampled' })).toContain('var w_packed: texture_2d<u32>;');
  });

  it('keeps the branch whose condition holds and writes #const lines from the variant', () => {
    const uniform = kernelSource('matvec_q', matvec);
    expect(uniform).toContain('const X_VEC4S: u32 = 16u;');
    expect(uniform).toContain('var<uniform> x: array<vec4<f32>, X_VEC4S>;');
    expect(uniform).toContain('var<storage, read> norm_weight: array<vec4<f32>>;');
    expect(uniform).toContain('const GROUP_SIZE: u32 = 64u;');
    // Group 64: two chunk calls per group; group 128: four; group 32: one.
    expect(count(uniform, chunkCalls)).toBe(2);
    expect(count(kernelSource('matvec_q', { ...matvec, GROUP_SIZE: 128 }), chunkCalls)).toBe(4);
    expect(count(kernelSource('matvec_q', { ...matvec, GROUP_SIZE: 32 }), chunkCalls)).toBe(1);
    const storage = kernelSource('matvec_q', { BITS: 4, GROUP_SIZE: 64, W_READ: 'storage', X_UNIFORM: false, NORM_UNIFORM: true, NORM_VEC4S: 8 });
    expect(storage).toContain('var<storage, read> x: array<vec4<f32>>;');
    expect(storage).toContain('const NORM_VEC4S: u32 = 8u;');
    expect(storage).not.toContain('const X_VEC4S');
  });

  it('includes a name built from the variant: the weight format', () => {
    expect(kernelSource('matmul', { FORMAT: 'bf16' })).toContain('bitcast<f32>');
    expect(kernelSource('embedding', { FORMAT: 'affine', BITS: 4, GROUP_SIZE: 32, W_READ: 'sampled' })).toContain('fn w_load4(');
  });

  it('refuses a variant value the kernel does not read, one it lacks, and a wrong constant type', () => {
    expect(() => kernelSource('glu', { GROUP_SIZE: 64 })).toThrow(/glu: the variant sets GROUP_SIZE, which the kernel does not read/);
    expect(() => kernelSource('matvec_q', { ...matvec, X_VEC4S: undefined as unknown as number, X_UNIFORM: true })).toThrow(/a u32 constant needs a number/);
    const { W_READ: _, ...noRead } = matvec;
    expect(() => kernelSource('matvec_q', noRead)).toThrow(/formats\/affine\.wgsl:\d+: the variant has no W_READ/);
    expect(() => kernelSource('attention', { KV_READ: 'storage', K_TYPE: 'f16', V_TYPE: 'f16', D4: 4, TQ: 1.5, HQ: 1 })).toThrow(/1\.5 is not a u32/);
  });

  it('reads enumeration codes from the WGSL', () => {
    expect(kernelEnum('common', 'ACT', ['silu', 'gelu_tanh', 'gelu', 'tanh', 'relu2', 'gelu_quick'])).toEqual({ silu: 0, gelu_tanh: 1, gelu: 2, tanh: 3, relu2: 4, gelu_quick: 5 });
    expect(kernelEnum('pool', 'POOL', ['mean', 'first', 'last'])).toEqual({ mean: 0, first: 1, last: 2 });
    expect(() => kernelEnum('pool', 'POOL', ['median'])).toThrow(/pool\.wgsl declares no POOL_MEDIAN/);
  });
});
