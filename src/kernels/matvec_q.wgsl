// Y[m, n] (+)= sum_k X[m, k] * W[n, k] (+ bias[n]) for MLX affine-quantized W (BITS = 4
// or 8), one token per workgroup row: decode's hot loop, where reading the packed weights
// once per token is the whole cost.
// Bindings: 0 params, 1 step, 2-4 W in its format file (formats/affine.wgsl: BITS,
// GROUP_SIZE, w_texel for the packed words [N, K*BITS/32] as vec4<u32> in tiles of
// PACKED_TILE_ROWS rows, w_scale_bias for the groups' [N, K/GROUP_SIZE] (scale, bias)),
// 5 X f32; the outputs (6-9) and params are linear_out.wgsl's.
// X [M, K] f32 and the K loop are declared by the runtime (Ops.matvecInput): X as a uniform
// array when its rows fit one uniform binding, else a storage array (indexed the same
// either way); k_loop walks the groups, calling chunk_dots for each 32-value chunk of a
// group (unrolled) and group_end once.
// Plan: one invocation per R = 8 output rows of one token (gid.y): one tile of the packed
// weights (PACKED_TILE_ROWS = 8), so its rows' texels for a chunk are adjacent. Each chunk of X (8 vec4, the
// same for every invocation of the workgroup) meets one 16-byte weight texel per row (two
// for 8-bit); per group the affine map is applied once:
// sum_k (s*q_k + b) * x_k = s * dot(q, x) + b * sum(x).
// Every private value is indexed by constants only, so it stays in registers: a
// runtime-indexed array becomes per-lane scratch memory on llvmpipe (measured 4x slower).
const R: u32 = 8u;

fn nibbles_dot(w: u32, a: vec4<f32>, b: vec4<f32>) -> f32 {
  let lo = vec4<f32>((vec4<u32>(w) >> vec4<u32>(0u, 4u, 8u, 12u)) & vec4<u32>(15u));
  let hi = vec4<f32>((vec4<u32>(w) >> vec4<u32>(16u, 20u, 24u, 28u)) & vec4<u32>(15u));
  return dot(lo, a) + dot(hi, b);
}

fn bytes_dot(w: u32, a: vec4<f32>) -> f32 {
  return dot(vec4<f32>((vec4<u32>(w) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(255u)), a);
}

// The 32 values of X one chunk multiplies, as eight vec4s.
struct Chunk { a: vec4<f32>, b: vec4<f32>, c: vec4<f32>, d: vec4<f32>, e: vec4<f32>, f: vec4<f32>, g: vec4<f32>, h: vec4<f32> }

// dot(q, x) over one 32-value chunk of one row whose first texel is `at` (the second,
// for 8-bit, is the row's next texel: a tile further).
fn chunk_dot(at: u32, x: Chunk) -> f32 {
  if (BITS == 4u) {
    let w = w_texel(at);
    return nibbles_dot(w.x, x.a, x.b) + nibbles_dot(w.y, x.c, x.d) + nibbles_dot(w.z, x.e, x.f) + nibbles_dot(w.w, x.g, x.h);
  }
  let w0 = w_texel(at);
  let w1 = w_texel(at + PACKED_TILE_ROWS);
  return bytes_dot(w0.x, x.a) + bytes_dot(w0.y, x.b) + bytes_dot(w0.z, x.c) + bytes_dot(w0.w, x.d)
       + bytes_dot(w1.x, x.e) + bytes_dot(w1.y, x.f) + bytes_dot(w1.z, x.g) + bytes_dot(w1.w, x.h);
}

// The invocation's 8 rows: first packed texel (wa, wb; one tile) and first group index
// (ga, gb) of each, four rows per vector.
struct Rows { wa: vec4<u32>, wb: vec4<u32>, ga: vec4<u32>, gb: vec4<u32> }
// The 8 rows' sums so far.
struct Acc { a: vec4<f32>, b: vec4<f32> }
// One group's partial dot products (before the affine map) and sum of X.
struct Dots { a: vec4<f32>, b: vec4<f32>, xsum: f32 }

// Adds 32-value chunk `chunk` of K (X from vec4 index x_base of x) to the group's dots.
fn chunk_dots(chunk: u32, x_base: u32, r: Rows, d: ptr<function, Dots>) {
  let xi = x_base + chunk * 8u;
  let xc = Chunk(x[xi], x[xi + 1u], x[xi + 2u], x[xi + 3u], x[xi + 4u], x[xi + 5u], x[xi + 6u], x[xi + 7u]);
  let s4 = xc.a + xc.b + xc.c + xc.d + xc.e + xc.f + xc.g + xc.h;
  (*d).xsum += s4.x + s4.y + s4.z + s4.w;
  let at = chunk * (BITS / 4u) * PACKED_TILE_ROWS;
  (*d).a += vec4<f32>(chunk_dot(r.wa.x + at, xc), chunk_dot(r.wa.y + at, xc), chunk_dot(r.wa.z + at, xc), chunk_dot(r.wa.w + at, xc));
  (*d).b += vec4<f32>(chunk_dot(r.wb.x + at, xc), chunk_dot(r.wb.y + at, xc), chunk_dot(r.wb.z + at, xc), chunk_dot(r.wb.w + at, xc));
}

// Applies group g's affine map to its dots, into the row sums.
fn group_end(g: u32, d: Dots, r: Rows, acc: ptr<function, Acc>) {
  let ga = r.ga + vec4<u32>(g);
  let gb = r.gb + vec4<u32>(g);
  let a0 = w_scale_bias(ga.x);
  let a1 = w_scale_bias(ga.y);
  let a2 = w_scale_bias(ga.z);
  let a3 = w_scale_bias(ga.w);
  let b0 = w_scale_bias(gb.x);
  let b1 = w_scale_bias(gb.y);
  let b2 = w_scale_bias(gb.z);
  let b3 = w_scale_bias(gb.w);
  let sa = vec4<f32>(a0.x, a1.x, a2.x, a3.x);
  let sb = vec4<f32>(b0.x, b1.x, b2.x, b3.x);
  let ba = vec4<f32>(a0.y, a1.y, a2.y, a3.y);
  let bb = vec4<f32>(b0.y, b1.y, b2.y, b3.y);
  (*acc).a += sa * d.a + ba * d.xsum;
  (*acc).b += sb * d.b + bb * d.xsum;
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
  let n0 = gid.x * R;
  let m = wid.y;
  if (n0 >= p.N || m >= row_count(p.per_seq)) { return; }
  let row_texels = (p.K / 32u) * (BITS / 4u);
  let groups = p.K / GROUP_SIZE;
  // Rows past N re-read the last row (valid memory) and are not written.
  let last = p.N - 1u;
  let ra = min(vec4<u32>(n0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(last));
  let rb = min(vec4<u32>(n0) + vec4<u32>(4u, 5u, 6u, 7u), vec4<u32>(last));
  let wa = vec4<u32>(w_row_texel(ra.x, 0u, row_texels), w_row_texel(ra.y, 0u, row_texels), w_row_texel(ra.z, 0u, row_texels), w_row_texel(ra.w, 0u, row_texels));
  let wb = vec4<u32>(w_row_texel(rb.x, 0u, row_texels), w_row_texel(rb.y, 0u, row_texels), w_row_texel(rb.z, 0u, row_texels), w_row_texel(rb.w, 0u, row_texels));
  var acc = Acc(vec4<f32>(0.0), vec4<f32>(0.0));
  k_loop(m, Rows(wa, wb, ra * groups, rb * groups), &acc);
  for (var r = 0u; r < R; r++) {
    if (n0 + r >= p.N) { break; }
    var v: f32;
    if (r < 4u) { v = acc.a[r]; } else { v = acc.b[r - 4u]; }
    store_y(m, p.n_offset + n0 + r, v);
  }
}
