// A mixture-of-experts projection over the tokens routed to each expert: for each expert e
// of one weight part (experts expert0 .. expert0 + z of the stack) and each slot s = t * K + j
// moe_route.wgsl listed for it, y[s, n] = X[row(s)] . W_e[n]; with GLU, y[s, n] =
// act(X[row(s)] . W_e[n]) * (X[row(s)] . W_e[N + n]) (each expert's gate rows, then its up
// rows). row(s) is the token t (per_slot 0: the block's normed input) or the slot s itself
// (per_slot 1: the GLU's output, into the down projection).
// Bindings: 0 params, 1 step, 2-4 the part's rows, expert after expert (formats/${FORMAT}),
// 5 X f32, 6 y [T * K, N] f32, 7 ranges and 8 slots (moe_route.wgsl).
// Plan: workgroups (column tiles, tiles of TM of the expert's slots, the part's experts);
// TM is 1 for single-token steps (an expert has at most one slot), else 4. An invocation
// owns RR output rows (of the gate and of the up projection with GLU) for the tile's TM
// slots. q4/q8 (affine): RR = 8, one PACKED_TILE_ROWS tile, so its texels for a 32-value
// chunk are adjacent; per chunk the TM slots' X is loaded once for the 8 rows, each row's
// texel once for the TM slots, and the affine map applied once per group (formats/affine.wgsl
// chunk math). Float formats: RR = 1, each weight quad (w_load4) used for the TM slots.
// The grid is bounded by the step's tokens (an expert gets each token at most once); a
// workgroup past its expert's count exits before reading anything.
// Why: the counts are known only on the GPU, and an exit costs next to nothing, so one
// recorded dispatch serves every routing: decode reads the K chosen experts' weights only,
// a batch reads each chosen expert's once per TM of its tokens. On llvmpipe every X load is
// a per-lane gather, so each serves RR rows (matvec_q.wgsl's reasoning).
#include "common"
#include "formats/${FORMAT}"
override GLU: bool = false;
#const TM: u32
struct Params { K: u32, N: u32, expert0: u32, experts: u32, top_k: u32, per_slot: u32, act: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(5) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read_write> y: array<f32>;
@group(0) @binding(7) var<storage, read> ranges: array<u32>;
@group(0) @binding(8) var<storage, read> slots: array<u32>;

// The tile: its slots (past the expert's count, its last slot again: read, not written),
// how many are real, and where each slot's X row starts (in vec4s).
struct Tile { s: array<u32, TM>, real: u32, x: array<u32, TM> }

fn tile(e: u32, m0: u32, count: u32) -> Tile {
  var t: Tile;
  let at = ranges[p.experts + e] + m0;
  let left = count - m0 - 1u;
  t.real = min(TM, count - m0);
  for (var i = 0u; i < TM; i++) {
    t.s[i] = slots[2u * (at + min(i, left))];
    t.x[i] = select(t.s[i] / p.top_k, t.s[i], p.per_slot != 0u) * (p.K / 4u);
  }
  return t;
}

fn out(t: Tile, i: u32, n: u32, a: f32, b: f32) {
  var v = a;
  if (GLU) { v = activate(a, p.act) * b; }
  y[t.s[i] * p.N + n] = v;
}

#if FORMAT == affine
const RR: u32 = 8u;

// The words of row texel `at` (and the next tile's for 8-bit: a row's second texel).
struct Words { w0: vec4<u32>, w1: vec4<u32> }
fn words(at: u32) -> Words {
  let w0 = w_texel(at);
  var w1 = w0;
  if (BITS == 8u) { w1 = w_texel(at + PACKED_TILE_ROWS); }
  return Words(w0, w1);
}

// dot(q, x) of one 32-value chunk from its loaded words (formats/affine.wgsl chunk_dot).
fn words_dot(w: Words, x: Chunk) -> f32 {
  if (BITS == 4u) {
    return nibbles_dot(w.w0.x, x.a, x.b) + nibbles_dot(w.w0.y, x.c, x.d) + nibbles_dot(w.w0.z, x.e, x.f) + nibbles_dot(w.w0.w, x.g, x.h);
  }
  return bytes_dot(w.w0.x, x.a) + bytes_dot(w.w0.y, x.b) + bytes_dot(w.w0.z, x.c) + bytes_dot(w.w0.w, x.d)
       + bytes_dot(w.w1.x, x.e) + bytes_dot(w.w1.y, x.f) + bytes_dot(w.w1.z, x.g) + bytes_dot(w.w1.w, x.h);
}

// 32-value chunk `c` of the X row at `r`, scaled by x_field_scale, and its sum.
fn x_chunk(r: u32, c: u32, xsum: ptr<function, f32>) -> Chunk {
  let b = r + c * 8u;
  let v = array<vec4<f32>, 8>(x[b], x[b + 1u], x[b + 2u], x[b + 3u], x[b + 4u], x[b + 5u], x[b + 6u], x[b + 7u]);
  var s = vec4<f32>(0.0);
  for (var f = 0u; f < 8u; f++) { s += v[f]; }
  *xsum += (s.x + s.y) + (s.z + s.w);
  return Chunk(v[0] * x_field_scale(0u), v[1] * x_field_scale(1u), v[2] * x_field_scale(2u), v[3] * x_field_scale(3u),
               v[4] * x_field_scale(4u), v[5] * x_field_scale(5u), v[6] * x_field_scale(6u), v[7] * x_field_scale(7u));
}

// One group's dots before the affine map: per row and slot, gate (a) and up (b).
struct Dots { a: array<array<f32, TM>, RR>, b: array<array<f32, TM>, RR>, xsum: array<f32, TM> }

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
  let e = p.expert0 + wid.z;
  // An expert holds at most one slot per token of the step.
  let count = min(ranges[e], step.n_tokens);
  let m0 = wid.y * TM;
  let n0 = gid.x * RR;
  if (m0 >= count || n0 >= p.N) { return; }
  let t = tile(e, m0, count);
  let row_texels = (p.K / 32u) * (BITS / 4u);
  let groups = p.K / GROUP_SIZE;
  // Gate (or only) rows, and the up rows N further; rows past N re-read the last row.
  let first = wid.z * select(1u, 2u, GLU) * p.N;
  var ra: array<u32, RR>;
  for (var i = 0u; i < RR; i++) { ra[i] = first + min(n0 + i, p.N - 1u); }
  var acc_a: array<array<f32, TM>, RR>;
  var acc_b: array<array<f32, TM>, RR>;
  for (var g = 0u; g < groups; g++) {
    var d: Dots;
    for (var c = g * (GROUP_SIZE / 32u); c < (g + 1u) * (GROUP_SIZE / 32u); c++) {
      var xc: array<Chunk, TM>;
      for (var j = 0u; j < TM; j++) { xc[j] = x_chunk(t.x[j], c, &d.xsum[j]); }
      for (var i = 0u; i < RR; i++) {
        let wa = words(w_row_texel(ra[i], c * (BITS / 4u), row_texels));
        for (var j = 0u; j < TM; j++) { d.a[i][j] += words_dot(wa, xc[j]); }
        if (GLU) {
          let wb = words(w_row_texel(ra[i] + p.N, c * (BITS / 4u), row_texels));
          for (var j = 0u; j < TM; j++) { d.b[i][j] += words_dot(wb, xc[j]); }
        }
      }
    }
    // The affine map once per group: sum_k (s*q_k + b) * x_k = s * dot(q, x) + b * sum(x).
    for (var i = 0u; i < RR; i++) {
      let sa = w_scale_bias(w_affine_entry(ra[i], g, groups));
      var sb = sa;
      if (GLU) { sb = w_scale_bias(w_affine_entry(ra[i] + p.N, g, groups)); }
      for (var j = 0u; j < TM; j++) {
        acc_a[i][j] += sa.x * d.a[i][j] + sa.y * d.xsum[j];
        acc_b[i][j] += sb.x * d.b[i][j] + sb.y * d.xsum[j];
      }
    }
  }
  for (var i = 0u; i < RR; i++) {
    for (var j = 0u; j < TM; j++) {
      if (n0 + i < p.N && j < t.real) { out(t, j, n0 + i, acc_a[i][j], acc_b[i][j]); }
    }
  }
}
#else
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
  let e = p.expert0 + wid.z;
  // An expert holds at most one slot per token of the step.
  let count = min(ranges[e], step.n_tokens);
  let m0 = wid.y * TM;
  let n = gid.x;
  if (m0 >= count || n >= p.N) { return; }
  let t = tile(e, m0, count);
  let row = wid.z * select(1u, 2u, GLU) * p.N + n;
  var a: array<f32, TM>;
  var b: array<f32, TM>;
  for (var kq = 0u; kq < p.K / 4u; kq++) {
    let wa = w_load4(row, kq * 4u, p.K);
    var wb = wa;
    if (GLU) { wb = w_load4(row + p.N, kq * 4u, p.K); }
    for (var j = 0u; j < TM; j++) {
      let xv = x[t.x[j] + kq];
      a[j] += dot(wa, xv);
      b[j] += dot(wb, xv);
    }
  }
  for (var j = 0u; j < TM; j++) {
    if (j < t.real) { out(t, j, n, a[j], b[j]); }
  }
}
#endif
