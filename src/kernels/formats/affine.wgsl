// Weight format: MLX affine quantization, as mlx-lm writes it, at its stored bit width
// (BITS = 2, 3, 4, 5, 6 or 8). Row-major [N, K], each row one little-endian bit stream:
// value k at bits [k * BITS, (k + 1) * BITS), the stream cut into u32 words low bits
// first, so a 3-, 5- or 6-bit value can straddle two words; a 32-value chunk of a row is
// BITS words. Per group of GROUP_SIZE columns a scale and a bias: w = q * scale + bias.
// K % GROUP_SIZE == 0, so a group never crosses a row and the group index is
// element / GROUP_SIZE.
// Bindings: 2 the packed words, flat in an rgba32uint texture PACKED_WIDTH texels wide (a
// power of two), in tiles of PACKED_TILE_ROWS rows (both set by runtime/tensors.ts
// packedTexture), each row padded to whole texels (w_row_texels; only where K * BITS is not
// a multiple of 128): texel c (words 4c .. 4c+3) of row n is texel (n / PACKED_TILE_ROWS) *
// PACKED_TILE_ROWS * row_texels + c * PACKED_TILE_ROWS + n % PACKED_TILE_ROWS, so a tile's
// rows are read side by side. 3 the entries, flat in a texture too (tensors.ts
// affineTexture): each group's scale and bias side by side in the checkpoint's dtype
// (SCALE_FORMAT: SCALE_F32, two words; SCALE_F16 or SCALE_BF16, one word, scale in the low half), so
// one load serves both, and a group's entries for four consecutive rows adjacent
// (w_affine_entry; tensors.ts interleaveAffine), so one 16-byte load serves matvec_q four
// rows (w_scale_bias4).
// Why textures: on llvmpipe a storage-buffer load at an address that differs per
// invocation is a per-lane scalar loop, while a texel load is one gather for all the lanes.
// BITS and GROUP_SIZE are variant values (constant expressions): each pipeline's source
// holds only its width's decoding (the `#if BITS` blocks below), and kernels can unroll a
// group's chunks.
#const BITS: u32
#const GROUP_SIZE: u32
override SCALE_FORMAT: u32 = 0u;
override PACKED_WIDTH: u32 = 512u;
override PACKED_TILE_ROWS: u32 = 8u;
// How the scales and biases are stored (SCALE_FORMAT), as the checkpoint has them; the host
// reads these codes (runtime/kernel-source.ts kernelEnum).
const SCALE_F32: u32 = 0u;
const SCALE_F16: u32 = 1u;
const SCALE_BF16: u32 = 2u;
// Both textures (bindings 2 and 3) with their reads: w_texel(i), texel i of the packed
// data, and w_affine_texel(i), vec4 i of the entries, each the texel (i % PACKED_WIDTH,
// i / PACKED_WIDTH), through a sampled or a read-only storage binding (W_READ: sampled or
// storage; Ops.affineRead says which kernels take which).
#include "readers/affine_${W_READ}"

// Texels per row of K values: the row's K * BITS bits in whole texels.
fn w_row_texels(K: u32) -> u32 {
  return (K * BITS + 127u) / 128u;
}

// Flat index of texel c of row n, for rows of `row_texels` texels.
fn w_row_texel(n: u32, c: u32, row_texels: u32) -> u32 {
  return (n / PACKED_TILE_ROWS) * PACKED_TILE_ROWS * row_texels + c * PACKED_TILE_ROWS + n % PACKED_TILE_ROWS;
}

// Entry of row n's group g, for rows of `groups` groups.
fn w_affine_entry(n: u32, g: u32, groups: u32) -> u32 {
  return ((n / 4u) * groups + g) * 4u + n % 4u;
}

// A 16-bit format's (scale, bias) word.
fn scale_bias16(w: u32) -> vec2<f32> {
  if (SCALE_FORMAT == SCALE_F16) { return unpack2x16float(w); }
  return vec2<f32>(bitcast<f32>(w << 16u), bitcast<f32>(w & 0xffff0000u));
}

// Entry e's (scale, bias).
fn w_scale_bias(e: u32) -> vec2<f32> {
  if (SCALE_FORMAT == SCALE_F32) {
    let w = w_affine_texel(e / 2u);
    return bitcast<vec2<f32>>(select(w.xy, w.zw, e % 2u == 1u));
  }
  return scale_bias16(w_affine_texel(e / 4u)[e % 4u]);
}

// The scales (s) and biases (b) of entries e .. e + 3 (e a multiple of 4: one group of a
// row quad).
struct ScaleBias4 { s: vec4<f32>, b: vec4<f32> }
fn w_scale_bias4(e: u32) -> ScaleBias4 {
  if (SCALE_FORMAT == SCALE_F32) {
    let lo = bitcast<vec4<f32>>(w_affine_texel(e / 2u));
    let hi = bitcast<vec4<f32>>(w_affine_texel(e / 2u + 1u));
    return ScaleBias4(vec4<f32>(lo.xz, hi.xz), vec4<f32>(lo.yw, hi.yw));
  }
  let w = w_affine_texel(e / 4u);
  let a = scale_bias16(w.x);
  let b = scale_bias16(w.y);
  let c = scale_bias16(w.z);
  let d = scale_bias16(w.w);
  return ScaleBias4(vec4<f32>(a.x, b.x, c.x, d.x), vec4<f32>(a.y, b.y, c.y, d.y));
}

// The hot kernels (matvec_q, matmul_q) take a 4- or 8-bit word's fields masked in place,
// not shifted down: the field at bit s converts to q * 2^s, so the X values it multiplies
// come pre-scaled by 2^-s (x_field_scale), once per X value for every row that reads it.
// That saves a shift per weight. The top field is shifted instead, which needs no mask and
// keeps every conversion below 2^31. Other widths, whose fields straddle words, take them
// shifted down (chunk_field) and X unscaled.
// The 2^-s that X quad f of a 32-value chunk is scaled by (4-bit: even f meets a word's
// fields 0-3, odd f its fields 4-7).
fn x_field_scale(f: u32) -> vec4<f32> {
#if BITS == 8
  return vec4<f32>(1.0, 0x1p-8, 0x1p-16, 1.0);
#elif BITS == 4
  return select(vec4<f32>(1.0, 0x1p-4, 0x1p-8, 0x1p-12), vec4<f32>(0x1p-16, 0x1p-20, 0x1p-24, 1.0), f % 2u == 1u);
#else
  return vec4<f32>(1.0);
#endif
}

// The BITS words of one 32-value chunk of a row: words 0-3 in lo, 4-7 in hi.
struct ChunkWords { lo: vec4<u32>, hi: vec4<u32> }

// The words of chunk `chunk` of the row whose texel 0 is at `row` (its texel t at
// row + t * PACKED_TILE_ROWS). The chunk starts at word chunk * BITS, word
// (chunk * BITS) % 4 of its first texel: always word 0 for 4 and 8 bits, 0 or 2 for 2 and
// 6 bits, any word for 3 and 5; it ends within the next texel (start + BITS <= 8).
fn chunk_words(row: u32, chunk: u32) -> ChunkWords {
  let first = chunk * BITS;
  let at = row + (first / 4u) * PACKED_TILE_ROWS;
  let a = w_texel(at);
#if BITS == 4
  return ChunkWords(a, vec4<u32>(0u));
#elif BITS == 2
  return ChunkWords(select(a, a.zwxy, first % 4u == 2u), vec4<u32>(0u));
#elif BITS == 8
  return ChunkWords(a, w_texel(at + PACKED_TILE_ROWS));
#else
  // The eight words from the start, out of this texel and the next: shifted down by two
  // words, then by one, as the start's bits say. Selects rather than a branch per start,
  // which the unrolled row loops would multiply into many blocks for LLVM to compile.
  let b = w_texel(at + PACKED_TILE_ROWS);
  let two = (first & 2u) != 0u;
  let lo2 = select(a, vec4<u32>(a.zw, b.xy), two);
  let hi2 = select(b, vec4<u32>(b.zw, 0u, 0u), two);
  let one = (first & 1u) != 0u;
  return ChunkWords(select(lo2, vec4<u32>(lo2.yzw, hi2.x), one), select(hi2, vec4<u32>(hi2.yzw, 0u), one));
#endif
}

#if BITS == 4
// Fields 0-3 and 4-7 of a 4-bit word, each times 2^s.
fn nibbles_lo(w: u32) -> vec4<f32> { return vec4<f32>(vec4<u32>(w) & vec4<u32>(0xfu, 0xf0u, 0xf00u, 0xf000u)); }
fn nibbles_hi(w: u32) -> vec4<f32> { return vec4<f32>(vec4<u32>(w & 0xf0000u, w & 0xf00000u, w & 0xf000000u, w >> 28u)); }
#elif BITS == 8
// The four fields of an 8-bit word, each times 2^s.
fn bytes_in_place(w: u32) -> vec4<f32> { return vec4<f32>(vec4<u32>(w & 0xffu, w & 0xff00u, w & 0xff0000u, w >> 24u)); }
#else
// Word i (< 8) of a chunk's words.
fn chunk_word(w: ChunkWords, i: u32) -> u32 {
  if (i < 4u) { return w.lo[i]; }
  return w.hi[i - 4u];
}

// Field j (< 32) of a chunk, shifted down: bits [j * BITS, (j + 1) * BITS) of its words,
// joining the two words a field straddles. Called with constant j, it folds to constant
// shifts and masks.
fn chunk_field(w: ChunkWords, j: u32) -> u32 {
  let bit = j * BITS;
  let s = bit % 32u;
  var v = chunk_word(w, bit / 32u) >> s;
  if (s + BITS > 32u) { v |= chunk_word(w, bit / 32u + 1u) << (32u - s); }
  return v & ((1u << BITS) - 1u);
}
#endif

// Quantized values 4f .. 4f + 3 (f < 8, a constant at every call) of a chunk, as
// x_field_scale's X quad f expects them.
fn chunk_quad(w: ChunkWords, f: u32) -> vec4<f32> {
#if BITS == 4
  let v = w.lo[f / 2u];
  return select(nibbles_lo(v), nibbles_hi(v), f % 2u == 1u);
#elif BITS == 8
  return bytes_in_place(select(w.lo, w.hi, f >= 4u)[f % 4u]);
#else
  return vec4<f32>(f32(chunk_field(w, 4u * f)), f32(chunk_field(w, 4u * f + 1u)), f32(chunk_field(w, 4u * f + 2u)), f32(chunk_field(w, 4u * f + 3u)));
#endif
}

// The 32 values of X a chunk of a row multiplies, as eight vec4s, scaled by x_field_scale.
struct Chunk { a: vec4<f32>, b: vec4<f32>, c: vec4<f32>, d: vec4<f32>, e: vec4<f32>, f: vec4<f32>, g: vec4<f32>, h: vec4<f32> }

// dot(q, x) over one chunk from its words.
fn words_dot(w: ChunkWords, x: Chunk) -> f32 {
  return (dot(chunk_quad(w, 0u), x.a) + dot(chunk_quad(w, 1u), x.b)) + (dot(chunk_quad(w, 2u), x.c) + dot(chunk_quad(w, 3u), x.d))
       + (dot(chunk_quad(w, 4u), x.e) + dot(chunk_quad(w, 5u), x.f)) + (dot(chunk_quad(w, 6u), x.g) + dot(chunk_quad(w, 7u), x.h));
}

// dot(q, x) over chunk `chunk` of the row whose texel 0 is at `row`: the decode matvecs'
// inner product.
fn chunk_dot(row: u32, chunk: u32, x: Chunk) -> f32 {
  return words_dot(chunk_words(row, chunk), x);
}

// Word i of row n, for rows of `row_texels` texels.
fn w_word(n: u32, i: u32, row_texels: u32) -> u32 {
  return w_texel(w_row_texel(n, i / 4u, row_texels))[i % 4u];
}

// Values k .. k + 3 of row n (k % 4 == 0): 4 * BITS bits from bit k * BITS, across a word
// boundary where they straddle one.
fn w_load4(n: u32, k: u32, K: u32) -> vec4<f32> {
  let row_texels = w_row_texels(K);
  let bit = k * BITS;
  let s = bit % 32u;
  var v = w_word(n, bit / 32u, row_texels) >> s;
  if (s + 4u * BITS > 32u) { v |= w_word(n, bit / 32u + 1u, row_texels) << (32u - s); }
  let q = vec4<u32>(v, v >> BITS, v >> (2u * BITS), v >> (3u * BITS)) & vec4<u32>((1u << BITS) - 1u);
  let sb = w_scale_bias(w_affine_entry(n, k / GROUP_SIZE, K / GROUP_SIZE));
  return vec4<f32>(q) * sb.x + sb.y;
}
