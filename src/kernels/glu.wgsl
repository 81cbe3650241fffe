// Gated activation, in place: gate = act(gate) * up, elementwise over [M, intermediate]
// (in place so no third intermediate-sized activation buffer is needed); act is
// common.wgsl's activate code (SiLU for SwiGLU, GELU for GeGLU).
// Bindings: 0 params, 1 step, 2 gate (read and written), 3 up. Plan: one invocation per 4
// elements, the flat range laid over x and y (a vision tower's 4096 patches x 4304 pass 65535 groups).
#include "common"
struct Params { width4: u32, act: u32, gated: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read_write> gate: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> up: array<vec4<f32>>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.x + gid.y * 65535u * 64u;
  if (i >= step.n_tokens * p.width4) { return; }
  let g = gate[i];
  let a = vec4<f32>(activate(g.x, p.act), activate(g.y, p.act), activate(g.z, p.act), activate(g.w, p.act));
  if (p.gated != 0u) { gate[i] = a * up[i]; } else { gate[i] = a; }
}
