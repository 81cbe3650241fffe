// A mixture-of-experts projection over the tokens routed to each expert: for each expert e
// of one weight part (experts expert0 .. expert0 + z of the stack) and each slot s = t * K + j
// moe_route.wgsl listed for it, y[s, n] = X[row(s)] . W_e[n]; with GLU, y[s, n] =
// act(X[row(s)] . W_e[n]) * (X[row(s)] . W_e[N + n]) (each expert's gate rows, then its up
// rows; with interleaved, GPT-OSS's gate and up rows alternating: gate n is row 2n, up n row
// 2n + 1). row(s) is the token t (per_slot 0: the block's normed input) or the slot s itself
// (per_slot 1: the GLU's output, into the down projection). has_bias: each expert's bias of
// each weight row is added first (bias [experts, rows per expert]). limit > 0: GPT-OSS's
// clamped GLU, act(min(gate, limit)) * (clamp(up, -limit, limit) + 1).
// Bindings: 0 params, 1 step, 2-4 the part's rows, expert after expert (formats/${FORMAT}),
// 5 X f32, 6 y [T * K, N] f32, 7 ranges and 8 slots (moe_route.wgsl), 9 bias (a dummy
// without has_bias).
// Plan: workgroups (column tiles, tiles of TM of the expert's slots, the part's experts);
// TM is 1 for single-token steps (an expert has at most one slot), else 4. An invocation
// owns RR output rows (of the gate and of the up projection with GLU) for the tile's TM
// slots. Affine formats: RR = 8, one PACKED_TILE_ROWS tile, so its texels for a 32-value
// chunk are adjacent; per chunk the TM slots' X is loaded once for the 8 rows, each row's
// words once for the TM slots (formats/affine.wgsl chunk_words, at the weight's width), and
// the affine map applied once per group. Float formats: RR = 1, each weight quad (w_load4) used for the TM slots.
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
struct Params { K: u32, N: u32, expert0: u32, experts: u32, top_k: u32, per_slot: u32, act: u32, has_bias: u32, interleaved: u32, limit: f32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(5) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read_write> y: array<f32>;
@group(0) @binding(7) var<storage, read> ranges: array<u32>;
@group(0) @binding(8) var<storage, read> slots: array<u32>;
@group(0) @binding(9) var<storage, read> bias: array<f32>;

// An expert's rows; among them output column n's gate (or only) row and its up row.
fn expert_rows() -> u32 { return select(1u, 2u, GLU) * p.N; }
fn gate_row(n: u32) -> u32 { return select(n, 2u * n, p.interleaved != 0u); }
fn up_row(n: u32) -> u32 { return select(p.N + n, 2u * n + 1u, p.interleaved != 0u); }

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

// Slot i's output column n of expert e from its gate (or only) dot product a and up b.
fn out(t: Tile, i: u32, e: u32, n: u32, a: f32, b: f32) {
  var g = a;
  var u = b;
  if (p.has_bias != 0u) {
    g += bias[e * expert_rows() + gate_row(n)];
    if (GLU) { u += bias[e * expert_rows() + up_row(n)]; }
  }
  if (GLU && p.limit > 0.0) {
    g = min(g, p.limit);
    u = clamp(u, -p.limit, p.limit) + 1.0;
  }
  var v = g;
  if (GLU) { v = activate(g, p.act) * u; }
  y[t.s[i] * p.N + n] = v;
}

#if FORMAT == affine
const RR: u32 = 8u;

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
  let row_texels = w_row_texels(p.K);
  let groups = p.K / GROUP_SIZE;
  // Gate (or only) rows and up rows; rows past N re-read the last row.
  let first = wid.z * expert_rows();
  var ra: array<u32, RR>;
  var rb: array<u32, RR>;
  for (var i = 0u; i < RR; i++) {
    ra[i] = first + gate_row(min(n0 + i, p.N - 1u));
    rb[i] = first + up_row(min(n0 + i, p.N - 1u));
  }
  var acc_a: array<array<f32, TM>, RR>;
  var acc_b: array<array<f32, TM>, RR>;
  for (var g = 0u; g < groups; g++) {
    var d: Dots;
    for (var c = g * (GROUP_SIZE / 32u); c < (g + 1u) * (GROUP_SIZE / 32u); c++) {
      var xc: array<Chunk, TM>;
      for (var j = 0u; j < TM; j++) { xc[j] = x_chunk(t.x[j], c, &d.xsum[j]); }
      for (var i = 0u; i < RR; i++) {
        let wa = chunk_words(w_row_texel(ra[i], 0u, row_texels), c);
        for (var j = 0u; j < TM; j++) { d.a[i][j] += words_dot(wa, xc[j]); }
        if (GLU) {
          let wb = chunk_words(w_row_texel(rb[i], 0u, row_texels), c);
          for (var j = 0u; j < TM; j++) { d.b[i][j] += words_dot(wb, xc[j]); }
        }
      }
    }
    // The affine map once per group: sum_k (s*q_k + b) * x_k = s * dot(q, x) + b * sum(x).
    for (var i = 0u; i < RR; i++) {
      let sa = w_scale_bias(w_affine_entry(ra[i], g, groups));
      var sb = sa;
      if (GLU) { sb = w_scale_bias(w_affine_entry(rb[i], g, groups)); }
      for (var j = 0u; j < TM; j++) {
        acc_a[i][j] += sa.x * d.a[i][j] + sa.y * d.xsum[j];
        acc_b[i][j] += sb.x * d.b[i][j] + sb.y * d.xsum[j];
      }
    }
  }
  for (var i = 0u; i < RR; i++) {
    for (var j = 0u; j < TM; j++) {
      if (n0 + i < p.N && j < t.real) { out(t, j, e, n0 + i, acc_a[i][j], acc_b[i][j]); }
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
  let first = wid.z * expert_rows();
  var a: array<f32, TM>;
  var b: array<f32, TM>;
  for (var kq = 0u; kq < p.K / 4u; kq++) {
    let wa = w_load4(first + gate_row(n), kq * 4u, p.K);
    var wb = wa;
    if (GLU) { wb = w_load4(first + up_row(n), kq * 4u, p.K); }
    for (var j = 0u; j < TM; j++) {
      let xv = x[t.x[j] + kq];
      a[j] += dot(wa, xv);
      b[j] += dot(wb, xv);
    }
  }
  for (var j = 0u; j < TM; j++) {
    if (j < t.real) { out(t, j, e, n, a[j], b[j]); }
  }
}
#endif
