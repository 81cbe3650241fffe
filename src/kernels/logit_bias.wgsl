// Applies each sequence's penalties to the tokens they name, in place, before sampling:
// the repetition penalty as llama.cpp does (divide a positive logit, multiply a negative
// one), then a subtracted term (frequency * count + presence, DRY, minus logit_bias; +inf
// makes the logit -inf). The host lists each (sequence, token) at most once, so
// invocations never collide.
// Bindings: 0 params, 1 step, 2 logits [S, vocab] rw, 3 entries [n_bias].
// Plan: one invocation per entry.
#include "common"
struct Params { vocab: u32 }
struct Entry { seq: u32, token: u32, repeat: f32, subtract: f32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read_write> logits: array<f32>;
@group(0) @binding(3) var<storage, read> entries: array<Entry>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  if (gid.x >= step.n_bias) { return; }
  let e = entries[gid.x];
  let i = e.seq * p.vocab + e.token;
  var l = logits[i];
  if (e.repeat != 1.0) { l = select(l * e.repeat, l / e.repeat, l > 0.0); }
  logits[i] = l - e.subtract;
}
