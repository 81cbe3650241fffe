// The attention kernels' KV cache (kv_cache.wgsl) as read-only storage textures: binding 3
// the keys (cached_k), 4 the values (cached_v), vec4 i at kv_texel(i), in their types
// (K_TYPE, V_TYPE; an f16 texel widens to f32 as it loads).
#if K_TYPE == f16
@group(0) @binding(3) var k_cache: texture_storage_2d<rgba16float, read>;
#else
@group(0) @binding(3) var k_cache: texture_storage_2d<rgba32float, read>;
#endif
fn cached_k(i: u32) -> vec4<f32> { return textureLoad(k_cache, kv_texel(i)); }
#if V_TYPE == f16
@group(0) @binding(4) var v_cache: texture_storage_2d<rgba16float, read>;
#else
@group(0) @binding(4) var v_cache: texture_storage_2d<rgba32float, read>;
#endif
fn cached_v(i: u32) -> vec4<f32> { return textureLoad(v_cache, kv_texel(i)); }
