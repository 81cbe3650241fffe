// Rotary position embedding of q and k (HF "rotate_half": pairs (i, i + head_dim/2) in each
// head), with NORM after a per-head RMSNorm (Qwen3's q_norm / k_norm, rounded as
// rmsnorm.wgsl rounds it), and the append of this pass's keys and values to the paged KV
// cache (kv_cache.wgsl): q is rotated in place, k straight into the cache, v copied there.
// Frequencies come from the host (inv_freq[i]), so every rope_scaling type is a host table.
// Only the first rot_dim of each head's dims rotate (partial_rotary_factor; 0: a NoPE
// layer), pairs (i, i + rot_dim/2), and the rotated values are multiplied by mscale
// (longrope's attention factor; 1 otherwise); the rest pass through. With MROPE (Qwen2.5-VL's
// multimodal RoPE, and its vision tower's 2D one) each token has three positions (t, h, w)
// in rope_pos and pair i turns by the stream its section names: t below section_t, h below
// section_t + section_h, w from there; token_pos still places the token in the cache.
// Bindings: 0 params, 1 step, 2 q [M, heads, head_dim] rw, 3 token_pos [M], 4 inv_freq
// [rot_dim / 2], 5 the norm weights [2 * head_dim], q's then k's (read only with NORM; any
// buffer otherwise), 6 k and 7 v [M, kv_heads, head_dim], 8 token_table [M] (offset of the
// token's sequence in block_table), 9 block_table, 10 k_cache and 11 v_cache (write-only
// textures of K_TYPE and V_TYPE, in the layout p.ring picks, kv_cache.wgsl), 12 token_slot
// [M] (a ring layer's slots; a dummy for a paged one), 13 rope_pos [M, 3] (read only with
// MROPE; any buffer otherwise). All but the tables are arrays of vec4s, the pairs four at a time
// (head_dim % 8 == 0 and rot_dim % 8 == 0).
// Plan: one invocation per (token, head) of q's heads then k's, walking its pairs; a k
// head's invocation also copies the same head of v. The q/k branch is per head, outside the
// arithmetic.
// Why: on llvmpipe a storage access at a per-invocation address is a per-lane loop whatever
// its width (hence vec4s), and a dispatch has a fixed cost however little it computes, so
// the norm (which needs the whole head row), the rotation and the cache write (which needs
// the rotated k) are one dispatch per layer instead of four.
#include "common"
#include "kv_cache"
override NORM: bool = false;
override MROPE: bool = false;
struct Params { heads: u32, kv_heads: u32, head_dim: u32, eps: f32, block_size: u32, rot_dim: u32, mscale: f32, ring: u32, section_t: u32, section_h: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read_write> q: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> token_pos: array<u32>;
@group(0) @binding(4) var<storage, read> inv_freq: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read> norm_weight: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read> k: array<vec4<f32>>;
@group(0) @binding(7) var<storage, read> v: array<vec4<f32>>;
@group(0) @binding(8) var<storage, read> token_table: array<u32>;
@group(0) @binding(9) var<storage, read> block_table: array<u32>;
@group(0) @binding(12) var<storage, read> token_slot: array<u32>;
@group(0) @binding(13) var<storage, read> rope_pos: array<u32>;
#if K_TYPE == f16
@group(0) @binding(10) var k_cache: texture_storage_2d<rgba16float, write>;
fn store_k(i: u32, x: vec4<f32>) { textureStore(k_cache, kv_texel(i), kv_round(x)); }
#else
@group(0) @binding(10) var k_cache: texture_storage_2d<rgba32float, write>;
fn store_k(i: u32, x: vec4<f32>) { textureStore(k_cache, kv_texel(i), x); }
#endif
#if V_TYPE == f16
@group(0) @binding(11) var v_cache: texture_storage_2d<rgba16float, write>;
fn store_v(i: u32, x: vec4<f32>) { textureStore(v_cache, kv_texel(i), kv_round(x)); }
#else
@group(0) @binding(11) var v_cache: texture_storage_2d<rgba32float, write>;
fn store_v(i: u32, x: vec4<f32>) { textureStore(v_cache, kv_texel(i), x); }
#endif

fn load(is_k: bool, i: u32) -> vec4<f32> {
  if (is_k) { return k[i]; }
  return q[i];
}

// Writes output vector i: q's in place, k's into the cache (i is then a cache index).
fn store(is_k: bool, i: u32, x: vec4<f32>) {
  if (is_k) { store_k(i, x); } else { q[i] = x; }
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let per_token = p.heads + p.kv_heads;
  if (gid.x >= step.n_tokens * per_token) { return; }
  let m = gid.x / per_token;
  let head = gid.x % per_token;
  let is_k = head >= p.heads;
  let pos = token_pos[m];
  let d4 = p.head_dim / 4u;
  // Where the head is read (base) and written (out), in vec4s; a k head's norm weight
  // follows q's.
  var base = (m * p.heads + head) * d4;
  var out = base;
  var w_base = 0u;
  if (is_k) {
    let kh = head - p.heads;
    base = (m * p.kv_heads + kh) * d4;
    out = (kv_slot(kv_seq(m), pos) * p.kv_heads + kh) * d4;
    w_base = d4;
    for (var i = 0u; i < d4; i++) { store_v(out + i, v[base + i]); }
  }
  let rot4 = p.rot_dim / 4u;
  let half = rot4 / 2u;
  var inv = 1.0;
  if (NORM) {
    var ss = 0.0;
    for (var i = 0u; i < d4; i++) {
      let x = load(is_k, base + i);
      ss += dot(x, x);
    }
    inv = inverseSqrt(ss / f32(p.head_dim) + p.eps);
  }
  var fpos = vec4<f32>(f32(pos));
  var streams = vec3<f32>(fpos.x);
  if (MROPE) { streams = vec3<f32>(f32(rope_pos[3u * m]), f32(rope_pos[3u * m + 1u]), f32(rope_pos[3u * m + 2u])); }
  for (var i = 0u; i < half; i++) {
    if (MROPE) {
      let pair = vec4<u32>(4u * i) + vec4<u32>(0u, 1u, 2u, 3u);
      fpos = select(select(vec4<f32>(streams.z), vec4<f32>(streams.y), pair < vec4<u32>(p.section_t + p.section_h)), vec4<f32>(streams.x), pair < vec4<u32>(p.section_t));
    }
    var xa = load(is_k, base + i);
    var xb = load(is_k, base + i + half);
    if (NORM) {
      xa = xa * inv * norm_weight[w_base + i];
      xb = xb * inv * norm_weight[w_base + i + half];
    }
    let angle = fpos * inv_freq[i];
    let c = cos(angle) * p.mscale;
    let s = sin(angle) * p.mscale;
    store(is_k, out + i, xa * c - xb * s);
    store(is_k, out + i + half, xb * c + xa * s);
  }
  for (var i = rot4; i < d4; i++) {
    var x = load(is_k, base + i);
    if (NORM) { x = x * inv * norm_weight[w_base + i]; }
    store(is_k, out + i, x);
  }
}
