// A mixture-of-experts block's routing. Per token t, the top K of its E router logits
// (ties to the lower expert) and their weights: ROUTING_SOFTMAX_TOPK, the softmax over all E
// at the chosen experts (divided by their sum with renormalize); ROUTING_TOPK_SOFTMAX, the
// softmax over the K chosen logits. Then the token-expert pairs, slots s = t * K + j, grouped
// by expert for moe_matmul.wgsl: expert e's count, where its slots start in the order, and
// the order listing the slots expert by expert (each expert's in token order).
// Bindings: 0 params, 1 step, 2 logits [T, E] f32, 3 ranges [2E] u32 (counts, then starts),
// 4 slots [T * K, 2] u32 (slots[2i]: the order's i-th slot, slots[2s + 1]: slot s's expert),
// 5 weights [T * K] f32.
// Plan: one workgroup of WG invocations. Invocation i routes tokens i, i + WG, ...; after a
// barrier it counts experts i, i + WG, ...; invocation 0 sums the counts into starts; then
// each invocation lists its experts' slots.
// Why: grouping needs every token's choice, which one workgroup can wait for with barriers:
// no atomics, no second dispatch, a deterministic order. Its T * K * E / WG comparisons are
// small beside the expert projections it spares.
#include "common"
struct Params { experts: u32, top_k: u32, routing: u32, renormalize: u32 }
// How the weights come from the logits (Params.routing); the host reads these codes.
const ROUTING_SOFTMAX_TOPK: u32 = 0u;
const ROUTING_TOPK_SOFTMAX: u32 = 1u;
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> logits: array<f32>;
@group(0) @binding(3) var<storage, read_write> ranges: array<u32>;
@group(0) @binding(4) var<storage, read_write> slots: array<u32>;
@group(0) @binding(5) var<storage, read_write> weights: array<f32>;
const WG: u32 = 64u;

fn route(t: u32) {
  let base = t * p.experts;
  var mx = logits[base];
  for (var e = 1u; e < p.experts; e++) { mx = max(mx, logits[base + e]); }
  var total = 0.0;
  for (var e = 0u; e < p.experts; e++) { total += exp(logits[base + e] - mx); }
  // Descending order: each pick is the largest logit ranked after the previous pick (a lower
  // value, or an equal one at a higher expert).
  var prev_v = 0.0;
  var prev_e = 0u;
  var top = 0.0;
  var sum = 0.0;
  for (var j = 0u; j < p.top_k; j++) {
    var best_v = 0.0;
    var best_e = p.experts;
    for (var e = 0u; e < p.experts; e++) {
      let v = logits[base + e];
      let after = j == 0u || v < prev_v || (v == prev_v && e > prev_e);
      if (after && (best_e == p.experts || v > best_v)) {
        best_v = v;
        best_e = e;
      }
    }
    if (j == 0u) { top = best_v; }
    prev_v = best_v;
    prev_e = best_e;
    var w = exp(best_v - mx) / total;
    if (p.routing == ROUTING_TOPK_SOFTMAX) { w = exp(best_v - top); }
    let s = t * p.top_k + j;
    slots[2u * s + 1u] = best_e;
    weights[s] = w;
    sum += w;
  }
  if (p.routing == ROUTING_TOPK_SOFTMAX || p.renormalize != 0u) {
    for (var j = 0u; j < p.top_k; j++) { weights[t * p.top_k + j] /= sum; }
  }
}

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) i: u32) {
  for (var t = i; t < step.n_tokens; t += WG) { route(t); }
  storageBarrier();
  let n = step.n_tokens * p.top_k;
  for (var e = i; e < p.experts; e += WG) {
    var c = 0u;
    for (var s = 0u; s < n; s++) { c += select(0u, 1u, slots[2u * s + 1u] == e); }
    ranges[e] = c;
  }
  storageBarrier();
  if (i == 0u) {
    var at = 0u;
    for (var e = 0u; e < p.experts; e++) {
      ranges[p.experts + e] = at;
      at += ranges[e];
    }
  }
  storageBarrier();
  for (var e = i; e < p.experts; e += WG) {
    var at = ranges[p.experts + e];
    for (var s = 0u; s < n; s++) {
      if (slots[2u * s + 1u] == e) {
        slots[2u * at] = s;
        at++;
      }
    }
  }
}
