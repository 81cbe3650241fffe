// The weighted sum of a mixture-of-experts block's outputs into the residual stream:
// h[t, c] += scale * sum_j weights[t * K + j] * y[t * K + j, c] (moe_route.wgsl's weights,
// moe_matmul.wgsl's down projections by slot; scale: Granite's residual_multiplier, else 1).
// Bindings: 0 params, 1 step, 2 y [T * K, width] f32, 3 weights [T * K] f32, 4 h [T, width].
// Plan: one invocation per 4 values of a token's row, its K slots summed in order.
// Why: each slot's output lands in its own row, so no two experts write one value and the
// sum's order is fixed.
#include "common"
struct Params { width4: u32, top_k: u32, scale: f32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> y: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> weights: array<f32>;
@group(0) @binding(4) var<storage, read_write> h: array<vec4<f32>>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.x;
  if (i >= step.n_tokens * p.width4) { return; }
  let t = i / p.width4;
  let c = i % p.width4;
  var sum = vec4<f32>(0.0);
  for (var j = 0u; j < p.top_k; j++) {
    let s = t * p.top_k + j;
    sum += weights[s] * y[s * p.width4 + c];
  }
  h[i] += p.scale * sum;
}
