// The attention kernels' KV cache (kv_cache.wgsl) as sampled textures, where WGSL cannot
// read storage textures: binding 3 the keys (cached_k), 4 the values (cached_v), vec4 i at
// kv_texel(i). A sampled float texture reads f32 and f16 texels alike (widened to f32).
@group(0) @binding(3) var k_cache: texture_2d<f32>;
fn cached_k(i: u32) -> vec4<f32> { return textureLoad(k_cache, kv_texel(i), 0); }
@group(0) @binding(4) var v_cache: texture_2d<f32>;
fn cached_v(i: u32) -> vec4<f32> { return textureLoad(v_cache, kv_texel(i), 0); }
