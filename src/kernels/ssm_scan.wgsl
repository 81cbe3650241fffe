// Mamba-2's selective state-space scan over each sequence's chunk of tokens, continuing from
// the sequence's SSM state and leaving the state after the chunk's last token:
//   dt = softplus(dt_raw[t, h] + dt_bias[h]),  A = -exp(A_log[h])
//   s[h, p, n] = exp(dt A) s[h, p, n] + dt x[t, h, p] B[t, g, n]      (g = h / (H / G))
//   y[t, h, p] = sum_n C[t, g, n] s[h, p, n] + D[h] x[t, h, p]
// A chunk at position 0 starts from a zero state (a new sequence). On a CPU adapter this
// kernel takes every chunk (a decode step is a chunk of one token); on a GPU, with
// steps_only set, only the chunks of one token, and ssm_scan_chunk.wgsl the longer ones
// (prefill, a verify round), in parallel over their positions.
// Bindings: 0 params, 1 step, 2 chunks [max chunks] vec4 (first token, tokens, state slot,
// start position), 3 xbc [T, conv_dim]: x (H * P) | B (G * N) | C (G * N) after the conv,
// 4 proj [T, proj_stride]: in_proj's output, dt_raw at dt_offset, 5 a_log [H], 6 dt_bias [H],
// 7 d [H], 8 state [slots, H, P, N], 9 y [T, H * P].
// Plan: one invocation per (head channel p, head h, chunk): its N state values stay in
// registers across the chunk's tokens, so a chunk of any length is one pass with no barrier;
// the invocations of a workgroup share the head, so B, C and dt of each token are the same
// addresses for all of them (one cache line each). A CPU adapter runs few invocations at a
// time, so this walk, the least arithmetic, is its fastest for prefill too.
#include "common"
#const D_STATE: u32
struct Params { head_dim: u32, heads: u32, groups: u32, conv_dim: u32, proj_stride: u32, dt_offset: u32, steps_only: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> chunks: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> xbc: array<f32>;
@group(0) @binding(4) var<storage, read> proj: array<f32>;
@group(0) @binding(5) var<storage, read> a_log: array<f32>;
@group(0) @binding(6) var<storage, read> dt_bias: array<f32>;
@group(0) @binding(7) var<storage, read> d: array<f32>;
@group(0) @binding(8) var<storage, read_write> state: array<f32>;
@group(0) @binding(9) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
  let pc = gid.x;
  let h = wid.y;
  if (pc >= p.head_dim) { return; }
  let chunk = chunks[wid.z];
  if (chunk.x + chunk.y > step.n_tokens || (p.steps_only != 0u && chunk.y > 1u)) { return; }
  let inner = p.heads * p.head_dim;
  let g = h / (p.heads / p.groups);
  let b_at = inner + g * D_STATE;
  let c_at = inner + p.groups * D_STATE + g * D_STATE;
  let a = -exp(a_log[h]);
  let base = ((chunk.z * p.heads + h) * p.head_dim + pc) * D_STATE;
  var s: array<f32, D_STATE>;
  for (var n = 0u; n < D_STATE; n++) { s[n] = select(0.0, state[base + n], chunk.w > 0u); }
  for (var i = 0u; i < chunk.y; i++) {
    let t = chunk.x + i;
    let dt = softplus(proj[t * p.proj_stride + p.dt_offset + h] + dt_bias[h]);
    let decay = exp(dt * a);
    let row = t * p.conv_dim;
    let xv = xbc[row + h * p.head_dim + pc];
    let dx = dt * xv;
    var acc = 0.0;
    for (var n = 0u; n < D_STATE; n++) {
      s[n] = decay * s[n] + dx * xbc[row + b_at + n];
      acc += xbc[row + c_at + n] * s[n];
    }
    y[t * inner + h * p.head_dim + pc] = acc + d[h] * xv;
  }
  for (var n = 0u; n < D_STATE; n++) { state[base + n] = s[n]; }
}
