// RMSNorm: y[r, :] = x[src(r), :] / sqrt(mean(x^2) + eps) * weight.
// Bindings: 0 params, 1 step, 2 x, 3 weight [width] f32, 4 y, 5 seq_last [S] u32.
// Rows are tokens, or, with per_seq, one row per sampling sequence read from its last
// token. With accumulate, y += the normed row instead: a post-norm's residual add (Gemma's
// post_attention_layernorm, OLMo 2's). (Per-head q/k norms are fused into rope_kv_write.wgsl.)
// Plan: one invocation per row, two passes over the row; rows are short (<= hidden),
// and llvmpipe runs workgroup reductions slower than a serial loop.
#include "common"
struct Params { width: u32, per_seq: u32, eps: f32, accumulate: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read> weight: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<storage, read> seq_last: array<u32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let r = gid.x;
  if (r >= row_count(p.per_seq)) { return; }
  // A branch, not select(): seq_last holds only S entries, and select reads both sides.
  var src = r * p.width;
  if (p.per_seq == 1u) { src = seq_last[r] * p.width; }
  let dst = r * p.width;
  var ss = 0.0;
  for (var i = 0u; i < p.width; i++) { ss += x[src + i] * x[src + i]; }
  let inv = inverseSqrt(ss / f32(p.width) + p.eps);
  if (p.accumulate != 0u) {
    for (var i = 0u; i < p.width; i++) { y[dst + i] += x[src + i] * inv * weight[i]; }
  } else {
    for (var i = 0u; i < p.width; i++) { y[dst + i] = x[src + i] * inv * weight[i]; }
  }
}
