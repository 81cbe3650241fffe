// Mamba-2's gated grouped RMSNorm, in place: within each group of `group` values of a row,
//   y = v / sqrt(mean(v^2) + eps) * weight,  v = y * silu(z)
// (transformers' MambaRMSNormGated with norm_before_gate off).
// Bindings: 0 params, 1 step, 2 y [T, width] (read and written), 3 z [T, z_stride] (the gate
// at column 0), 4 weight [width].
// Plan: one invocation per (token, group), two passes over its values; groups are short
// and llvmpipe runs workgroup reductions slower than a serial loop (as rmsnorm.wgsl).
#include "common"
struct Params { width: u32, group: u32, z_stride: u32, eps: f32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read> z: array<f32>;
@group(0) @binding(4) var<storage, read> weight: array<f32>;

fn gated(t: u32, i: u32) -> f32 {
  let g = z[t * p.z_stride + i];
  return y[t * p.width + i] * g / (1.0 + exp(-g));
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let groups = p.width / p.group;
  let r = gid.x;
  if (r >= step.n_tokens * groups) { return; }
  let t = r / groups;
  let lo = (r % groups) * p.group;
  var ss = 0.0;
  for (var i = lo; i < lo + p.group; i++) { let v = gated(t, i); ss += v * v; }
  let inv = inverseSqrt(ss / f32(p.group) + p.eps);
  for (var i = lo; i < lo + p.group; i++) { y[t * p.width + i] = gated(t, i) * inv * weight[i]; }
}
