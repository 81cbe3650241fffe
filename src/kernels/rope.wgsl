// Rotary position embedding, in place, HF "rotate_half" pairing (i, i + rot/2) inside
// each head. Frequencies come from the host (inv_freq[i]), so every rope_scaling type
// (default, linear, llama3, ...) is a host-side table and this kernel stays one.
// Bindings: 0 params, 1 step, 2 x [M, heads, head_dim] rw, 3 token_pos [M], 4 inv_freq.
// Plan: one invocation per (token, head, pair).
struct Params { heads: u32, head_dim: u32, half_rot: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read_write> x: array<f32>;
@group(0) @binding(3) var<storage, read> token_pos: array<u32>;
@group(0) @binding(4) var<storage, read> inv_freq: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.x % p.half_rot;
  let row = gid.x / p.half_rot;  // token * heads + head
  if (row >= step.n_tokens * p.heads) { return; }
  let m = row / p.heads;
  let angle = f32(token_pos[m]) * inv_freq[i];
  let c = cos(angle);
  let s = sin(angle);
  let a = row * p.head_dim + i;
  let b = a + p.half_rot;
  let xa = x[a];
  let xb = x[b];
  x[a] = xa * c - xb * s;
  x[b] = xb * c + xa * s;
}
