// Mamba-2's selective state-space scan over each sequence's chunk of two or more tokens
// (prefill, a verify round), its positions walked in parallel; the same recurrence as
// ssm_scan.wgsl (which takes the decode steps, chunks of one token; on a CPU adapter all
// chunks):
//   s_t = a_t s_(t-1) + u_t,  a_t = exp(dt_t A),  u_t[p, n] = dt_t x_t[p] B_t[g, n]
//   y_t[p] = sum_n C_t[g, n] s_t[p, n] + D x_t[p]
// The recurrence is linear, so it splits at segment boundaries: a segment's end state is
// (product of its a_t) times its start state plus its end state from zero. The chunk is cut
// into SCAN_SEGMENTS segments of equal length, and
//   1. each segment runs from a zero state, keeping its end state and its decay product;
//   2. the segments' start states are carried through them in order (one multiply-add per
//      state value and segment, through workgroup memory), from the sequence's state (zero
//      at position 0); the last end state is the sequence's new state;
//   3. each segment runs again from its true start state, writing y.
// Twice the sequential scan's arithmetic, SCAN_SEGMENTS times its parallelism over positions.
// Bindings: 0 params, 1 step, then ssm_scan_io.wgsl's.
// Plan: a workgroup per (SCAN_CHANNELS head channels, head, chunk); invocation (segment,
// channel) keeps its channel's N state values in registers through its segment. The
// invocations of a workgroup share the head, so the dt, B and C of a token are the same
// few addresses for the SCAN_CHANNELS invocations of a segment. A workgroup whose chunk is
// not this kernel's (one token) leaves after one uniform load; in the others every barrier
// is reached by the whole workgroup, invocations past head_dim only skipping the arithmetic.
#include "common"
#include "ssm_scan_io"
#const D_STATE: u32
const SCAN_SEGMENTS: u32 = 16u;
const SCAN_CHANNELS: u32 = 4u;
struct Params { head_dim: u32, heads: u32, groups: u32, conv_dim: u32, proj_stride: u32, dt_offset: u32 }
@group(0) @binding(0) var<uniform> p: Params;

// The state carried from segment to segment, per channel of the workgroup.
var<workgroup> carry: array<f32, SCAN_CHANNELS * D_STATE>;
// The chunk's token count, read once for the whole workgroup (a uniform branch on it).
var<workgroup> chunk_tokens: u32;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wid: vec3<u32>) {
  let seg = li / SCAN_CHANNELS;
  let lc = li % SCAN_CHANNELS;
  let pc = wid.x * SCAN_CHANNELS + lc;
  let chunk = chunks[wid.z];
  if (li == 0u) { chunk_tokens = select(0u, chunk.y, chunk.x + chunk.y <= step.n_tokens); }
  if (workgroupUniformLoad(&chunk_tokens) < 2u) { return; }
  let work = pc < p.head_dim;
  let c = scan_channel(wid.y, pc);
  let base = ((chunk.z * p.heads + c.h) * p.head_dim + pc) * D_STATE;
  let len = (chunk.y + SCAN_SEGMENTS - 1u) / SCAN_SEGMENTS;
  let first = chunk.x + min(seg * len, chunk.y);
  let end = chunk.x + min((seg + 1u) * len, chunk.y);
  var s: array<f32, D_STATE>;
  var decayed = 1.0;
  if (work) {
    for (var t = first; t < end; t++) {
      scan_token(&s, t, c, false);
      decayed *= exp(scan_dt(t, c) * c.a);
    }
    if (seg == 0u) {
      for (var n = 0u; n < D_STATE; n++) { carry[lc * D_STATE + n] = select(0.0, state[base + n], chunk.w > 0u); }
    }
  }
  workgroupBarrier();
  for (var k = 0u; k < SCAN_SEGMENTS; k++) {
    if (work && seg == k) {
      for (var n = 0u; n < D_STATE; n++) {
        let start = carry[lc * D_STATE + n];
        carry[lc * D_STATE + n] = decayed * start + s[n];
        s[n] = start;
      }
    }
    workgroupBarrier();
  }
  if (!work) { return; }
  if (seg == 0u) {
    for (var n = 0u; n < D_STATE; n++) { state[base + n] = carry[lc * D_STATE + n]; }
  }
  for (var t = first; t < end; t++) { scan_write(t, c, scan_token(&s, t, c, true)); }
}
