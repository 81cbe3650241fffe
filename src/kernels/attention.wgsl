// Causal attention of each token over its own sequence's cached keys/values (positions
// first_key(pos)..=pos: all of them, or a sliding window; attention_io.wgsl),
// grouped-query: query head h reads KV head h / (heads / kv_heads). GPUs run
// their decode steps through attention_decode_workgroup.wgsl instead (Ops.attention).
// Bindings and params: attention_io.wgsl (D4 = head_dim / 4); the runtime sets TQ and HQ.
// Plan: one invocation per group of ROWS = TQ x HQ query rows that read the same keys and
// values (decode steps: TQ = 1 and HQ heads of the token; steps with a prefill chunk: TQ = 3
// tokens of one head), with an online softmax (running max and sum) in registers, so any
// context length works without a scores buffer. If the group's tokens share a sequence,
// each key and value row is loaded once for all its rows (later keys masked per token);
// else each row runs alone. Workgroups of WG invocations (8, one llvmpipe SIMD group;
// 8 / HQ for decode) give a lone decode token's heads at least two workgroups.
// Why: on llvmpipe a load at a per-invocation address costs per lane, so sharing loads pays,
// and splitting a token's positions among a workgroup (flash decoding) would not; q and the
// accumulators are arrays indexed only by constant-trip loops, which unroll into registers
// (a runtime-indexed array is per-lane scratch memory).
#include "common"
#include "attention_io"
#const TQ: u32
#const HQ: u32
const ROWS: u32 = TQ * HQ;
override WG: u32 = 8u;

// One token alone (decode, or a group spanning sequences).
fn attend_one(m: u32, h: u32, kv_row: u32) {
  let qo = (m * p.heads + h) * D4;
  let pos = token_pos[m];
  let seq = kv_seq(m);
  var qs: array<vec4<f32>, D4>;  // q * scale
  var acc: array<vec4<f32>, D4>;
  for (var d = 0u; d < D4; d++) {
    qs[d] = q[qo + d] * p.scale;
    acc[d] = vec4<f32>(0.0);
  }
  let start = softmax_start(h);
  var run_max = start.x;
  var run_sum = start.y;
  for (var j = first_key(pos); j <= pos; j++) {
    let base = kv_base(seq, j, kv_row);
    var s4 = vec4<f32>(0.0);
    for (var d = 0u; d < D4; d++) { s4 += qs[d] * cached_k(base + d); }
    let s = softcap(s4.x + s4.y + s4.z + s4.w, p.softcap);
    let new_max = max(run_max, s);
    let correction = exp(run_max - new_max);
    let w = exp(s - new_max);
    run_sum = run_sum * correction + w;
    for (var d = 0u; d < D4; d++) { acc[d] = acc[d] * correction + w * cached_v(base + d); }
    run_max = new_max;
  }
  for (var d = 0u; d < D4; d++) { out[qo + d] = acc[d] / run_sum; }
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let M = step.n_tokens;
  let head_groups = p.heads / HQ;
  if (gid.x >= ((M + TQ - 1u) / TQ) * head_groups) { return; }
  let h0 = (gid.x % head_groups) * HQ;
  let m0 = (gid.x / head_groups) * TQ;
  let n = min(TQ, M - m0);  // tokens of this group
  let kv_row = (h0 / (p.heads / p.kv_heads)) * D4;
  let table = token_table[m0];
  let seq = kv_seq(m0);
  var one_seq = true;
  for (var t = 1u; t < TQ; t++) {
    if (t < n && token_table[m0 + t] != table) { one_seq = false; }
  }
  if (!one_seq || ROWS == 1u) {
    for (var t = 0u; t < n; t++) {
      for (var i = 0u; i < HQ; i++) { attend_one(m0 + t, h0 + i, kv_row); }
    }
    return;
  }

  // Row r is token m0 + r / HQ, head h0 + r % HQ. Tokens past n repeat the group's last
  // token and are not written.
  var pos: array<u32, ROWS>;
  var first: array<u32, ROWS>;
  var qs: array<array<vec4<f32>, D4>, ROWS>;
  var acc: array<array<vec4<f32>, D4>, ROWS>;
  var run_max: array<f32, ROWS>;
  var run_sum: array<f32, ROWS>;
  var last = 0u;
  var lo = 0xffffffffu;
  for (var r = 0u; r < ROWS; r++) {
    let m = m0 + min(r / HQ, n - 1u);
    pos[r] = token_pos[m];
    first[r] = first_key(pos[r]);
    lo = min(lo, first[r]);
    last = max(last, pos[r]);
    for (var d = 0u; d < D4; d++) {
      qs[r][d] = q[(m * p.heads + h0 + r % HQ) * D4 + d] * p.scale;
      acc[r][d] = vec4<f32>(0.0);
    }
    let start = softmax_start(h0 + r % HQ);
    run_max[r] = start.x;
    run_sum[r] = start.y;
  }
  for (var j = lo; j <= last; j++) {
    let base = kv_base(seq, j, kv_row);
    var s4: array<vec4<f32>, ROWS>;
    for (var d = 0u; d < D4; d++) {
      let k = cached_k(base + d);
      for (var r = 0u; r < ROWS; r++) { s4[r] += qs[r][d] * k; }
    }
    var correction: array<f32, ROWS>;
    var w: array<f32, ROWS>;
    for (var r = 0u; r < ROWS; r++) {
      let s = select(MASKED, softcap(s4[r].x + s4[r].y + s4[r].z + s4[r].w, p.softcap), j <= pos[r] && j >= first[r]);
      let new_max = max(run_max[r], s);
      correction[r] = exp(run_max[r] - new_max);
      w[r] = exp(s - new_max);
      run_sum[r] = run_sum[r] * correction[r] + w[r];
      run_max[r] = new_max;
    }
    for (var d = 0u; d < D4; d++) {
      let v = cached_v(base + d);
      for (var r = 0u; r < ROWS; r++) { acc[r][d] = acc[r][d] * correction[r] + w[r] * v; }
    }
  }
  for (var r = 0u; r < ROWS; r++) {
    if (r / HQ >= n) { break; }
    let qo = ((m0 + r / HQ) * p.heads + h0 + r % HQ) * D4;
    for (var d = 0u; d < D4; d++) { out[qo + d] = acc[r][d] / run_sum[r]; }
  }
}
