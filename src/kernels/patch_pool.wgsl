// Average pooling of a vision tower's patch grid: x holds side x side patch rows in
// row-major grid order (row gy * side + gx), out the (side / k)^2 means of its k x k
// windows, in the same order: out[oy * (side / k) + ox, d] = mean over dy, dx < k of
// x[(oy * k + dy) * side + ox * k + dx, d] (torch's AvgPool2d with kernel and stride k).
// Bindings: 0 params, 1 step (its n_tokens: the output rows, (side / k)^2), 2 x [side^2,
// width] f32, 3 out [(side / k)^2, width] f32.
// Plan: one invocation per (output row, column), a serial loop over its window; it runs
// once per image, over few rows.
#include "common"
struct Params { width: u32, side: u32, k: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let outSide = p.side / p.k;
  let i = gid.x;
  if (i >= step.n_tokens * p.width) { return; }
  let d = i % p.width;
  let o = i / p.width;
  let oy = o / outSide;
  let ox = o % outSide;
  var sum = 0.0;
  for (var dy = 0u; dy < p.k; dy++) {
    for (var dx = 0u; dx < p.k; dx++) {
      sum += x[((oy * p.k + dy) * p.side + ox * p.k + dx) * p.width + d];
    }
  }
  out[i] = sum / f32(p.k * p.k);
}
