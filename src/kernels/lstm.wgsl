// A bidirectional single-layer LSTM's recurrence (PyTorch's gate order i, f, g, o), both
// directions at once: gates = pre[t, dir * 4H + r] + extra[extra_offset + dir * 4H + r] +
// W_hh[dir] h, then c = sigmoid(f) c + sigmoid(i) tanh(g), h = sigmoid(o) tanh(c), the
// forward direction over t = 0 .. frames - 1, the backward one from the last frame down;
// y[t, dir * H + j] = h[j] (a view, as conv1d.wgsl). `pre` holds the input projection of
// every frame (a linear layer run before, biases included); `extra` is a per-call addition
// to it (the style's part of the input projection, where the style is concatenated to
// every frame's input), read when has_extra.
// Bindings: 0 params, 2 pre [frames, 8H], 3 w [2, 4H, H] (W_hh forward, backward), 4
// extra, 5 y.
// Plan: one workgroup per direction, looping over the frames: each step its invocations
// compute the 4H gate rows into workgroup memory, then the H cells; h and c stay in
// workgroup memory. One dispatch runs the whole sequence (a dispatch per step costs more
// than a step's work).
#include "math"
#const MAX_HIDDEN: u32
struct Params { frames: u32, hidden: u32, y_stride: u32, y_offset: u32, extra_offset: u32, has_extra: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> pre: array<f32>;
@group(0) @binding(3) var<storage, read> w: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> extra: array<f32>;
@group(0) @binding(5) var<storage, read_write> y: array<f32>;

var<workgroup> gates: array<f32, 4u * MAX_HIDDEN>;
var<workgroup> h: array<vec4<f32>, MAX_HIDDEN / 4u>;
var<workgroup> cell: array<f32, MAX_HIDDEN>;

fn sigmoid(v: f32) -> f32 {
  return 1.0 / (1.0 + exp(-v));
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let dir = wid.x;
  let H = p.hidden;
  let H4 = H / 4u;
  let rows = 4u * H;
  for (var j = lid; j < H; j += 256u) { cell[j] = 0.0; }
  for (var j = lid; j < H4; j += 256u) { h[j] = vec4<f32>(0.0); }
  workgroupBarrier();
  for (var s = 0u; s < p.frames; s++) {
    let t = select(s, p.frames - 1u - s, dir == 1u);
    for (var r = lid; r < rows; r += 256u) {
      var g = pre[t * 2u * rows + dir * rows + r];
      if (p.has_extra != 0u) { g += extra[p.extra_offset + dir * rows + r]; }
      let wrow = (dir * rows + r) * H4;
      var acc = vec4<f32>(0.0);
      for (var k = 0u; k < H4; k++) { acc += w[wrow + k] * h[k]; }
      gates[r] = g + acc.x + acc.y + acc.z + acc.w;
    }
    workgroupBarrier();
    for (var j = lid; j < H; j += 256u) {
      let c = sigmoid(gates[H + j]) * cell[j] + sigmoid(gates[j]) * tanh_sat(gates[2u * H + j]);
      cell[j] = c;
      let hj = sigmoid(gates[3u * H + j]) * tanh_sat(c);
      h[j / 4u][j % 4u] = hj;
      y[t * p.y_stride + p.y_offset + dir * H + j] = hj;
    }
    workgroupBarrier();
  }
}
