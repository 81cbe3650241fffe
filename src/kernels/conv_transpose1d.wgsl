// A transposed 1-D convolution over time-major rows (iSTFTNet's upsampling layers, the
// AdaIN blocks' depthwise upsampling "pool"): y[t, o] = (acc ? y[t, o] : 0) + b[o] +
// sum over taps k and input frames s with s * stride + k - pad = u of w[k, c, o] *
// act(x[s, c]), where u = t, or with reflect_left u = t - 1 and u = 1 at t = 0 (a
// reflection pad of one frame on the left). act is a leaky ReLU of slope in_slope (1:
// none). DEPTHWISE: one input channel per output channel (c = o), w [taps, cout4]. Rows
// are read and written through views as in conv1d.wgsl.
// Bindings: 0 params, 2 w [taps, cin, cout4] vec4 (DEPTHWISE: [taps, cout4]), 3 b
// [cout4] vec4, 4 x, 5 y.
// Plan: one invocation per (frame, 4 output channels), as conv1d.wgsl.
struct Params {
  frames_in: u32, frames_out: u32, cin: u32, cout: u32, taps: u32, stride: u32, pad: u32,
  x_stride: u32, x_offset: u32, y_stride: u32, y_offset: u32, in_slope: f32, accumulate: u32, reflect_left: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> w: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> b: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> x: array<f32>;
@group(0) @binding(5) var<storage, read_write> y: array<f32>;

fn act(v: f32) -> f32 {
  return select(v * p.in_slope, v, v >= 0.0);
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let cout4 = (p.cout + 3u) / 4u;
  let i = gid.x + gid.y * 65535u * 64u;
  if (i >= p.frames_out * cout4) { return; }
  let t = i / cout4;
  let o4 = i % cout4;
  var u = i32(t);
  if (p.reflect_left != 0u) { u = select(i32(t) - 1, 1, t == 0u); }
  var acc = b[o4];
  for (var k = 0u; k < p.taps; k++) {
    let num = u + i32(p.pad) - i32(k);
    if (num < 0 || u32(num) % p.stride != 0u) { continue; }
    let s = u32(num) / p.stride;
    if (s >= p.frames_in) { continue; }
    let row = s * p.x_stride + p.x_offset;
#if DEPTHWISE
    let c = o4 * 4u;
    var v = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {
      if (c + j < p.cin) { v[j] = act(x[row + c + j]); }
    }
    acc += w[k * cout4 + o4] * v;
#else
    let wrow = k * p.cin * cout4 + o4;
    for (var c = 0u; c < p.cin; c++) {
      acc += w[wrow + c * cout4] * act(x[row + c]);
    }
#endif
  }
  for (var j = 0u; j < 4u; j++) {
    let o = o4 * 4u + j;
    if (o >= p.cout) { break; }
    let at = t * p.y_stride + p.y_offset + o;
    var v = acc[j];
    if (p.accumulate != 0u) { v += y[at]; }
    y[at] = v;
  }
}
