// Picks one token per sequence from its logits row on the GPU, so only the id (and any
// requested logprobs) is read back. Penalties and DRY were already applied to the row by
// logit_bias.wgsl. The chain, in llama.cpp's order:
//   grammar mask -> top-k -> top-p -> min-p -> p-less -> temperature -> XTC -> draw
// temperature <= 0 is greedy: the argmax of the masked row (lowest id on ties).
// Every truncation keeps the tokens whose logit is at least some threshold (probabilities
// are monotonic in the logit at any temperature), so the kept set is [lo, hi] on the logit
// axis: top-k and top-p thresholds are found by bisection (one pass per probe) instead of
// sorting 150k logits; ties at a threshold are all kept. XTC lowers `hi`. The bisection
// runs over the order-preserving u32 image of the floats, so 32 probes pin the exact
// threshold whatever the range (a penalised logit can sit at -1e30).
// Logprobs are of the masked, penalised distribution at temperature 1 before truncation
// (what OpenAI reports): the chosen token's, then the top ones'. With post_sampling they
// are of the distribution the token was drawn from instead (llama-server's
// post_sampling_probs): the kept tokens at the request's temperature, renormalised. A
// greedy pick has probability 1, and its top tokens are what top-k, top-p and min-p keep
// (at temperature 1), the argmax first and the rest at probability 0, as llama.cpp's chain
// reports them: its temperature stage comes after them and keeps only the argmax.
// Bindings: 0 params, 1 step, 2 logits [S, vocab], 3 per-sequence params [S],
// 4 out ids [S], 5 grammar masks [S, mask_words] (bit i%32 of word i/32 = token i allowed),
// 6 logprobs out [S, 2 * (1 + MAX_TOP)] as (id, logprob) pairs, ended early by id 0xffffffff
// when fewer tokens are candidates than were asked for.
// Plan: one workgroup of 256 per sequence; reductions through workgroup memory. Once top-k
// leaves at most CAP candidates (the usual case: k is tens), they are compacted in id order
// into workgroup memory and every later stage scans that short list instead of the whole
// vocabulary: the top-p bisection alone is 32 passes with an exp per token.
#include "common"
const WG: u32 = 256u;
const BISECT_STEPS: u32 = 32u;
override MAX_TOP: u32;
const CAP: u32 = 1024u;
const NONE: u32 = 0xffffffffu;
// neg_inf is -inf from the host: WGSL has no way to spell it as a constant.
struct Params { vocab: u32, mask_words: u32, neg_inf: f32 }
struct SeqParams {
  temperature: f32,
  top_k: u32,
  top_p: f32,
  u: f32,              // uniform draw for the final pick
  min_p: f32,
  p_less: u32,
  xtc_threshold: f32,  // 0: XTC not applied at this step (the host draws its probability)
  masked: u32,
  logprobs: u32,       // 0: none; else 1 + number of top logprobs
  post_sampling: u32,  // 1: logprobs of the drawn-from distribution
  _pad1: u32, _pad2: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> logits: array<f32>;
@group(0) @binding(3) var<storage, read> seqs: array<SeqParams>;
@group(0) @binding(4) var<storage, read_write> out: array<u32>;
@group(0) @binding(5) var<storage, read> masks: array<u32>;
@group(0) @binding(6) var<storage, read_write> logprobs: array<u32>;

var<workgroup> red_f: array<f32, WG>;
var<workgroup> red_u: array<u32, WG>;
var<workgroup> pick: u32;
var<workgroup> bound: f32;
var<workgroup> cand_l: array<f32, CAP>;
var<workgroup> cand_i: array<u32, CAP>;

var<private> base: u32;
var<private> mask_base: u32;
var<private> masked: bool;
// The items the truncation stages scan: the whole row, or the compacted candidates.
var<private> compact: bool;
var<private> n_items: u32;

// A masked token reads as -inf; every other value, -FLT_MAX included, is a candidate.
fn logit(i: u32) -> f32 {
  if (masked && (masks[mask_base + i / 32u] & (1u << (i % 32u))) == 0u) { return p.neg_inf; }
  return logits[base + i];
}

fn item_logit(j: u32) -> f32 {
  if (compact) { return cand_l[j]; }
  return logit(j);
}

// A branch, not select(): select reads both operands, and cand_i[j] for a vocabulary index
// is out of bounds (robustness is off: it would read past workgroup memory).
fn item_id(j: u32) -> u32 {
  if (compact) { return cand_i[j]; }
  return j;
}

fn is_candidate(l: f32) -> bool {
  return l > p.neg_inf;
}

// Order-preserving map between f32 and u32 (negative floats reversed below positives).
fn key(f: f32) -> u32 {
  let b = bitcast<u32>(f);
  return select(b | 0x80000000u, ~b, (b & 0x80000000u) != 0u);
}

fn unkey(k: u32) -> f32 {
  return bitcast<f32>(select(~k, k & 0x7fffffffu, (k & 0x80000000u) != 0u));
}

fn reduce_sum(v: f32, lid: u32) -> f32 {
  workgroupBarrier();  // everyone has read the previous result
  red_f[lid] = v;
  workgroupBarrier();
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    if (lid < s) { red_f[lid] += red_f[lid + s]; }
    workgroupBarrier();
  }
  return workgroupUniformLoad(&red_f[0]);
}

fn reduce_min(v: f32, lid: u32) -> f32 {
  workgroupBarrier();  // everyone has read the previous result
  red_f[lid] = v;
  workgroupBarrier();
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    if (lid < s) { red_f[lid] = min(red_f[lid], red_f[lid + s]); }
    workgroupBarrier();
  }
  return workgroupUniformLoad(&red_f[0]);
}

// The best token with lo <= logit <= hi that comes after (prev_l, prev_id) in the order
// "higher logit first, then lower id": with prev = (+inf, 0) it is the argmax in the
// range; chained, it walks the top tokens. 0xffffffff when none is left.
fn reduce_best(lo: f32, hi: f32, prev_l: f32, prev_id: u32, lid: u32) -> u32 {
  var best = 0.0;
  var best_i = NONE;
  workgroupBarrier();
  for (var i = lid; i < p.vocab; i += WG) {
    let l = logit(i);
    let after = l < prev_l || (l == prev_l && i > prev_id);
    if (is_candidate(l) && l >= lo && l <= hi && after && (l > best || best_i == NONE)) { best = l; best_i = i; }
  }
  red_f[lid] = best;
  red_u[lid] = best_i;
  workgroupBarrier();
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    if (lid < s) {
      let a = red_f[lid];
      let b = red_f[lid + s];
      let bi = red_u[lid + s];
      if (bi != NONE && (red_u[lid] == NONE || b > a || (b == a && bi < red_u[lid]))) {
        red_f[lid] = b;
        red_u[lid] = bi;
      }
    }
    workgroupBarrier();
  }
  return workgroupUniformLoad(&red_u[0]);
}

// Unnormalised mass at inverse temperature inv_t of the tokens with lo <= logit <= hi.
fn mass(lo: f32, hi: f32, mx: f32, inv_t: f32, lid: u32) -> f32 {
  var s = 0.0;
  for (var i = lid; i < n_items; i += WG) {
    let l = item_logit(i);
    if (l >= lo && l <= hi) { s += exp((l - mx) * inv_t); }
  }
  return reduce_sum(s, lid);
}

fn count_at_least(t: f32, lid: u32) -> u32 {
  var c = 0u;
  for (var i = lid; i < n_items; i += WG) { c += select(0u, 1u, item_logit(i) >= t); }
  // Counts stay far below 2^24, so the f32 sum is exact.
  return u32(reduce_sum(f32(c), lid));
}

// The k-th largest (k <= WG) of the invocations' maxima over their strided tokens: k real
// logits are at least this large, so the k-th largest logit is too.
fn kth_local_max(k: u32, lid: u32) -> f32 {
  var m = p.neg_inf;
  for (var i = lid; i < p.vocab; i += WG) { m = max(m, logit(i)); }
  workgroupBarrier();
  red_f[lid] = m;
  workgroupBarrier();
  // Rank by (value descending, invocation ascending): exactly one invocation has rank k-1.
  var rank = 0u;
  for (var j = 0u; j < WG; j++) {
    let v = red_f[j];
    rank += select(0u, 1u, v > m || (v == m && j < lid));
  }
  if (rank == k - 1u) { bound = m; }
  return workgroupUniformLoad(&bound);
}

// Copies the n tokens with logit >= lo into cand_l/cand_i, in id order: each invocation
// owns a contiguous id range and writes at the prefix sum of the counts before it.
fn compact_from(lo: f32, n: u32, lid: u32) {
  let chunk = (p.vocab + WG - 1u) / WG;
  let start = min(lid * chunk, p.vocab);
  let end = min(start + chunk, p.vocab);
  var own = 0u;
  for (var i = start; i < end; i++) { own += select(0u, 1u, logit(i) >= lo); }
  workgroupBarrier();
  red_u[lid] = own;
  workgroupBarrier();
  var at = 0u;
  for (var j = 0u; j < lid; j++) { at += red_u[j]; }
  for (var i = start; i < end; i++) {
    let l = logit(i);
    if (l >= lo) {
      cand_l[at] = l;
      cand_i[at] = i;
      at++;
    }
  }
  workgroupBarrier();
  compact = true;
  n_items = n;
}

// A kept token's logprob in the distribution it was drawn from: for a greedy pick 0 (the
// argmax) or -inf (every other candidate).
fn post_logprob(id: u32, greedy: bool, chosen: u32, mx: f32, inv_t: f32, log_kept: f32) -> f32 {
  if (greedy) { return select(p.neg_inf, 0.0, id == chosen); }
  return (logit(id) - mx) * inv_t - log_kept;
}

fn write_logprob(seq: u32, slot: u32, id: u32, lp: f32) {
  let o = seq * 2u * (1u + MAX_TOP) + slot * 2u;
  logprobs[o] = id;
  logprobs[o + 1u] = bitcast<u32>(lp);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid3: vec3<u32>) {
  let seq = wid.x;
  let lid = lid3.x;
  if (seq >= step.n_seqs) { return; }
  let sp = seqs[seq];
  base = seq * p.vocab;
  mask_base = seq * p.mask_words;
  masked = sp.masked != 0u;
  compact = false;
  n_items = p.vocab;

  let argmax = reduce_best(p.neg_inf, 3.4e38, 3.4e38, 0u, lid);
  if (argmax == NONE) {
    // Nothing is a candidate (every logit -inf): the lowest id, as for ties.
    if (lid == 0u) {
      out[seq] = 0u;
      if (sp.logprobs > 0u) {
        write_logprob(seq, 0u, 0u, p.neg_inf);
        write_logprob(seq, 1u, NONE, 0.0);
      }
    }
    return;
  }
  // logit() reads private state, which uniformity analysis cannot trust: share the max
  // through workgroup memory so later branches around barriers stay uniform.
  let mx = reduce_min(select(3.4e38, logit(argmax), lid == 0u), lid);

  var chosen = argmax;
  // The drawn-from distribution, for post-sampling logprobs: logits in [kept_lo, kept_hi]
  // at inverse temperature kept_inv_t, of unnormalised mass kept_mass relative to mx.
  var kept_lo = mx;
  var kept_hi = mx;
  var kept_inv_t = 0.0;
  var kept_mass = 1.0;
  let greedy = sp.temperature <= 0.0;
  // A greedy pick skips the truncation stages unless its post-sampling candidates are asked for.
  if (!greedy || (sp.logprobs > 0u && sp.post_sampling != 0u)) {
    // Smallest finite logit: the lower end for the bisections.
    var mn = 3.4e38;
    for (var i = lid; i < p.vocab; i += WG) {
      let l = logit(i);
      if (is_candidate(l)) { mn = min(mn, l); }
    }
    var lo = reduce_min(mn, lid);
    let hi_all = mx;

    // Each search keeps the largest threshold key a in [key(lo), key(mx)] that passes.
    if (sp.top_k > 0u && sp.top_k < p.vocab) {
      // Narrow first: the k-th largest of the invocations' local maxima is a lower bound
      // for the k-th largest logit, and usually few tokens reach it. Compact those, and the
      // exact search below scans the short list instead of the vocabulary 32 times.
      // A local copy of `compact`: uniformity analysis cannot see through private state.
      var compacted = false;
      if (sp.top_k <= WG) {
        let lb = kth_local_max(sp.top_k, lid);
        let n = count_at_least(lb, lid);
        if (n <= CAP) {
          compact_from(lb, n, lid);
          compacted = true;
        }
      }
      var a = key(lo);
      var b = key(mx);
      for (var it = 0u; it < BISECT_STEPS && a < b; it++) {
        let mid = a + (b - a + 1u) / 2u;
        if (count_at_least(unkey(mid), lid) >= sp.top_k) { a = mid; } else { b = mid - 1u; }
      }
      lo = unkey(a);
      if (!compacted) {
        let kept_n = count_at_least(lo, lid);
        if (kept_n <= CAP) { compact_from(lo, kept_n, lid); }
      }
    }
    if (sp.top_p < 1.0) {
      let want = sp.top_p * mass(lo, hi_all, mx, 1.0, lid);
      var a = key(lo);
      var b = key(mx);
      for (var it = 0u; it < BISECT_STEPS && a < b; it++) {
        let mid = a + (b - a + 1u) / 2u;
        if (mass(unkey(mid), hi_all, mx, 1.0, lid) >= want) { a = mid; } else { b = mid - 1u; }
      }
      lo = unkey(a);
    }
    if (sp.min_p > 0.0) { lo = max(lo, mx + log(sp.min_p)); }
    kept_lo = lo;
    if (!greedy) {
      let inv_t = 1.0 / sp.temperature;
      if (sp.p_less != 0u) {
        // Keep P_i >= sum_j P_j^2 under the temperature-scaled kept distribution:
        // exp((l - mx) / T) >= S2 * Z  <=>  l >= mx + T * ln(S2 * Z).
        let z = mass(lo, hi_all, mx, inv_t, lid);
        var s2 = 0.0;
        for (var i = lid; i < n_items; i += WG) {
          let l = item_logit(i);
          if (l >= lo) { let e = exp((l - mx) * inv_t); s2 += e * e; }
        }
        let sum_sq = reduce_sum(s2, lid) / (z * z);
        lo = max(lo, min(mx, mx + sp.temperature * log(sum_sq * z)));
      }
      var hi = hi_all;
      if (sp.xtc_threshold > 0.0) {
        // Tokens at or above the threshold probability; if two or more, drop all but the
        // least likely of them.
        let z = mass(lo, hi_all, mx, inv_t, lid);
        let t_xtc = max(lo, mx + sp.temperature * log(sp.xtc_threshold * z));
        if (count_at_least(t_xtc, lid) >= 2u) {
          var m = 3.4e38;
          for (var i = lid; i < n_items; i += WG) {
            let l = item_logit(i);
            if (l >= t_xtc) { m = min(m, l); }
          }
          hi = reduce_min(m, lid);
        }
      }

      // Inverse CDF in token-id order over [lo, hi]: each invocation owns a contiguous chunk.
      let kept = mass(lo, hi, mx, inv_t, lid);
      kept_lo = lo;
      kept_hi = hi;
      kept_inv_t = inv_t;
      kept_mass = kept;
      let chunk = (n_items + WG - 1u) / WG;
      let start = min(lid * chunk, n_items);
      let end = min(start + chunk, n_items);
      var own = 0.0;
      for (var i = start; i < end; i++) {
        let l = item_logit(i);
        if (l >= lo && l <= hi) { own += exp((l - mx) * inv_t); }
      }
      workgroupBarrier();
      red_f[lid] = own;
      if (lid == 0u) { pick = NONE; }
      workgroupBarrier();
      var before = 0.0;
      for (var j = 0u; j < lid; j++) { before += red_f[j]; }
      let goal = sp.u * kept;
      if (own > 0.0 && goal >= before && goal < before + own) {
        var acc = before;
        var last = item_id(start);
        for (var i = start; i < end; i++) {
          let l = item_logit(i);
          if (l >= lo && l <= hi) {
            last = item_id(i);
            acc += exp((l - mx) * inv_t);
            if (acc > goal) { break; }
          }
        }
        pick = last;
      }
      let picked = workgroupUniformLoad(&pick);
      // Rounding can leave the goal past the last chunk: fall back to the most likely kept token.
      chosen = select(picked, reduce_best(lo, hi, 3.4e38, 0u, lid), picked == NONE);
    }
  }
  if (lid == 0u) { out[seq] = chosen; }

  if (sp.logprobs > 0u && sp.post_sampling != 0u) {
    compact = false;
    n_items = p.vocab;
    let log_kept = log(kept_mass);
    if (lid == 0u) { write_logprob(seq, 0u, chosen, post_logprob(chosen, greedy, chosen, mx, kept_inv_t, log_kept)); }
    var prev_l = 3.4e38;
    var prev_id = 0u;
    for (var k = 1u; k < min(sp.logprobs, 1u + MAX_TOP); k++) {
      let id = reduce_best(kept_lo, kept_hi, prev_l, prev_id, lid);
      if (id == NONE) {
        // Fewer kept tokens than asked for: mark the end for the host.
        if (lid == 0u) { write_logprob(seq, k, NONE, 0.0); }
        break;
      }
      prev_l = logit(id);
      prev_id = id;
      if (lid == 0u) { write_logprob(seq, k, id, post_logprob(id, greedy, chosen, mx, kept_inv_t, log_kept)); }
    }
  } else if (sp.logprobs > 0u) {
    // Logprobs are over the whole row, not the truncated candidates.
    compact = false;
    n_items = p.vocab;
    let log_z = log(mass(-3.40282346e38, 3.4e38, mx, 1.0, lid)) + mx;
    if (lid == 0u) { write_logprob(seq, 0u, chosen, logit(chosen) - log_z); }
    var prev_l = 3.4e38;
    var prev_id = 0u;
    for (var k = 1u; k < min(sp.logprobs, 1u + MAX_TOP); k++) {
      let id = reduce_best(p.neg_inf, 3.4e38, prev_l, prev_id, lid);
      if (id == NONE) {
        // Fewer candidates than asked for: mark the end for the host.
        if (lid == 0u) { write_logprob(seq, k, NONE, 0.0); }
        break;
      }
      prev_l = logit(id);
      prev_id = id;
      if (lid == 0u) { write_logprob(seq, k, id, prev_l - log_z); }
    }
  }
}
