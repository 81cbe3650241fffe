// Weight format: MXFP4 (OCP microscaling FP4), as GPT-OSS stores its experts: row-major
// [N, K] in blocks of 32 values, each block 16 bytes of e2m1 codes (two per byte, low nibble
// first: value i of a block is bits 4 (i % 8) .. of its word i / 8) and one e8m0 scale byte
// e: w = e2m1 * 2^(e - 127). K % 32 == 0, so block (n * K + k) / 32 holds element (n, k).
// Bindings: 2 the blocks, one vec4<u32> each; 3 the scales, one byte per block, four to a
// word (the part's blocks in order: runtime/tensors.ts mxfp4Scales).
@group(0) @binding(2) var<storage, read> w_data: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> w_scales: array<u32>;

// Four e2m1 codes (sign, two exponent bits, one mantissa bit) as twice their values:
// 0, 1 (the subnormal 0.5), 2, 3, 4, 6, 8, 12, and their negatives (code 8 is -0).
fn e2m1_x2(q: vec4<u32>) -> vec4<f32> {
  let e = (q >> vec4<u32>(1u)) & vec4<u32>(3u);
  let m = q & vec4<u32>(1u);
  let v = vec4<f32>(select(m, (m + 2u) << (max(e, vec4<u32>(1u)) - 1u), e > vec4<u32>(0u)));
  return select(v, -v, (q & vec4<u32>(8u)) != vec4<u32>(0u));
}

// The power of two that block b's doubled codes (e2m1_x2) are scaled by: e - 127 - 1.
fn block_exponent(b: u32) -> i32 {
  return i32((w_scales[b / 4u] >> ((b % 4u) * 8u)) & 0xffu) - 128;
}

fn w_load4(n: u32, k: u32, K: u32) -> vec4<f32> {
  let b = (n * K + k) / 32u;
  let word = w_data[b][(k % 32u) / 8u] >> ((k % 8u) * 4u);
  let q = vec4<u32>(word, word >> 4u, word >> 8u, word >> 12u) & vec4<u32>(0xfu);
  return ldexp(e2m1_x2(q), vec4<i32>(block_exponent(b)));
}
