// What the attention kernels (attention.wgsl; attention_decode_workgroup.wgsl, the decode
// layout for GPUs) read and write.
// Bindings: 0 params, 1 step, 2 q [M, heads, head_dim], 3 k_cache and 4 v_cache
// (kv_cache.wgsl), 5 token_pos [M], 6 token_table [M], 7 block_table, 8 out [M, heads,
// head_dim], 9 sinks [heads] (a dummy without has_sinks), 10 token_slot [M] (a ring layer's
// slots, kv_cache.wgsl; a dummy for a paged one); q and out in vec4s, D4 = head_dim / 4 of them per head (a constant expression:
// it sizes the kernels' private arrays). The caches are read through cached_k(i) and
// cached_v(i), vec4 i of a layer's keys or values, as read-only storage textures or sampled
// ones (KV_READ: storage where WGSL allows it, else sampled; kv_cache.wgsl says why).
// scale multiplies q; softcap caps each score (common.wgsl softcap; 0: none); window > 0
// limits a token at pos to the keys at pos - window + 1 ..= pos (sliding-window layers);
// has_sinks: each head's learned sink logit joins its softmax's denominator and adds no
// value (GPT-OSS), so the online softmax starts from it (softmax_start).
#include "kv_cache"
#include "readers/kv_cache_${KV_READ}"
#const D4: u32

struct Params { heads: u32, kv_heads: u32, block_size: u32, scale: f32, window: u32, softcap: f32, has_sinks: u32, ring: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read> token_pos: array<u32>;
@group(0) @binding(6) var<storage, read> token_table: array<u32>;
@group(0) @binding(7) var<storage, read> block_table: array<u32>;
@group(0) @binding(8) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(9) var<storage, read> sinks: array<f32>;
@group(0) @binding(10) var<storage, read> token_slot: array<u32>;

// A masked score: exp(MASKED - max) is 0 once a real score has set the running max.
const MASKED: f32 = -3.0e38;

// Head h's online softmax before any key: (running max, running sum), the sink's
// (sink, exp(0) = 1) where the layer has sinks, else nothing seen yet.
fn softmax_start(h: u32) -> vec2<f32> {
  if (p.has_sinks != 0u) { return vec2<f32>(sinks[h], 1.0); }
  return vec2<f32>(MASKED, 0.0);
}

// vec4 index of the first element of key/value row j of sequence s (kv_seq), for the KV
// head whose vectors start at kv_row.
fn kv_base(s: KvSeq, j: u32, kv_row: u32) -> u32 {
  return kv_slot(s, j) * p.kv_heads * D4 + kv_row;
}

// The first position a token at `pos` attends to.
fn first_key(pos: u32) -> u32 {
  if (p.window == 0u || pos < p.window) { return 0u; }
  return pos + 1u - p.window;
}
