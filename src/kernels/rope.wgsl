// Rotary position embedding of q and k, in place, HF "rotate_half" pairing (i, i +
// head_dim/2) inside each head; with NORM, after a per-head RMSNorm (Qwen3's q_norm /
// k_norm): x <- x / sqrt(mean(x^2) + eps) * weight, rounded as rmsnorm.wgsl rounds it.
// Frequencies come from the host (inv_freq[i]), so every rope_scaling type (default,
// linear, llama3, ...) is a host-side table and this kernel stays one.
// Bindings: 0 params, 1 step, 2 q [M, heads, head_dim] rw, 6 k [M, kv_heads, head_dim] rw,
// 3 token_pos [M], 4 inv_freq [head_dim / 2], 5 and 7 the q and k norm weights [head_dim]
// (read only with NORM; any buffer otherwise).
// Plan: one invocation per (token, head) of q's heads then k's, walking its pairs. q and k
// share one dispatch, and the norm needs the whole head row, so doing it here instead of
// in its own dispatch saves three dispatches per layer: on llvmpipe a dispatch costs
// 30-50 us however little it computes. The branch between q and k is per head, outside
// the arithmetic.
override NORM: bool = false;
struct Params { heads: u32, kv_heads: u32, head_dim: u32, eps: f32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read_write> q: array<f32>;
@group(0) @binding(6) var<storage, read_write> k: array<f32>;
@group(0) @binding(3) var<storage, read> token_pos: array<u32>;
@group(0) @binding(4) var<storage, read> inv_freq: array<f32>;
@group(0) @binding(5) var<storage, read> q_weight: array<f32>;
@group(0) @binding(7) var<storage, read> k_weight: array<f32>;

fn load(is_k: bool, i: u32) -> f32 {
  if (is_k) { return k[i]; }
  return q[i];
}

fn store(is_k: bool, i: u32, v: f32) {
  if (is_k) { k[i] = v; } else { q[i] = v; }
}

fn norm_weight(is_k: bool, i: u32) -> f32 {
  if (is_k) { return k_weight[i]; }
  return q_weight[i];
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let per_token = p.heads + p.kv_heads;
  if (gid.x >= step.n_tokens * per_token) { return; }
  let m = gid.x / per_token;
  let head = gid.x % per_token;
  let is_k = head >= p.heads;
  let base = select(m * p.heads + head, m * p.kv_heads + head - p.heads, is_k) * p.head_dim;
  let half = p.head_dim / 2u;
  var inv = 1.0;
  if (NORM) {
    var ss = 0.0;
    for (var i = 0u; i < p.head_dim; i++) {
      let v = load(is_k, base + i);
      ss += v * v;
    }
    inv = inverseSqrt(ss / f32(p.head_dim) + p.eps);
  }
  let pos = f32(token_pos[m]);
  for (var i = 0u; i < half; i++) {
    var xa = load(is_k, base + i);
    var xb = load(is_k, base + i + half);
    if (NORM) {
      xa = xa * inv * norm_weight(is_k, i);
      xb = xb * inv * norm_weight(is_k, i + half);
    }
    let angle = pos * inv_freq[i];
    let c = cos(angle);
    let s = sin(angle);
    store(is_k, base + i, xa * c - xb * s);
    store(is_k, base + i + half, xb * c + xa * s);
  }
}
