// LayerNorm over each time-major row's channels with an affine from a table, and a leaky
// ReLU after it (Kokoro's text-encoder LayerNorm and the duration encoder's AdaLayerNorm):
// y[t, c] = act((v - mean) / sqrt(var + eps) * affine[affine_offset + c] +
// affine[affine_offset + channels + c]), v = x[t, :]. The table is the style
// projection's output (1 + gamma, beta: the host folds the 1 into the bias) or a stored
// LayerNorm's [weight, bias]. act: a leaky ReLU of slope `slope` (1: none). x and y are
// views (conv1d.wgsl).
// Bindings: 0 params, 2 x, 3 y, 4 affine.
// Plan: one invocation per row, passes over the row (as layernorm.wgsl: rows are short).
struct Params { frames: u32, channels: u32, x_stride: u32, x_offset: u32, y_stride: u32, y_offset: u32, affine_offset: u32, slope: f32, eps: f32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> affine: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let t = gid.x;
  if (t >= p.frames) { return; }
  let row = t * p.x_stride + p.x_offset;
  var sum = 0.0;
  for (var c = 0u; c < p.channels; c++) { sum += x[row + c]; }
  let mean = sum / f32(p.channels);
  var ss = 0.0;
  for (var c = 0u; c < p.channels; c++) {
    let d = x[row + c] - mean;
    ss += d * d;
  }
  let inv = inverseSqrt(ss / f32(p.channels) + p.eps);
  for (var c = 0u; c < p.channels; c++) {
    let v = (x[row + c] - mean) * inv * affine[p.affine_offset + c] + affine[p.affine_offset + p.channels + c];
    y[t * p.y_stride + p.y_offset + c] = select(v * p.slope, v, v >= 0.0);
  }
}
