// The columns of a 1-D convolution (Whisper's encoder stem), so the convolution runs as a
// linear layer over them: cols[t, :] holds the kernel_size input frames t * stride + k -
// pad (k = 0 .. kernel_size - 1; zeros outside the input) of every channel, in the order
// the weight stores them flattened: channel-major (c * kernel_size + k) for a
// [out, in, kernel] weight (PyTorch's Conv1d), tap-major (k * channels + c) for an
// [out, kernel, in] one (MLX's).
// Bindings: 0 params, 1 step, 2 x [frames_in, channels] f32, 3 cols [step.n_tokens,
// kernel_size * channels] f32; one row of cols per output frame (the step's tokens).
// Plan: one invocation per output value; a pure gather, bound by memory.
#include "common"
struct Params { channels: u32, frames_in: u32, kernel_size: u32, stride: u32, pad: u32, tap_major: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> cols: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let width = p.kernel_size * p.channels;
  let i = gid.x + gid.y * 65535u * 64u;
  if (i >= step.n_tokens * width) { return; }
  let t = i / width;
  let j = i % width;
  var c = j / p.kernel_size;
  var k = j % p.kernel_size;
  if (p.tap_major != 0u) {
    c = j % p.channels;
    k = j / p.channels;
  }
  let at = i32(t * p.stride + k) - i32(p.pad);
  var v = 0.0;
  if (at >= 0 && u32(at) < p.frames_in) { v = x[u32(at) * p.channels + c]; }
  cols[i] = v;
}
