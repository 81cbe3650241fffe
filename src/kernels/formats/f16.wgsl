// Weight format: f16, row-major [N, K], stored as u32 pairs so adapters without
// shader-f16 can read it: unpack2x16float is core WGSL.
@group(0) @binding(2) var<storage, read> w_data: array<vec2<u32>>;

fn w_load4(n: u32, k: u32, K: u32) -> vec4<f32> {
  let w = w_data[(n * K + k) / 4u];
  return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y));
}
