// Weight format: bf16, row-major [N, K], two values per u32 (low half first). A bf16
// is the top 16 bits of an f32, so widening is a shift.
@group(0) @binding(2) var<storage, read> w_data: array<vec2<u32>>;

fn bf16x2(u: u32) -> vec2<f32> {
  return vec2<f32>(bitcast<f32>(u << 16u), bitcast<f32>(u & 0xffff0000u));
}

fn w_load4(n: u32, k: u32, K: u32) -> vec4<f32> {
  let w = w_data[(n * K + k) / 4u];
  return vec4<f32>(bf16x2(w.x), bf16x2(w.y));
}
