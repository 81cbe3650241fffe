// matmul_q's input X (binding 5) as a read-only storage texture, read one texel at a time.
@group(0) @binding(5) var x_tex: texture_storage_2d<rgba32float, read>;
fn x_texel(at: vec2<u32>) -> vec4<f32> { return textureLoad(x_tex, at); }
