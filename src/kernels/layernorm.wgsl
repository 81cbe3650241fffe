// LayerNorm, in place, with the residual add before it (BERT's post-norm):
// x[r, :] = (v - mean(v)) / sqrt(var(v) + eps) * weight + bias, v = x[r, :] (+ res[r, :]).
// Bindings: 0 params, 1 step, 2 x [tokens, width] f32 (read and written), 3 res [tokens,
// width] (read when has_res), 4 weight [width], 5 bias [width].
// Plan: one invocation per row, passes over the row (as rmsnorm.wgsl: rows are short, and
// llvmpipe runs workgroup reductions slower than a serial loop).
#include "common"
struct Params { width: u32, eps: f32, has_res: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read_write> x: array<f32>;
@group(0) @binding(3) var<storage, read> res: array<f32>;
@group(0) @binding(4) var<storage, read> weight: array<f32>;
@group(0) @binding(5) var<storage, read> bias: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let r = gid.x;
  if (r >= step.n_tokens) { return; }
  let row = r * p.width;
  if (p.has_res != 0u) {
    for (var i = 0u; i < p.width; i++) { x[row + i] += res[row + i]; }
  }
  var sum = 0.0;
  for (var i = 0u; i < p.width; i++) { sum += x[row + i]; }
  let mean = sum / f32(p.width);
  var ss = 0.0;
  for (var i = 0u; i < p.width; i++) {
    let d = x[row + i] - mean;
    ss += d * d;
  }
  let inv = inverseSqrt(ss / f32(p.width) + p.eps);
  for (var i = 0u; i < p.width; i++) { x[row + i] = (x[row + i] - mean) * inv * weight[i] + bias[i]; }
}
