// An affine weight's textures (formats/affine.wgsl) as read-only storage textures, and their
// texel reads: binding 2 the packed words (w_texel), 3 the scales and biases
// (w_affine_texel); texel i of either is (i % PACKED_WIDTH, i / PACKED_WIDTH). For kernels
// where a storage load beats a sampled one (Ops.affineRead), where WGSL allows it.
@group(0) @binding(2) var w_packed: texture_storage_2d<rgba32uint, read>;
fn w_texel(i: u32) -> vec4<u32> { return textureLoad(w_packed, vec2<u32>(i % PACKED_WIDTH, i / PACKED_WIDTH)); }
@group(0) @binding(3) var w_affine: texture_storage_2d<rgba32uint, read>;
fn w_affine_texel(i: u32) -> vec4<u32> { return textureLoad(w_affine, vec2<u32>(i % PACKED_WIDTH, i / PACKED_WIDTH)); }
