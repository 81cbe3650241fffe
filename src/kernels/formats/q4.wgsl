// Weight format: MLX affine 4-bit, as mlx-lm writes it. Row-major [N, K] packed eight
// values per u32 from the low bits up; per group of GROUP_SIZE columns an f32 scale
// and bias (converted at load): w = q * scale + bias. K % GROUP_SIZE == 0, so a group
// never crosses a row and the group index is element / GROUP_SIZE.
// The packed words live in an rgba32uint texture PACKED_WIDTH texels wide, flat: texel i
// holds words 4i .. 4i+3 (runtime/tensors.ts packedTexture).
const BITS: u32 = 4u;
const PACKED_WIDTH: u32 = 512u;
override GROUP_SIZE: u32 = 64u;
@group(0) @binding(2) var w_packed: texture_2d<u32>;
@group(0) @binding(3) var<storage, read> w_scales: array<f32>;
@group(0) @binding(4) var<storage, read> w_biases: array<f32>;

// Words 4i .. 4i+3 of the packed data.
fn w_texel(i: u32) -> vec4<u32> {
  return textureLoad(w_packed, vec2<u32>(i % PACKED_WIDTH, i / PACKED_WIDTH), 0);
}

fn w_load4(n: u32, k: u32, K: u32) -> vec4<f32> {
  let e = n * K + k;
  let word = w_texel(e / 32u)[(e / 8u) % 4u] >> ((e % 8u) * 4u);
  let q = vec4<u32>(word, word >> 4u, word >> 8u, word >> 12u) & vec4<u32>(15u);
  let g = e / GROUP_SIZE;
  return vec4<f32>(q) * w_scales[g] + w_biases[g];
}
