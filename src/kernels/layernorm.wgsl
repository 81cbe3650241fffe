// LayerNorm over rows, with an optional residual add before it:
// out[r, :] = (v - mean(v)) / sqrt(var(v) + eps) * weight + bias, v = x[r, :] (+ res[r, :]),
// written over x (BERT's post-norm) or, with has_out, to y with x left as it is (a pre-norm
// block's input: SigLIP's).
// Bindings: 0 params, 1 step, 2 x [tokens, width] f32 (read, and written without has_out),
// 3 res [tokens, width] (read when has_res), 4 weight [width], 5 bias [width], 6 y [tokens,
// width] (written when has_out).
// Plan: one invocation per row, passes over the row (as rmsnorm.wgsl: rows are short, and
// llvmpipe runs workgroup reductions slower than a serial loop).
#include "common"
struct Params { width: u32, eps: f32, has_res: u32, has_out: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read_write> x: array<f32>;
@group(0) @binding(3) var<storage, read> res: array<f32>;
@group(0) @binding(4) var<storage, read> weight: array<f32>;
@group(0) @binding(5) var<storage, read> bias: array<f32>;
@group(0) @binding(6) var<storage, read_write> y: array<f32>;

fn load(i: u32) -> f32 {
  if (p.has_out != 0u) { return y[i]; }
  return x[i];
}

fn store(i: u32, v: f32) {
  if (p.has_out != 0u) { y[i] = v; } else { x[i] = v; }
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let r = gid.x;
  if (r >= step.n_tokens) { return; }
  let row = r * p.width;
  for (var i = 0u; i < p.width; i++) {
    var v = x[row + i];
    if (p.has_res != 0u) { v += res[row + i]; }
    store(row + i, v);
  }
  var sum = 0.0;
  for (var i = 0u; i < p.width; i++) { sum += load(row + i); }
  let mean = sum / f32(p.width);
  var ss = 0.0;
  for (var i = 0u; i < p.width; i++) {
    let d = load(row + i) - mean;
    ss += d * d;
  }
  let inv = inverseSqrt(ss / f32(p.width) + p.eps);
  for (var i = 0u; i < p.width; i++) { store(row + i, (load(row + i) - mean) * inv * weight[i] + bias[i]); }
}
