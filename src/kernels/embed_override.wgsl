// The soft tokens of a vision-language model's images take the place of their placeholder
// tokens' embeddings: h[t, :] = rows[t, :] for the pass's tokens t whose flag is set.
// Bindings: 0 params, 1 step, 2 h [tokens, width] f32 (the embedded tokens), 3 rows
// [tokens, width] f32 (the image tokens' embeddings, at their tokens' rows), 4 flags
// [tokens] u32.
// Plan: one invocation per value.
#include "common"
struct Params { width: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read_write> h: array<f32>;
@group(0) @binding(3) var<storage, read> rows: array<f32>;
@group(0) @binding(4) var<storage, read> flags: array<u32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.x;
  let t = i / p.width;
  if (t >= step.n_tokens) { return; }
  if (flags[t] != 0u) { h[i] = rows[i]; }
}
