// Embedding gather: out[m, :] = W[token[m], :] * scale, dequantized by the weight format
// (scale: Gemma's sqrt(hidden), Granite's embedding_multiplier; 1 otherwise); with
// accumulate, out += it (BERT's position and token-type embeddings added to the word's).
// Bindings: 0 params, 1 step, 2-4 weight (format), 5 token ids [M], 6 out [M, K] f32.
// A table split across buffers is dispatched once per part; each part writes the rows
// whose ids fall in [row_start, row_start + row_count).
// Plan: one invocation per (token, 4 columns); x = column quad, y = token.
#include "common"
#include "formats/${FORMAT}"
struct Params { K: u32, row_start: u32, row_count: u32, scale: f32, accumulate: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(5) var<storage, read> tokens: array<u32>;
@group(0) @binding(6) var<storage, read_write> out: array<vec4<f32>>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let k4 = gid.x;
  let m = gid.y;
  if (k4 * 4u >= p.K || m >= step.n_tokens) { return; }
  let id = tokens[m];
  if (id < p.row_start || id >= p.row_start + p.row_count) { return; }
  let i = m * (p.K / 4u) + k4;
  let v = w_load4(id - p.row_start, k4 * 4u, p.K) * p.scale;
  if (p.accumulate != 0u) { out[i] += v; } else { out[i] = v; }
}
