// Y[m, n] (+)= sum_k X[m, k] * W[n, k] (+ bias[n]) for MLX affine-quantized W (BITS = 2,
// 3, 4, 5, 6 or 8) over many tokens at once: prefill and batched decode.
// Bindings: 0 params, 1 step, 2-3 W (formats/affine.wgsl), 5 X as an rgba32float texture
// X_WIDTH texels wide holding [M, K] flat (the runtime copies the rows in before the
// dispatch; x_texel() reads it, from a read-only storage texture where WGSL allows one, else
// a sampled one: X_READ); outputs 6-9 and params are linear_out.wgsl's.
// Plan: one invocation owns a register tile of RR = 32 rows x TT = 4 tokens. Per 32-value
// chunk it loads the tokens' X once (each X value serves 32 rows), then walks the rows:
// the chunk's BITS packed words per row (formats/affine.wgsl chunk_words), dequantized 4
// values at a time into TT running sums (each weight byte serves TT tokens). The affine map
// is applied once per group.
// Why: on llvmpipe each WGSL scalar is a vector register and a runtime-indexed private
// array is per-lane scratch memory, so the tile arrays are indexed only by constant-trip
// loops as long as the arrays (which NIR unrolls). X comes from a texture because a
// texel fetch is one vector gather where a storage load at a varying address is a
// per-lane loop. A wider tile (8 tokens) runs faster but compiles five times slower.
#include "common"
#include "formats/affine"
#include "linear_out"
#include "readers/matmul_input_${X_READ}"
override X_WIDTH: u32 = 1024u;
const RR: u32 = 32u;
const TT: u32 = 4u;

// Chunk `chunk` of token m's X: 8 texels from a multiple of 8, so never across a texture
// row (X_WIDTH is a power of two, K a multiple of 32).
fn load_x(chunk: u32, m: u32) -> array<vec4<f32>, 8> {
  let i = m * (p.K / 4u) + chunk * 8u;
  let c = i % X_WIDTH;
  let r = i / X_WIDTH;
  var x: array<vec4<f32>, 8>;
  for (var f = 0u; f < 8u; f++) {
    x[f] = x_texel(vec2<u32>(c + f, r));
  }
  return x;
}

// One group's partial sums for the tile: dot(q, x) per row and token, and sum(x) per token.
struct Tile { dots: array<array<f32, TT>, RR>, xsum: array<f32, TT> }
// Where the tile is: first row n0, first token m0, of M tokens; packed texels per W row.
struct At { n0: u32, m0: u32, M: u32, vec_per_row: u32 }

// Adds 32-value chunk `chunk` of K to the group's tile, in the order the plan above gives.
fn chunk_tile(chunk: u32, at: At, t: ptr<function, Tile>) {
  var xs: array<array<vec4<f32>, 8>, TT>;
  for (var tt = 0u; tt < TT; tt++) {
    xs[tt] = load_x(chunk, min(at.m0 + tt, at.M - 1u));
    var s = vec4<f32>(0.0);
    for (var f = 0u; f < 8u; f++) {
      s += xs[tt][f];
      xs[tt][f] *= x_field_scale(f);
    }
    (*t).xsum[tt] += (s.x + s.y) + (s.z + s.w);
  }
  for (var r = 0u; r < RR; r++) {
    let w = chunk_words(w_row_texel(min(at.n0 + r, p.N - 1u), 0u, at.vec_per_row), chunk);
    var d: array<f32, TT>;
    for (var f = 0u; f < 8u; f++) {
      let q = chunk_quad(w, f);
      for (var tt = 0u; tt < TT; tt++) {
        let x = xs[tt][f];
        d[tt] = fma(q.w, x.w, fma(q.z, x.z, fma(q.y, x.y, fma(q.x, x.x, d[tt]))));
      }
    }
    for (var tt = 0u; tt < TT; tt++) {
      (*t).dots[r][tt] += d[tt];
    }
  }
}

// Adds group g's chunks to the tile, unrolled (llvmpipe runs a loop over them slower).
fn group_chunks(g: u32, at: At, t: ptr<function, Tile>) {
  let c = g * (GROUP_SIZE / 32u);
  chunk_tile(c, at, t);
#if GROUP_SIZE >= 64
  chunk_tile(c + 1u, at, t);
#endif
#if GROUP_SIZE >= 128
  chunk_tile(c + 2u, at, t);
  chunk_tile(c + 3u, at, t);
#endif
}

@compute @workgroup_size(16)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
  let n0 = gid.x * RR;
  let m0 = wid.y * TT;
  let M = row_count(p.per_seq);
  if (n0 >= p.N || m0 >= M) { return; }
  let at = At(n0, m0, M, w_row_texels(p.K));
  let groups = p.K / GROUP_SIZE;

  // acc[r][t]: output row n0 + r, token m0 + t. Rows past N and tokens past M re-read the
  // last row / token (valid memory) and are not written.
  var acc: array<array<f32, TT>, RR>;
  for (var g = 0u; g < groups; g++) {
    var tile: Tile;
    group_chunks(g, at, &tile);
    // The affine map once per group: sum_k (s*q_k + b) * x_k = s * dot(q, x) + b * sum(x).
    for (var r = 0u; r < RR; r++) {
      let sb = w_scale_bias(w_affine_entry(min(n0 + r, p.N - 1u), g, groups));
      for (var t = 0u; t < TT; t++) {
        acc[r][t] += sb.x * tile.dots[r][t] + sb.y * tile.xsum[t];
      }
    }
  }
  for (var t = 0u; t < TT; t++) {
    if (m0 + t >= M) { break; }
    if (p.glu != 0u) {
      // Rows 0 to RR/2 - 1 are gate rows, the rest the matching up rows (linear_out.wgsl);
      // the loop runs RR times, as long as the array, so that it unrolls (see above).
      for (var r = 0u; r < RR; r++) {
        if (r < RR / 2u) { store_y(m0 + t, (p.n_offset + n0) / 2u + r, glu(acc[r][t], acc[r + RR / 2u][t])); }
      }
      continue;
    }
    for (var r = 0u; r < RR; r++) {
      if (n0 + r >= p.N) { break; }
      store_y(m0 + t, p.n_offset + n0 + r, acc[r][t]);
    }
  }
}
