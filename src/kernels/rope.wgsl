// Rotary position embedding, in place, HF "rotate_half" pairing (i, i + head_dim/2) inside
// each head; with NORM, after a per-head RMSNorm (Qwen3's q_norm / k_norm):
// x <- x / sqrt(mean(x^2) + eps) * weight, rounded as rmsnorm.wgsl rounds it. Frequencies
// come from the host (inv_freq[i]), so every rope_scaling type (default, linear, llama3,
// ...) is a host-side table and this kernel stays one.
// Bindings: 0 params, 1 step, 2 x [M, heads, head_dim] rw, 3 token_pos [M], 4 inv_freq
// [head_dim / 2], 5 norm weight [head_dim] (read only with NORM; any buffer otherwise).
// Plan: one invocation per (token, head), walking its pairs. The norm needs the whole head
// row, and doing it here instead of in its own dispatch saves two dispatches per layer:
// on llvmpipe a dispatch costs 30-50 us however little it computes.
override NORM: bool = false;
struct Params { heads: u32, head_dim: u32, eps: f32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read_write> x: array<f32>;
@group(0) @binding(3) var<storage, read> token_pos: array<u32>;
@group(0) @binding(4) var<storage, read> inv_freq: array<f32>;
@group(0) @binding(5) var<storage, read> weight: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let row = gid.x;  // token * heads + head
  if (row >= step.n_tokens * p.heads) { return; }
  let base = row * p.head_dim;
  let half = p.head_dim / 2u;
  var inv = 1.0;
  if (NORM) {
    var ss = 0.0;
    for (var i = 0u; i < p.head_dim; i++) { ss += x[base + i] * x[base + i]; }
    inv = inverseSqrt(ss / f32(p.head_dim) + p.eps);
  }
  let pos = f32(token_pos[row / p.heads]);
  for (var i = 0u; i < half; i++) {
    var xa = x[base + i];
    var xb = x[base + i + half];
    if (NORM) {
      xa = xa * inv * weight[i];
      xb = xb * inv * weight[i + half];
    }
    let angle = pos * inv_freq[i];
    let c = cos(angle);
    let s = sin(angle);
    x[base + i] = xa * c - xb * s;
    x[base + i + half] = xb * c + xa * s;
  }
}
