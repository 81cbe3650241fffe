// Y[m, n] (+)= sum_k X[m, k] * W[n, k] (+ bias[n]): every linear layer, prefill and decode.
// Bindings: 0 params, 1 step, 2-4 weight part (format), 5 X [M, K] f32; the outputs (6-9)
// and params are linear_out.wgsl's.
// Plan: one invocation per output column n and a tile of TM = 4 rows of X, so each
// weight quad is dequantized once and used four times; a tile of one row (decode's token,
// the LM head's one sequence, the last tile when M = 4t + 1) reads and multiplies X once.
// (On llvmpipe the X loads, though the same for the whole workgroup, are per-lane loads:
// see matmul_q.wgsl for the faster layout.)
#include "common"
#include "formats/${FORMAT}"
#include "linear_out"
@group(0) @binding(5) var<storage, read> x: array<vec4<f32>>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let n = gid.x;
  let m0 = gid.y * 4u;
  let M = row_count(p.per_seq);
  if (n >= p.N || m0 >= M) { return; }
  let k4s = p.K / 4u;
  let r0 = m0 * k4s;
  if (m0 + 1u == M) {
    var acc1 = 0.0;
    for (var kq = 0u; kq < k4s; kq++) {
      acc1 += dot(w_load4(n, kq * 4u, p.K), x[r0 + kq]);
    }
    store_y(m0, p.n_offset + n, acc1);
    return;
  }
  // Rows past M re-read the last row (valid memory) and are not written.
  let r1 = min(m0 + 1u, M - 1u) * k4s;
  let r2 = min(m0 + 2u, M - 1u) * k4s;
  let r3 = min(m0 + 3u, M - 1u) * k4s;
  var acc = vec4<f32>(0.0);
  for (var kq = 0u; kq < k4s; kq++) {
    let w = w_load4(n, kq * 4u, p.K);
    acc += vec4<f32>(dot(w, x[r0 + kq]), dot(w, x[r1 + kq]), dot(w, x[r2 + kq]), dot(w, x[r3 + kq]));
  }
  for (var t = 0u; t < 4u && m0 + t < M; t++) {
    store_y(m0 + t, p.n_offset + n, acc[t]);
  }
}
