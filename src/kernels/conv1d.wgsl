// A 1-D convolution over time-major rows (Kokoro's text encoder, prosody and iSTFTNet
// blocks): y[t, o] = (acc ? y[t, o] : 0) + (b[o] + res[t, o] + sum_{k, c} w[k, c, o] *
// act(x[src(t, k), c])) then y *= out_scale, where src(t, k) = (t * stride + k * dilation
// - pad) / upsample (nearest upsampling of the input by `upsample`; zeros outside the
// input) and act is a leaky ReLU of slope in_slope (1: none). Rows are read and written
// through views: element (t, c) of x is x[t * x_stride + x_offset + c] (likewise y, res),
// so a convolution reads or writes some channels of a wider buffer (a concatenation).
// Bindings: 0 params, 2 w [taps, cin, cout4] vec4 (output channels padded to 4 with
// zeros), 3 b [cout4] vec4, 4 x, 5 y, 6 res (has_res). No step uniform: the shapes are the
// call's, in params (as in every kernel of runtime/ops/audio.ts).
// Plan: one invocation per (FRAMES consecutive frames, 4 output channels): each weight
// vec4 read serves FRAMES frames (4 FRAMES accumulators), and neighbouring invocations share
// their frames, so they read the same inputs and consecutive weights.
struct Params {
  frames_in: u32, frames_out: u32, cin: u32, cout: u32, taps: u32, stride: u32, dilation: u32, pad: u32, upsample: u32,
  x_stride: u32, x_offset: u32, y_stride: u32, y_offset: u32, res_stride: u32, res_offset: u32,
  in_slope: f32, out_scale: f32, accumulate: u32, has_res: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> w: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> b: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> x: array<f32>;
@group(0) @binding(5) var<storage, read_write> y: array<f32>;
@group(0) @binding(6) var<storage, read> res: array<f32>;

#const FRAMES: u32

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let cout4 = (p.cout + 3u) / 4u;
  let i = gid.x + gid.y * 65535u * 64u;
  let blocks = (p.frames_out + FRAMES - 1u) / FRAMES;
  if (i >= blocks * cout4) { return; }
  let t0 = (i / cout4) * FRAMES;
  let o4 = i % cout4;
  var acc: array<vec4<f32>, FRAMES>;
  for (var j = 0u; j < FRAMES; j++) { acc[j] = b[o4]; }
  let virtual_in = i32(p.frames_in * p.upsample);
  for (var k = 0u; k < p.taps; k++) {
    // Each frame's input row for this tap, or -1 outside the input.
    var row: array<i32, FRAMES>;
    for (var j = 0u; j < FRAMES; j++) {
      let at = i32((t0 + j) * p.stride + k * p.dilation) - i32(p.pad);
      row[j] = select(-1, i32((u32(at) / p.upsample) * p.x_stride + p.x_offset), at >= 0 && at < virtual_in && t0 + j < p.frames_out);
    }
    let wrow = k * p.cin * cout4 + o4;
    for (var c = 0u; c < p.cin; c++) {
      let wv = w[wrow + c * cout4];
      for (var j = 0u; j < FRAMES; j++) {
        if (row[j] < 0) { continue; }
        var v = x[u32(row[j]) + c];
        if (v < 0.0) { v *= p.in_slope; }
        acc[j] += wv * v;
      }
    }
  }
  for (var j = 0u; j < FRAMES; j++) {
    let t = t0 + j;
    if (t >= p.frames_out) { break; }
    for (var q = 0u; q < 4u; q++) {
      let o = o4 * 4u + q;
      if (o >= p.cout) { break; }
      var v = acc[j][q];
      if (p.has_res != 0u) { v += res[t * p.res_stride + p.res_offset + o]; }
      let at = t * p.y_stride + p.y_offset + o;
      if (p.accumulate != 0u) { v += y[at]; }
      y[at] = v * p.out_scale;
    }
  }
}
