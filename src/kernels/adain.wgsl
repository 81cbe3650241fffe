// Adaptive instance normalisation over time-major rows (Kokoro's AdaIN1d), with the
// activation that follows it: for each channel c, n = (x[:, c] - mean) / sqrt(var + eps)
// over the frames (biased variance), then y[t, c] = act(g[c] * (n * nw[c] + nb[c]) +
// h[c]), where g = affine[affine_offset + c] (1 + the style's gamma: the host folds the 1
// into the projection's bias) and h = affine[affine_offset + channels + c], nw and nb the
// instance norm's own weight and bias. act by code: none, a leaky ReLU of slope `slope`,
// or Snake v + sin(a v)^2 / a with a = alpha[c]. x and y are views (conv1d.wgsl).
// Bindings: 0 params, 2 x, 3 y, 4 affine (the style projection's output), 5 norm [nw,
// nb] (2 * channels), 6 alpha [channels] (ACT_SNAKE).
// Plan: one workgroup per channel; its 64 invocations stride over the frames and reduce
// the mean, then the variance, through workgroup memory (a channel spans every frame, so
// a serial loop per channel would leave most of a GPU idle).
const NORM_ACT_NONE: u32 = 0u;
const NORM_ACT_LEAKY: u32 = 1u;
const NORM_ACT_SNAKE: u32 = 2u;
struct Params { frames: u32, channels: u32, x_stride: u32, x_offset: u32, y_stride: u32, y_offset: u32, affine_offset: u32, act: u32, slope: f32, eps: f32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> affine: array<f32>;
@group(0) @binding(5) var<storage, read> norm: array<f32>;
@group(0) @binding(6) var<storage, read> alpha: array<f32>;

var<workgroup> partial: array<f32, 64>;

// The workgroup's sum of v (every invocation gets it).
fn reduce(lid: u32, v: f32) -> f32 {
  workgroupBarrier();
  partial[lid] = v;
  workgroupBarrier();
  for (var s = 32u; s > 0u; s >>= 1u) {
    if (lid < s) { partial[lid] += partial[lid + s]; }
    workgroupBarrier();
  }
  return partial[0];
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let c = wid.x;
  var sum = 0.0;
  for (var t = lid; t < p.frames; t += 64u) { sum += x[t * p.x_stride + p.x_offset + c]; }
  let mean = reduce(lid, sum) / f32(p.frames);
  var ss = 0.0;
  for (var t = lid; t < p.frames; t += 64u) {
    let d = x[t * p.x_stride + p.x_offset + c] - mean;
    ss += d * d;
  }
  let inv = inverseSqrt(reduce(lid, ss) / f32(p.frames) + p.eps);
  let scale = affine[p.affine_offset + c] * norm[c] * inv;
  let shift = affine[p.affine_offset + c] * norm[p.channels + c] + affine[p.affine_offset + p.channels + c];
  for (var t = lid; t < p.frames; t += 64u) {
    var v = (x[t * p.x_stride + p.x_offset + c] - mean) * scale + shift;
    if (p.act == NORM_ACT_LEAKY) {
      v = select(v * p.slope, v, v >= 0.0);
    } else if (p.act == NORM_ACT_SNAKE) {
      let a = alpha[c];
      let s = sin(a * v);
      v += s * s / a;
    }
    y[t * p.y_stride + p.y_offset + c] = v;
  }
}
