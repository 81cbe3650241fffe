// Attention of a step's decode tokens (one per sequence, at position pos) over their own
// sequence's cached keys and values (positions 0..=pos), grouped-query: query head h reads
// KV head h / (heads / kv_heads). attention.wgsl is the kernel for steps with a prefill
// chunk.
// Bindings: 0 params, 1 step, 2 q [M, heads, head_dim], 3 k_cache and 4 v_cache
// (read-only textures, kv_cache.wgsl), 5 token_pos [M], 6 token_table [M], 7 block_table,
// 8 out [M, heads, head_dim].
// Plan: one invocation per token and group of HQ heads of one KV head, which share each
// key and value load, with an online softmax (running max and sum) in registers, so any
// context length works without a scores buffer. Workgroups of WG = 8 / HQ invocations
// give a single decode token's heads two workgroups. Splitting the positions among a
// workgroup's invocations (flash decoding) did not pay on llvmpipe, where loads cost per
// lane either way: the same 8.5 ms per step over 120 positions, and about 50 us more per
// layer for the merge through workgroup memory.
// The runtime generates the constants D4 (head_dim / 4) and HQ, so that q and the
// accumulators are arrays indexed only by constant-trip loops, which the compiler unrolls
// into registers: with runtime bounds they were per-lane scratch memory on llvmpipe.
override WG: u32 = 8u;
// A masked score: exp(MASKED - max) is 0 once a real score has set the running max.
const MASKED: f32 = -3.0e38;
struct Params { heads: u32, kv_heads: u32, block_size: u32, scale: f32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(3) var k_cache: texture_storage_2d<rgba32float, read>;
@group(0) @binding(4) var v_cache: texture_storage_2d<rgba32float, read>;
@group(0) @binding(5) var<storage, read> token_pos: array<u32>;
@group(0) @binding(6) var<storage, read> token_table: array<u32>;
@group(0) @binding(7) var<storage, read> block_table: array<u32>;
@group(0) @binding(8) var<storage, read_write> out: array<vec4<f32>>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let head_groups = p.heads / HQ;
  if (gid.x >= step.n_tokens * head_groups) { return; }
  let m = gid.x / head_groups;
  let h0 = (gid.x % head_groups) * HQ;
  let kv_row = (h0 / (p.heads / p.kv_heads)) * D4;
  let pos = token_pos[m];
  let table = token_table[m];

  var qs: array<array<vec4<f32>, D4>, HQ>;  // q * scale
  var acc: array<array<vec4<f32>, D4>, HQ>;
  var run_max: array<f32, HQ>;
  var run_sum: array<f32, HQ>;
  for (var r = 0u; r < HQ; r++) {
    for (var d = 0u; d < D4; d++) {
      qs[r][d] = q[(m * p.heads + h0 + r) * D4 + d] * p.scale;
      acc[r][d] = vec4<f32>(0.0);
    }
    run_max[r] = MASKED;
  }
  for (var j = 0u; j <= pos; j++) {
    let base = kv_slot(table, j) * p.kv_heads * D4 + kv_row;
    var s4: array<vec4<f32>, HQ>;
    for (var d = 0u; d < D4; d++) {
      let k = textureLoad(k_cache, kv_texel(base + d));
      for (var r = 0u; r < HQ; r++) { s4[r] += qs[r][d] * k; }
    }
    var correction: array<f32, HQ>;
    var w: array<f32, HQ>;
    for (var r = 0u; r < HQ; r++) {
      let s = s4[r].x + s4[r].y + s4[r].z + s4[r].w;
      let new_max = max(run_max[r], s);
      correction[r] = exp(run_max[r] - new_max);
      w[r] = exp(s - new_max);
      run_sum[r] = run_sum[r] * correction[r] + w[r];
      run_max[r] = new_max;
    }
    for (var d = 0u; d < D4; d++) {
      let v = textureLoad(v_cache, kv_texel(base + d));
      for (var r = 0u; r < HQ; r++) { acc[r][d] = acc[r][d] * correction[r] + w[r] * v; }
    }
  }
  for (var r = 0u; r < HQ; r++) {
    for (var d = 0u; d < D4; d++) { out[(m * p.heads + h0 + r) * D4 + d] = acc[r][d] / run_sum[r]; }
  }
}
