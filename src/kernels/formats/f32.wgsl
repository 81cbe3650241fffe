// Weight format: f32, row-major [N, K], read four columns at a time.
@group(0) @binding(2) var<storage, read> w_data: array<vec4<f32>>;

fn w_load4(n: u32, k: u32, K: u32) -> vec4<f32> {
  return w_data[(n * K + k) / 4u];
}
