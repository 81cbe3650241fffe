// Causal attention of each token over its own sequence's cached keys/values (positions
// 0..=pos), grouped-query: query head h reads KV head h / (heads / kv_heads).
// Bindings: 0 params, 1 step, 2 q [M, heads, head_dim], 3 k_cache, 4 v_cache (layout as
// in kv_write.wgsl), 5 token_pos [M], 6 token_table [M], 7 block_table, 8 out [M, heads, head_dim].
// Plan: one invocation per (token, head) with an online softmax (running max and sum) in
// registers, so any context length works without a scores buffer. The runtime generates
// `const D4` (head_dim / 4, Ops.attention) so that q and the output accumulator are arrays
// indexed only by constant-trip loops, which the compiler unrolls into registers: with a
// runtime bound they were per-lane scratch memory on llvmpipe.
struct Params { heads: u32, kv_heads: u32, block_size: u32, scale: f32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> k_cache: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> v_cache: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read> token_pos: array<u32>;
@group(0) @binding(6) var<storage, read> token_table: array<u32>;
@group(0) @binding(7) var<storage, read> block_table: array<u32>;
@group(0) @binding(8) var<storage, read_write> out: array<vec4<f32>>;

@compute @workgroup_size(16)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let row = gid.x;  // token * heads + head
  if (row >= step.n_tokens * p.heads) { return; }
  let m = row / p.heads;
  let h = row % p.heads;
  let kv_row = (h / (p.heads / p.kv_heads)) * D4;
  let kv_stride = p.kv_heads * D4;
  let qo = row * D4;
  let pos = token_pos[m];
  let table = token_table[m];

  var qs: array<vec4<f32>, D4>;  // q * scale
  for (var d = 0u; d < D4; d++) { qs[d] = q[qo + d] * p.scale; }
  var acc: array<vec4<f32>, D4>;
  for (var d = 0u; d < D4; d++) { acc[d] = vec4<f32>(0.0); }
  var run_max = -3.0e38;
  var run_sum = 0.0;
  for (var j = 0u; j <= pos; j++) {
    let slot = block_table[table + j / p.block_size] * p.block_size + j % p.block_size;
    let base = slot * kv_stride + kv_row;
    var s4 = vec4<f32>(0.0);
    for (var d = 0u; d < D4; d++) { s4 += qs[d] * k_cache[base + d]; }
    let s = s4.x + s4.y + s4.z + s4.w;
    let new_max = max(run_max, s);
    let correction = exp(run_max - new_max);
    let w = exp(s - new_max);
    run_sum = run_sum * correction + w;
    for (var d = 0u; d < D4; d++) { acc[d] = acc[d] * correction + w * v_cache[base + d]; }
    run_max = new_max;
  }
  for (var d = 0u; d < D4; d++) { out[qo + d] = acc[d] / run_sum; }
}
