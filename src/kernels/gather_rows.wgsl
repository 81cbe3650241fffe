// Row gather between views (conv1d.wgsl): y[f, c] = x[index[f], c] for c < width (Kokoro's
// alignment expansion: each frame takes its phoneme's features; and copies of a view).
// Bindings: 0 params, 2 index [frames] u32, 3 x, 4 y.
// Plan: one invocation per output value; a pure gather, bound by memory.
struct Params { frames: u32, width: u32, x_stride: u32, x_offset: u32, y_stride: u32, y_offset: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> index: array<u32>;
@group(0) @binding(3) var<storage, read> x: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.x + gid.y * 65535u * 64u;
  if (i >= p.frames * p.width) { return; }
  let f = i / p.width;
  let c = i % p.width;
  y[f * p.y_stride + p.y_offset + c] = x[index[f] * p.x_stride + p.x_offset + c];
}
