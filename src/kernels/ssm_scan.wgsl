// Mamba-2's selective state-space scan over each sequence's chunk of tokens, continuing from
// the sequence's SSM state and leaving the state after the chunk's last token:
//   dt = softplus(dt_raw[t, h] + dt_bias[h]),  A = -exp(A_log[h])
//   s[h, p, n] = exp(dt A) s[h, p, n] + dt x[t, h, p] B[t, g, n]      (g = h / (H / G))
//   y[t, h, p] = sum_n C[t, g, n] s[h, p, n] + D[h] x[t, h, p]
// A chunk at position 0 starts from a zero state (a new sequence). On a CPU adapter this
// kernel takes every chunk (a decode step is a chunk of one token); on a GPU, with
// steps_only set, only the chunks of one token, and ssm_scan_chunk.wgsl the longer ones
// (prefill, a verify round), in parallel over their positions.
// Bindings: 0 params, 1 step, then ssm_scan_io.wgsl's.
// Plan: one invocation per (head channel p, head h, chunk): its N state values stay in
// registers across the chunk's tokens, so a chunk of any length is one pass with no barrier;
// the invocations of a workgroup share the head, so B, C and dt of each token are the same
// addresses for all of them (one cache line each). A CPU adapter runs few invocations at a
// time, so this walk, the least arithmetic, is its fastest for prefill too.
#include "common"
#include "ssm_scan_io"
#const D_STATE: u32
struct Params { head_dim: u32, heads: u32, groups: u32, conv_dim: u32, proj_stride: u32, dt_offset: u32, steps_only: u32 }
@group(0) @binding(0) var<uniform> p: Params;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
  let pc = gid.x;
  let h = wid.y;
  if (pc >= p.head_dim) { return; }
  let chunk = chunks[wid.z];
  if (chunk.x + chunk.y > step.n_tokens || (p.steps_only != 0u && chunk.y > 1u)) { return; }
  let c = scan_channel(h, pc);
  let base = ((chunk.z * p.heads + h) * p.head_dim + pc) * D_STATE;
  var s: array<f32, D_STATE>;
  for (var n = 0u; n < D_STATE; n++) { s[n] = select(0.0, state[base + n], chunk.w > 0u); }
  for (var t = chunk.x; t < chunk.x + chunk.y; t++) { scan_write(t, c, scan_token(&s, t, c, true)); }
  for (var n = 0u; n < D_STATE; n++) { state[base + n] = s[n]; }
}
