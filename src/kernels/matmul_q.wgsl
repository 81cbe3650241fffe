// Y[m, n] (+)= sum_k X[m, k] * W[n, k] (+ bias[n]) for MLX affine-quantized W (BITS = 4
// or 8) over many tokens at once: prefill and batched decode, where the same weights serve
// every token.
// Bindings: 0 params, 1 step, 2-4 W in its format file (as matvec_q.wgsl),
// 5 X as an rgba32float texture X_WIDTH texels wide holding [M, K] flat (vec4 i of X at
// texel i; the runtime copies the X rows into it before the dispatch: Dispatch.upload, and
// declares the binding and x_texel(), which reads one texel); the outputs (6-9) and params
// are linear_out.wgsl's.
// Plan: register tiling. One invocation owns RR = 32 output rows x TT tokens (TT = 8, or 4
// when the step has at most 4 rows, so a half-empty tile does not cost a full one). Per
// 32-value chunk it loads the TT tokens' X once, then dequantizes each row's chunk once
// (to q, before the affine map) and multiplies it with all TT tokens, so each weight byte
// read serves TT tokens and each X value 32 rows. Small workgroups (16 invocations, 512
// rows) give even the 1024-row projections of a small batch two workgroups to spread over
// the cores. Why X comes from a texture: on llvmpipe a storage load whose address varies
// in a loop becomes a per-lane scalar loop with a bounds check per component, while a
// texel fetch is one vectorised gather. Measured on an 8192x1024 4-bit matmul over 64
// tokens: 2.5 ms per token with storage X and 4x4 tiles, 0.6-0.9 with texture X and 16x8
// tiles; 32x8 tiles are another 15% (bench/linear-q.ts, bench/RESULTS.md), at about twice
// the compile time. The tile arrays are indexed only by constant-trip loops over RR and TT, which the
// compiler unrolls, so they live in registers (a runtime-indexed private array becomes
// per-lane scratch memory on llvmpipe).
override X_WIDTH: u32 = 1024u;
const RR: u32 = 32u;
override TT: u32 = 8u;
const TT_MAX: u32 = 8u;

// 32 consecutive values of one row: of W as quantized values (0 .. 2^BITS-1), or of X.
struct Chunk { a: vec4<f32>, b: vec4<f32>, c: vec4<f32>, d: vec4<f32>, e: vec4<f32>, f: vec4<f32>, g: vec4<f32>, h: vec4<f32> }

fn nib(w: u32, shift: vec4<u32>) -> vec4<f32> {
  return vec4<f32>((vec4<u32>(w) >> shift) & vec4<u32>(15u));
}

fn byt(w: u32) -> vec4<f32> {
  return vec4<f32>((vec4<u32>(w) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(255u));
}

// The quantized values of chunk `chunk` of W's row n (rows of row_texels texels).
fn load_q(n: u32, chunk: u32, row_texels: u32) -> Chunk {
  let lo = vec4<u32>(0u, 4u, 8u, 12u);
  let hi = vec4<u32>(16u, 20u, 24u, 28u);
  let at = w_row_texel(n, chunk * (BITS / 4u), row_texels);
  if (BITS == 4u) {
    let w = w_texel(at);
    return Chunk(nib(w.x, lo), nib(w.x, hi), nib(w.y, lo), nib(w.y, hi), nib(w.z, lo), nib(w.z, hi), nib(w.w, lo), nib(w.w, hi));
  }
  let w0 = w_texel(at);
  let w1 = w_texel(at + PACKED_TILE_ROWS);
  return Chunk(byt(w0.x), byt(w0.y), byt(w0.z), byt(w0.w), byt(w1.x), byt(w1.y), byt(w1.z), byt(w1.w));
}

// Chunk `chunk` of token m's X: 8 texels from a multiple of 8, so never across a texture
// row (X_WIDTH is a power of two, K a multiple of 32).
fn load_x(chunk: u32, m: u32) -> Chunk {
  let i = m * (p.K / 4u) + chunk * 8u;
  let c = i % X_WIDTH;
  let r = i / X_WIDTH;
  return Chunk(x_texel(vec2<u32>(c, r)), x_texel(vec2<u32>(c + 1u, r)), x_texel(vec2<u32>(c + 2u, r)), x_texel(vec2<u32>(c + 3u, r)),
               x_texel(vec2<u32>(c + 4u, r)), x_texel(vec2<u32>(c + 5u, r)), x_texel(vec2<u32>(c + 6u, r)), x_texel(vec2<u32>(c + 7u, r)));
}

fn chunk_dot(q: Chunk, x: Chunk) -> f32 {
  var s = q.a * x.a;
  s = fma(q.b, x.b, s);
  s = fma(q.c, x.c, s);
  s = fma(q.d, x.d, s);
  s = fma(q.e, x.e, s);
  s = fma(q.f, x.f, s);
  s = fma(q.g, x.g, s);
  s = fma(q.h, x.h, s);
  return (s.x + s.y) + (s.z + s.w);
}

fn chunk_sum(x: Chunk) -> f32 {
  let s = x.a + x.b + x.c + x.d + x.e + x.f + x.g + x.h;
  return s.x + s.y + s.z + s.w;
}

// One group's partial sums for the tile: dot(q, x) per row and token, and sum(x) per token.
struct Tile { dots: array<array<f32, TT_MAX>, RR>, xsum: array<f32, TT_MAX> }
// Where the tile is: first row n0, first token m0, of M tokens; packed texels per W row.
struct At { n0: u32, m0: u32, M: u32, vec_per_row: u32 }

// Adds 32-value chunk `chunk` of K to the group's tile. The runtime's group_chunks calls
// it once per chunk of the group, unrolled (Ops.linear): llvmpipe ran a loop over the
// chunks 20-40% slower.
fn chunk_tile(chunk: u32, at: At, t: ptr<function, Tile>) {
  var xs: array<Chunk, TT_MAX>;
  for (var tt = 0u; tt < TT; tt++) {
    xs[tt] = load_x(chunk, min(at.m0 + tt, at.M - 1u));
    (*t).xsum[tt] += chunk_sum(xs[tt]);
  }
  for (var r = 0u; r < RR; r++) {
    let q = load_q(min(at.n0 + r, p.N - 1u), chunk, at.vec_per_row);
    for (var tt = 0u; tt < TT; tt++) {
      (*t).dots[r][tt] += chunk_dot(q, xs[tt]);
    }
  }
}

@compute @workgroup_size(16)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
  let n0 = gid.x * RR;
  let m0 = wid.y * TT;
  let M = row_count(p.per_seq);
  if (n0 >= p.N || m0 >= M) { return; }
  let at = At(n0, m0, M, (p.K / 32u) * (BITS / 4u));
  let groups = p.K / GROUP_SIZE;

  // acc[r][t]: output row n0 + r, token m0 + t. Rows past N and tokens past M re-read the
  // last row / token (valid memory) and are not written.
  var acc: array<array<f32, TT_MAX>, RR>;
  for (var g = 0u; g < groups; g++) {
    var tile: Tile;
    group_chunks(g, at, &tile);
    // The affine map once per group: sum_k (s*q_k + b) * x_k = s * dot(q, x) + b * sum(x).
    for (var r = 0u; r < RR; r++) {
      let gi = min(n0 + r, p.N - 1u) * groups + g;
      let sb = w_scale_bias(gi);
      for (var t = 0u; t < TT; t++) {
        acc[r][t] += sb.x * tile.dots[r][t] + sb.y * tile.xsum[t];
      }
    }
  }
  for (var t = 0u; t < TT; t++) {
    if (m0 + t >= M) { break; }
    for (var r = 0u; r < RR; r++) {
      if (n0 + r >= p.N) { break; }
      store_y(m0 + t, p.n_offset + n0 + r, acc[r][t]);
    }
  }
}
