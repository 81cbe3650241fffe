// An affine weight's textures (formats/affine.wgsl) as sampled textures, and their texel
// reads: binding 2 the packed words (w_texel), 3 the scales and biases (w_affine_texel);
// texel i of either is (i % PACKED_WIDTH, i / PACKED_WIDTH).
@group(0) @binding(2) var w_packed: texture_2d<u32>;
fn w_texel(i: u32) -> vec4<u32> { return textureLoad(w_packed, vec2<u32>(i % PACKED_WIDTH, i / PACKED_WIDTH), 0); }
@group(0) @binding(3) var w_affine: texture_2d<u32>;
fn w_affine_texel(i: u32) -> vec4<u32> { return textureLoad(w_affine, vec2<u32>(i % PACKED_WIDTH, i / PACKED_WIDTH), 0); }
