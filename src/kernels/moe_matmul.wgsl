// A mixture-of-experts projection over the tokens routed to each expert: for each expert e
// of one weight part (experts expert0 .. expert0 + z of the stack) and each slot s = t * K + j
// moe_route.wgsl listed for it, y[s, n] = X[row(s)] . W_e[n]; with GLU, y[s, n] =
// act(X[row(s)] . W_e[n]) * (X[row(s)] . W_e[N + n]) (each expert's gate rows, then its up
// rows). row(s) is the token t (per_slot 0: the block's normed input) or the slot s itself
// (per_slot 1: the GLU's output, into the down projection).
// Bindings: 0 params, 1 step, 2-4 the part's rows, expert after expert (formats/${FORMAT}),
// 5 X f32, 6 y [T * K, N] f32, 7 ranges and 8 slots (moe_route.wgsl).
// Plan: workgroups (column tiles of 64, tiles of TM of the expert's slots, the part's
// experts); one invocation per output column and tile, each weight quad read once for the
// TM slots. The grid is bounded by the step's tokens (an expert gets each token at most
// once); a workgroup past its expert's count exits before reading anything.
// Why: the counts are known only on the GPU, and an exit costs next to nothing, so one
// recorded dispatch serves every routing: decode reads the K chosen experts' weights only,
// a batch reads each chosen expert's once per TM of its tokens.
#include "common"
#include "formats/${FORMAT}"
override GLU: bool = false;
const TM: u32 = 4u;
struct Params { K: u32, N: u32, expert0: u32, experts: u32, top_k: u32, per_slot: u32, act: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(5) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read_write> y: array<f32>;
@group(0) @binding(7) var<storage, read> ranges: array<u32>;
@group(0) @binding(8) var<storage, read> slots: array<u32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
  let e = p.expert0 + wid.z;
  // An expert holds at most one slot per token of the step.
  let count = min(ranges[e], step.n_tokens);
  let m0 = wid.y * TM;
  let n = gid.x;
  if (m0 >= count || n >= p.N) { return; }
  // The tile's slots; past the expert's count, its last slot again (read, not written).
  let at = ranges[p.experts + e] + m0;
  let left = count - m0 - 1u;
  let s = vec4<u32>(slots[2u * at], slots[2u * (at + min(1u, left))], slots[2u * (at + min(2u, left))], slots[2u * (at + min(3u, left))]);
  let k4s = p.K / 4u;
  let r = select(s / vec4<u32>(p.top_k), s, p.per_slot != 0u) * k4s;
  let row = wid.z * select(1u, 2u, GLU) * p.N + n;
  var a = vec4<f32>(0.0);
  var b = vec4<f32>(0.0);
  for (var kq = 0u; kq < k4s; kq++) {
    let x0 = x[r.x + kq];
    let x1 = x[r.y + kq];
    let x2 = x[r.z + kq];
    let x3 = x[r.w + kq];
    let w = w_load4(row, kq * 4u, p.K);
    a += vec4<f32>(dot(w, x0), dot(w, x1), dot(w, x2), dot(w, x3));
    if (GLU) {
      let u = w_load4(row + p.N, kq * 4u, p.K);
      b += vec4<f32>(dot(u, x0), dot(u, x1), dot(u, x2), dot(u, x3));
    }
  }
  for (var t = 0u; t < TM && m0 + t < count; t++) {
    var v = a[t];
    if (GLU) { v = activate(v, p.act) * b[t]; }
    y[s[t] * p.N + n] = v;
  }
}
