// Sequence pooling of the final hidden states: out[s, d] = mean, first or last of x[t, d]
// over the tokens t of sequence s (an embedding model's pooled vector).
// Bindings: 0 params, 1 step, 2 x [tokens, width] f32, 3 seq_last [S] u32, 4 out [S, width].
// A pass lays each sequence's tokens out contiguously, in order: sequence s holds tokens
// seq_last[s - 1] + 1 .. seq_last[s] (from 0 for s = 0).
// Plan: one invocation per (sequence, column), a serial loop over the sequence's tokens
// for the mean.
#include "common"
// How a sequence pools (Params.mode); the host reads these codes (runtime/kernel-source.ts kernelEnum).
const POOL_MEAN: u32 = 0u;
const POOL_FIRST: u32 = 1u;
const POOL_LAST: u32 = 2u;
struct Params { width: u32, mode: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read> seq_last: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.x;
  if (i >= step.n_seqs * p.width) { return; }
  let s = i / p.width;
  let d = i % p.width;
  let last = seq_last[s];
  var first = 0u;
  if (s > 0u) { first = seq_last[s - 1u] + 1u; }
  if (p.mode == POOL_FIRST) {
    out[i] = x[first * p.width + d];
  } else if (p.mode == POOL_LAST) {
    out[i] = x[last * p.width + d];
  } else {
    var sum = 0.0;
    for (var t = first; t <= last; t++) { sum += x[t * p.width + d]; }
    out[i] = sum / f32(last - first + 1u);
  }
}
