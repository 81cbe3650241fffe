// Y[m, n] (+)= sum_k X[m, k] * W[n, k] (+ bias[n]): every linear layer, prefill and decode.
// Bindings: 0 params, 1 step, 2-4 weight part (format), 5 X [M, K] f32, 6 Y [M, y_stride]
// f32, 7 bias [N_total] f32 (a dummy without has_bias).
// A weight split across buffers is one dispatch per part; part rows land at n_offset.
// Plan: one invocation per output column n and a tile of TM = 4 rows of X, so each
// weight quad is dequantized once and used four times. (On llvmpipe the X loads, though the
// same for the whole workgroup, are per-lane loads: see matmul_q.wgsl for the faster layout.)
// accumulate: add into Y (fuses the residual add after o_proj and down_proj); has_bias: add
// bias[n]. Runtime flags rather than constants: one compiled kernel serves every layer.
struct Params { K: u32, N: u32, n_offset: u32, y_stride: u32, per_seq: u32, accumulate: u32, has_bias: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(5) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read_write> y: array<f32>;
@group(0) @binding(7) var<storage, read> bias: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let n = gid.x;
  let m0 = gid.y * 4u;
  let M = row_count(p.per_seq);
  if (n >= p.N || m0 >= M) { return; }
  // Rows past M re-read the last row (valid memory) and are not written.
  let k4s = p.K / 4u;
  let r0 = m0 * k4s;
  let r1 = min(m0 + 1u, M - 1u) * k4s;
  let r2 = min(m0 + 2u, M - 1u) * k4s;
  let r3 = min(m0 + 3u, M - 1u) * k4s;
  var acc = vec4<f32>(0.0);
  for (var kq = 0u; kq < k4s; kq++) {
    let w = w_load4(n, kq * 4u, p.K);
    acc += vec4<f32>(dot(w, x[r0 + kq]), dot(w, x[r1 + kq]), dot(w, x[r2 + kq]), dot(w, x[r3 + kq]));
  }
  let col = p.n_offset + n;
  if (p.has_bias != 0u) { acc += vec4<f32>(bias[col]); }
  for (var t = 0u; t < 4u && m0 + t < M; t++) {
    let i = (m0 + t) * p.y_stride + col;
    var v = acc[t];
    if (p.accumulate != 0u) { v += y[i]; }
    y[i] = v;
  }
}
