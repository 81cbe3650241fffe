// Weight format: MLX affine quantization, as mlx-lm writes it (q4 and q8: BITS = 4 or 8).
// Row-major [N, K] packed 32 / BITS values per u32 from the low bits up; per group of
// GROUP_SIZE columns a scale and a bias: w = q * scale + bias. K % GROUP_SIZE == 0, so a
// group never crosses a row and the group index is element / GROUP_SIZE.
// Bindings: 2 the packed words in an rgba32uint texture PACKED_WIDTH texels wide, flat:
// texel i holds words 4i .. 4i+3 (runtime/tensors.ts packedTexture); 3 scales and 4 biases
// as the checkpoint stores them (SCALE_FORMAT): 0 f32, 1 f16 or 2 bf16, the 16-bit ones two
// per word, low half first.
override BITS: u32 = 4u;
override GROUP_SIZE: u32 = 64u;
override SCALE_FORMAT: u32 = 0u;
const PACKED_WIDTH: u32 = 512u;
@group(0) @binding(2) var w_packed: texture_2d<u32>;
@group(0) @binding(3) var<storage, read> w_scales: array<u32>;
@group(0) @binding(4) var<storage, read> w_biases: array<u32>;

// Words 4i .. 4i+3 of the packed data.
fn w_texel(i: u32) -> vec4<u32> {
  return textureLoad(w_packed, vec2<u32>(i % PACKED_WIDTH, i / PACKED_WIDTH), 0);
}

// Value g of a scale or bias array, from the word holding it (word g, or g / 2 for halves).
fn affine_value(word: u32, g: u32) -> f32 {
  if (SCALE_FORMAT == 0u) { return bitcast<f32>(word); }
  let h = (word >> ((g % 2u) * 16u)) & 0xffffu;
  if (SCALE_FORMAT == 1u) { return unpack2x16float(h).x; }
  return bitcast<f32>(h << 16u);
}

fn affine_word(g: u32) -> u32 {
  return select(g / 2u, g, SCALE_FORMAT == 0u);
}

fn w_scale(g: u32) -> f32 {
  return affine_value(w_scales[affine_word(g)], g);
}

fn w_bias(g: u32) -> f32 {
  return affine_value(w_biases[affine_word(g)], g);
}

fn w_load4(n: u32, k: u32, K: u32) -> vec4<f32> {
  let e = n * K + k;
  let per_word = 32u / BITS;
  let word = w_texel(e / (4u * per_word))[(e / per_word) % 4u] >> ((e % per_word) * BITS);
  let mask = (1u << BITS) - 1u;
  let q = vec4<u32>(word, word >> BITS, word >> (2u * BITS), word >> (3u * BITS)) & vec4<u32>(mask);
  let g = e / GROUP_SIZE;
  return vec4<f32>(q) * w_scale(g) + w_bias(g);
}
