// Picks one token per sequence from its logits row, on the GPU, so only the id is read
// back. temperature <= 0: argmax (lowest id on ties). Otherwise softmax(logits / T)
// truncated by top-k then top-p, and an inverse-CDF draw with the host's uniform u (each
// request owns a seeded RNG stream on the host, so results do not depend on batching).
// Bindings: 0 params, 1 step, 2 logits [S, vocab], 3 per-sequence params [S], 4 out ids [S].
// Plan: one workgroup per sequence. Top-k and top-p thresholds are found by bisection
// on the logit value (each probe is one pass counting/summing the tokens above it), which
// avoids sorting 150k logits; ties at a threshold are all kept.
const WG: u32 = 256u;
const BISECT_STEPS: u32 = 32u;
struct Params { vocab: u32 }
struct SeqParams { temperature: f32, top_k: u32, top_p: f32, u: f32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> logits: array<f32>;
@group(0) @binding(3) var<storage, read> seqs: array<SeqParams>;
@group(0) @binding(4) var<storage, read_write> out: array<u32>;

var<workgroup> red_f: array<f32, WG>;
var<workgroup> red_u: array<u32, WG>;
var<workgroup> pick: u32;

fn sum_all(v: f32, lid: u32) -> f32 {
  red_f[lid] = v;
  workgroupBarrier();
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    if (lid < s) { red_f[lid] += red_f[lid + s]; }
    workgroupBarrier();
  }
  let r = red_f[0];
  workgroupBarrier();
  return r;
}

fn min_all(v: f32, lid: u32) -> f32 {
  red_f[lid] = v;
  workgroupBarrier();
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    if (lid < s) { red_f[lid] = min(red_f[lid], red_f[lid + s]); }
    workgroupBarrier();
  }
  let r = red_f[0];
  workgroupBarrier();
  return r;
}

fn count_all(v: u32, lid: u32) -> u32 {
  red_u[lid] = v;
  workgroupBarrier();
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    if (lid < s) { red_u[lid] += red_u[lid + s]; }
    workgroupBarrier();
  }
  let r = red_u[0];
  workgroupBarrier();
  return r;
}

// Probability mass (unnormalised) of the tokens whose logit is >= t.
fn mass_above(base: u32, t: f32, mx: f32, inv_t: f32, lid: u32) -> f32 {
  var s = 0.0;
  for (var i = lid; i < p.vocab; i += WG) {
    let l = logits[base + i];
    if (l >= t) { s += exp((l - mx) * inv_t); }
  }
  return sum_all(s, lid);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid3: vec3<u32>) {
  let seq = wid.x;
  let lid = lid3.x;
  if (seq >= step.n_seqs) { return; }
  let sp = seqs[seq];
  let base = seq * p.vocab;

  // Argmax and minimum.
  var best = -3.4e38;
  var best_i = 0u;
  var lo = 3.4e38;
  for (var i = lid; i < p.vocab; i += WG) {
    let l = logits[base + i];
    if (l > best) { best = l; best_i = i; }
    lo = min(lo, l);
  }
  red_f[lid] = best;
  red_u[lid] = best_i;
  workgroupBarrier();
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    if (lid < s) {
      let a = red_f[lid];
      let b = red_f[lid + s];
      if (b > a || (b == a && red_u[lid + s] < red_u[lid])) { red_f[lid] = b; red_u[lid] = red_u[lid + s]; }
    }
    workgroupBarrier();
  }
  let mx = red_f[0];
  let argmax = red_u[0];
  workgroupBarrier();
  if (sp.temperature <= 0.0) {
    if (lid == 0u) { out[seq] = argmax; }
    return;
  }
  lo = min_all(lo, lid);
  let inv_t = 1.0 / sp.temperature;

  // Top-k: the largest threshold that still keeps at least k tokens.
  var t = lo;
  if (sp.top_k > 0u && sp.top_k < p.vocab) {
    var a = lo;
    var b = mx;
    for (var it = 0u; it < BISECT_STEPS; it++) {
      let mid = a + (b - a) * 0.5;
      var c = 0u;
      for (var i = lid; i < p.vocab; i += WG) { c += select(0u, 1u, logits[base + i] >= mid); }
      if (count_all(c, lid) >= sp.top_k) { a = mid; } else { b = mid; }
    }
    t = a;
  }
  var kept = mass_above(base, t, mx, inv_t, lid);

  // Top-p: the largest threshold whose kept mass is still >= top_p of the top-k mass.
  if (sp.top_p < 1.0) {
    let want = sp.top_p * kept;
    var a = t;
    var b = mx;
    for (var it = 0u; it < BISECT_STEPS; it++) {
      let mid = a + (b - a) * 0.5;
      if (mass_above(base, mid, mx, inv_t, lid) >= want) { a = mid; } else { b = mid; }
    }
    t = a;
    kept = mass_above(base, t, mx, inv_t, lid);
  }

  // Inverse CDF in token-id order: each invocation owns a contiguous chunk.
  let chunk = (p.vocab + WG - 1u) / WG;
  let start = lid * chunk;
  let end = min(start + chunk, p.vocab);
  var own = 0.0;
  for (var i = start; i < end; i++) {
    let l = logits[base + i];
    if (l >= t) { own += exp((l - mx) * inv_t); }
  }
  red_f[lid] = own;
  if (lid == 0u) { pick = argmax; }
  workgroupBarrier();
  var before = 0.0;
  for (var j = 0u; j < lid; j++) { before += red_f[j]; }
  let goal = sp.u * kept;
  if (goal >= before && goal < before + own) {
    var acc = before;
    var chosen = end;
    for (var i = start; i < end; i++) {
      let l = logits[base + i];
      if (l >= t) {
        chosen = i;
        acc += exp((l - mx) * inv_t);
        if (acc > goal) { break; }
      }
    }
    pick = chosen;
  }
  workgroupBarrier();
  if (lid == 0u) { out[seq] = pick; }
}
