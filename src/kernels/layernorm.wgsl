// LayerNorm of each row, with the residual add before it (BERT's post-norm):
// y[r, :] = (v - mean(v)) / sqrt(var(v) + eps) * weight + bias, v = x[r, :] (+ res[r, :]).
// In place (y is x) by default; with OUT the result goes to y and x is only read (a
// pre-norm block's input: Whisper's).
// Bindings: 0 params, 1 step, 2 x [tokens, width] f32 (read, and written in place), 3 res
// [tokens, width] (read when has_res), 4 weight [width], 5 bias [width], 6 y [tokens,
// width] (OUT).
// Plan: one invocation per row, passes over the row (as rmsnorm.wgsl: rows are short, and
// llvmpipe runs workgroup reductions slower than a serial loop).
#include "common"
struct Params { width: u32, eps: f32, has_res: u32 }
@group(0) @binding(0) var<uniform> p: Params;
#if OUT
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(6) var<storage, read_write> y: array<f32>;
#else
@group(0) @binding(2) var<storage, read_write> x: array<f32>;
#endif
@group(0) @binding(3) var<storage, read> res: array<f32>;
@group(0) @binding(4) var<storage, read> weight: array<f32>;
@group(0) @binding(5) var<storage, read> bias: array<f32>;

fn value(i: u32) -> f32 {
  if (p.has_res != 0u) { return x[i] + res[i]; }
  return x[i];
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let r = gid.x;
  if (r >= step.n_tokens) { return; }
  let row = r * p.width;
  var sum = 0.0;
  for (var i = 0u; i < p.width; i++) { sum += value(row + i); }
  let mean = sum / f32(p.width);
  var ss = 0.0;
  for (var i = 0u; i < p.width; i++) {
    let d = value(row + i) - mean;
    ss += d * d;
  }
  let inv = inverseSqrt(ss / f32(p.width) + p.eps);
  for (var i = 0u; i < p.width; i++) {
    let v = (value(row + i) - mean) * inv * weight[i] + bias[i];
#if OUT
    y[row + i] = v;
#else
    x[row + i] = v;
#endif
  }
}
