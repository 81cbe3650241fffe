// Normalisation of pooled embeddings, in place: y[s, :dims] = x[s, :dims] / norm(x[s, :dims])
// (llama.cpp's embd_normalize): p < 0 none; 0 max-abs scaled into the int16 range
// (norm = max|x| / 32760); 1 taxicab; 2 euclidean; p > 2 the p-norm. A zero vector stays
// zeros. Only the first `dims` columns are normed (dimensions: truncate, then normalise).
// Bindings: 0 params, 1 step, 2 x [S, width] f32, 3 norms [S] SeqNorm.
// Plan: one invocation per sequence, serial loops over the row (rows are short, and
// llvmpipe runs workgroup reductions slower than a serial loop).
#include "common"
struct Params { width: u32 }
struct SeqNorm { dims: u32, p: f32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read_write> x: array<f32>;
@group(0) @binding(3) var<storage, read> norms: array<SeqNorm>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let s = gid.x;
  if (s >= step.n_seqs) { return; }
  let n = norms[s];
  if (n.p < 0.0) { return; }
  let row = s * p.width;
  var norm = 0.0;
  if (n.p == 0.0) {
    for (var d = 0u; d < n.dims; d++) { norm = max(norm, abs(x[row + d])); }
    norm = norm / 32760.0;
  } else if (n.p == 1.0) {
    for (var d = 0u; d < n.dims; d++) { norm += abs(x[row + d]); }
  } else if (n.p == 2.0) {
    for (var d = 0u; d < n.dims; d++) { norm += x[row + d] * x[row + d]; }
    norm = sqrt(norm);
  } else {
    for (var d = 0u; d < n.dims; d++) { norm += pow(abs(x[row + d]), n.p); }
    norm = pow(norm, 1.0 / n.p);
  }
  let scale = select(0.0, 1.0 / norm, norm > 0.0);
  for (var d = 0u; d < n.dims; d++) { x[row + d] = x[row + d] * scale; }
}
