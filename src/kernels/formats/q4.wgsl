// Weight format: MLX affine 4-bit, as mlx-lm writes it. Row-major [N, K] packed eight
// values per u32 from the low bits up; per group of GROUP_SIZE columns an f32 scale
// and bias (converted at load): w = q * scale + bias. K % GROUP_SIZE == 0, so a group
// never crosses a row and the group index is element / GROUP_SIZE.
override GROUP_SIZE: u32 = 64u;
@group(0) @binding(2) var<storage, read> w_data: array<u32>;
@group(0) @binding(3) var<storage, read> w_scales: array<f32>;
@group(0) @binding(4) var<storage, read> w_biases: array<f32>;

fn w_load4(n: u32, k: u32, K: u32) -> vec4<f32> {
  let e = n * K + k;
  let word = w_data[e / 8u] >> ((e % 8u) * 4u);
  let q = vec4<u32>(word, word >> 4u, word >> 8u, word >> 12u) & vec4<u32>(15u);
  let g = e / GROUP_SIZE;
  return vec4<f32>(q) * w_scales[g] + w_biases[g];
}
