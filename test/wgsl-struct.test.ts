// The host's view of WGSL structs (src/runtime/wgsl-struct.ts): fields read from the source
// by name, packed by name, and every mismatch refused.
import { describe, expect, it } from 'vitest';
import { kernelStruct } from '../src/runtime/kernel-source.js';
import { packArray, packStruct, parseBindings, parseStruct } from '../src/runtime/wgsl-struct.js';

describe('WGSL structs', () => {
  const source = `
    // a comment with struct Params { x: vec4<f32> } in it
    struct Params { K: u32, eps: f32, // trailing comment
      delta: i32,
      _pad: u32 }`;

  it('reads the fields in order, comments skipped, and packs them by name with their types', () => {
    const layout = parseStruct(source, 'Params');
    expect(layout.fields).toEqual([{ name: 'K', type: 'u32' }, { name: 'eps', type: 'f32' }, { name: 'delta', type: 'i32' }, { name: '_pad', type: 'u32' }]);
    expect(layout.bytes).toBe(16);
    const view = new DataView(packStruct(layout, { K: 7, eps: 0.5, delta: -3 }));
    expect([view.getUint32(0, true), view.getFloat32(4, true), view.getInt32(8, true), view.getUint32(12, true)]).toEqual([7, 0.5, -3, 0]);
    const two = new DataView(packArray(layout, [{ K: 1, eps: 1, delta: 1 }, { K: 2, eps: 2, delta: 2 }]));
    expect(two.getUint32(16, true)).toBe(2);
  });

  it('refuses a missing field, an unknown one, and a field that is not a 4-byte scalar', () => {
    const layout = parseStruct(source, 'Params');
    expect(() => packStruct(layout, { K: 1, eps: 1 })).toThrow(/no value for delta/);
    expect(() => packStruct(layout, { K: 1, eps: 1, delta: 0, k: 2 })).toThrow(/has no field k/);
    expect(() => parseStruct('struct S { v: vec4<f32> }', 'S')).toThrow(/v is vec4<f32>/);
    expect(() => parseStruct(source, 'Missing')).toThrow(/no struct Missing/);
  });

  it('reads binding numbers by variable name, whatever the address space, comments skipped', () => {
    const bindings = parseBindings(`
      @group(0) @binding(0) var<uniform> p: Params;
      // @group(0) @binding(9) var<storage, read> ghost: array<f32>;
      @group(0) @binding(3) var<storage, read_write> y: array<f32>;
      @group(0) @binding(5) var x_tex: texture_2d<f32>;`);
    expect([...bindings]).toEqual([['p', 0], ['y', 3], ['x_tex', 5]]);
  });

  it('reads every struct the host writes from the kernels themselves', () => {
    expect(kernelStruct('linear_out', 'Params').fields.map((f) => f.name)).toContain('norm_eps');
    expect(kernelStruct('common', 'Step').fields.map((f) => f.name)).toEqual(['n_tokens', 'n_seqs', 'n_bias']);
    expect(kernelStruct('sample', 'SeqParams').bytes % 16).toBe(0);
    expect(kernelStruct('logit_bias', 'Entry').bytes).toBe(16);
  });
});
