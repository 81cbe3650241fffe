// matmul_q's input X (binding 5) as a sampled texture, where WGSL cannot read storage
// textures, read one texel at a time.
@group(0) @binding(5) var x_tex: texture_2d<f32>;
fn x_texel(at: vec2<u32>) -> vec4<f32> { return textureLoad(x_tex, at, 0); }
