// Causal depthwise convolution over each sequence's chunk of tokens, continuing from the
// sequence's conv state (the last K - 1 inputs before the chunk), which it then updates:
//   u[t, c] = input of token t, channel c
//   y[t, c] = post(sum_k w[c, k] * u[t - (K - 1) + k, c])
// Mamba-2 (GATED off): u = x[t, in_offset + c] (in_proj's xBC part), post = SiLU(. + bias[c]).
// LFM2's short convolution (GATED on): x[t] holds B | C | x' of width `channels` each,
// u = B * x', post = C * (. + bias[c]). The bias is optional (has_bias).
// A chunk at position 0 starts from zeros (a new sequence); otherwise from its slot's state.
// Bindings: 0 params, 1 step, 2 chunks [max chunks] vec4 (first token, tokens, state slot,
// start position), 3 x [T, in_stride], 4 w [channels, K], 5 bias [channels], 6 state
// [slots, K - 1, channels], 7 y [T, channels].
// Plan: one invocation per (channel, chunk) walking the chunk's tokens in order with the
// window in registers; channels are independent, so the chunk's tokens need no barrier.
#include "common"
struct Params { channels: u32, in_stride: u32, in_offset: u32, kernel: u32, has_bias: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> chunks: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> x: array<f32>;
@group(0) @binding(4) var<storage, read> w: array<f32>;
@group(0) @binding(5) var<storage, read> bias: array<f32>;
@group(0) @binding(6) var<storage, read_write> state: array<f32>;
@group(0) @binding(7) var<storage, read_write> y: array<f32>;

// The longest kernel the window holds (the families refuse longer ones at load).
const MAX_KERNEL: u32 = 8u;

fn input(t: u32, c: u32) -> f32 {
  let row = t * p.in_stride + p.in_offset;
#if GATED
  return x[row + c] * x[row + 2u * p.channels + c];
#else
  return x[row + c];
#endif
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
  let c = gid.x;
  if (c >= p.channels) { return; }
  let chunk = chunks[wid.y];
  if (chunk.x + chunk.y > step.n_tokens) { return; }
  let first = chunk.x;
  let count = chunk.y;
  let base = chunk.z * (p.kernel - 1u) * p.channels;
  // win[0 .. K-2]: the K - 1 inputs before the current token, oldest first.
  var win: array<f32, MAX_KERNEL>;
  for (var k = 0u; k + 1u < p.kernel; k++) {
    win[k] = select(0.0, state[base + k * p.channels + c], chunk.w > 0u);
  }
  for (var i = 0u; i < count; i++) {
    let t = first + i;
    let u = input(t, c);
    var acc = u * w[c * p.kernel + p.kernel - 1u];
    for (var k = 0u; k + 1u < p.kernel; k++) { acc += win[k] * w[c * p.kernel + k]; }
    for (var k = 0u; k + 2u < p.kernel; k++) { win[k] = win[k + 1u]; }
    win[p.kernel - 2u] = u;
    if (p.has_bias != 0u) { acc += bias[c]; }
#if GATED
    y[t * p.channels + c] = x[t * p.in_stride + p.in_offset + p.channels + c] * acc;
#else
    y[t * p.channels + c] = acc / (1.0 + exp(-acc));
#endif
  }
  for (var k = 0u; k + 1u < p.kernel; k++) { state[base + k * p.channels + c] = win[k]; }
}
