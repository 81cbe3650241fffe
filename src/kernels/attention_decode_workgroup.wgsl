// Attention of a step's decode tokens over their own sequence's cached keys and values
// (positions first_key(pos)..=pos, attention_io.wgsl), grouped-query: query head h reads
// KV head h / (heads / kv_heads).
// The layout for GPUs: Ops.attention records it for steps of decode tokens only where the
// adapter is not a CPU; attention.wgsl serves CPUs, and steps with a prefill chunk
// everywhere.
// Bindings and params: attention_io.wgsl (D4 = head_dim / 4).
// Plan: flash decoding inside one workgroup per (token, query head). The WG invocations
// walk the positions a tile of WG at a time: invocation i scores position t0 + i against q
// (scaled, in workgroup memory), the tile's max and its weights under the running max go
// through workgroup memory, and every invocation then adds the whole tile's weighted values
// into the output vectors it owns (vec4 d = lid, lid + WG, ...).
// Why: one key row is read by one invocation and one value row by all of them, each its
// own texels, and one tile of workgroup memory serves any context length. Its barriers are
// slow on llvmpipe, so there only the kernel tests run it, telling Ops the adapter is a
// GPU.
#include "common"
#include "attention_io"
const WG: u32 = 32u;
// Output vectors per invocation.
const PER: u32 = (D4 + WG - 1u) / WG;

var<workgroup> q_scaled: array<vec4<f32>, D4>;
var<workgroup> scores: array<f32, WG>;
var<workgroup> weights: array<f32, WG>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let m = wid.x / p.heads;
  if (m >= step.n_tokens) { return; }
  let h = wid.x % p.heads;
  let pos = token_pos[m];
  let seq = kv_seq(m);
  let kv_row = (h / (p.heads / p.kv_heads)) * D4;
  let row = (m * p.heads + h) * D4;
  for (var d = lid; d < D4; d += WG) { q_scaled[d] = q[row + d] * p.scale; }
  workgroupBarrier();

  var acc: array<vec4<f32>, PER>;
  let start = softmax_start(h);
  var run_max = start.x;
  var run_sum = start.y;
  for (var t0 = first_key(pos); t0 <= pos; t0 += WG) {
    var s = MASKED;
    if (t0 + lid <= pos) {
      let base = kv_base(seq, t0 + lid, kv_row);
      var s4 = vec4<f32>(0.0);
      for (var d = 0u; d < D4; d++) { s4 += q_scaled[d] * cached_k(base + d); }
      s = softcap(s4.x + s4.y + s4.z + s4.w, p.softcap);
    }
    scores[lid] = s;
    workgroupBarrier();
    // Position t0 is in the tile, so the tile's max is a real score (or the sink).
    var new_max = run_max;
    for (var i = 0u; i < WG; i++) { new_max = max(new_max, scores[i]); }
    weights[lid] = exp(s - new_max);
    workgroupBarrier();
    let correction = exp(run_max - new_max);
    run_sum *= correction;
    for (var e = 0u; e < PER; e++) { acc[e] *= correction; }
    for (var i = 0u; i < min(WG, pos + 1u - t0); i++) {
      let w = weights[i];
      run_sum += w;
      let base = kv_base(seq, t0 + i, kv_row);
      for (var e = 0u; e < PER; e++) {
        let d = lid + e * WG;
        if (d < D4) { acc[e] += w * cached_v(base + d); }
      }
    }
    run_max = new_max;
    // The next tile overwrites scores and weights.
    workgroupBarrier();
  }
  for (var e = 0u; e < PER; e++) {
    let d = lid + e * WG;
    if (d < D4) { out[row + d] = acc[e] / run_sum; }
  }
}
