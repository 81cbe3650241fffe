// Y[m, n] (+)= sum_k X[m, k] * W[n, k] (+ bias[n]) for MLX affine-quantized W (BITS = 4
// or 8) over many tokens at once: prefill, where the same weights serve every token.
// Bindings as matvec_q.wgsl: 0 params, 1 step, 2 packed W (vec4<u32>), 3 scales,
// 4 biases, 5 X [M, K], 6 Y [M, y_stride], 7 bias.
// Plan: register tiling. One invocation owns 4 output rows x TT = 4 tokens; each 32-value
// chunk of a row is dequantized once (to q, before the affine map) and multiplied with
// all 4 tokens' X (uniform across the workgroup, so broadcast), so every weight byte
// read serves 4 tokens. The tile is spelled out as named vec4s rather than arrays: llvmpipe
// keeps those in registers, while an array indexed in a loop may go to per-lane scratch.
override BITS: u32 = 4u;
override GROUP_SIZE: u32 = 64u;
override ACCUMULATE: bool = false;
override HAS_BIAS: bool = false;
const TT: u32 = 4u;
struct Params { K: u32, N: u32, n_offset: u32, y_stride: u32, per_seq: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> w_data: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> w_scales: array<f32>;
@group(0) @binding(4) var<storage, read> w_biases: array<f32>;
@group(0) @binding(5) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read_write> y: array<f32>;
@group(0) @binding(7) var<storage, read> bias: array<f32>;

// The quantized values (0 .. 2^BITS-1) of one 32-value chunk.
struct Q { a: vec4<f32>, b: vec4<f32>, c: vec4<f32>, d: vec4<f32>, e: vec4<f32>, f: vec4<f32>, g: vec4<f32>, h: vec4<f32> }

fn nib(w: u32, shift: vec4<u32>) -> vec4<f32> {
  return vec4<f32>((vec4<u32>(w) >> shift) & vec4<u32>(15u));
}

fn byt(w: u32) -> vec4<f32> {
  return vec4<f32>((vec4<u32>(w) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(255u));
}

fn load_q(at: u32) -> Q {
  let lo = vec4<u32>(0u, 4u, 8u, 12u);
  let hi = vec4<u32>(16u, 20u, 24u, 28u);
  if (BITS == 4u) {
    let w = w_data[at];
    return Q(nib(w.x, lo), nib(w.x, hi), nib(w.y, lo), nib(w.y, hi), nib(w.z, lo), nib(w.z, hi), nib(w.w, lo), nib(w.w, hi));
  }
  let w0 = w_data[at];
  let w1 = w_data[at + 1u];
  return Q(byt(w0.x), byt(w0.y), byt(w0.z), byt(w0.w), byt(w1.x), byt(w1.y), byt(w1.z), byt(w1.w));
}

fn q_dot(q: Q, xi: u32) -> f32 {
  return dot(q.a, x[xi]) + dot(q.b, x[xi + 1u]) + dot(q.c, x[xi + 2u]) + dot(q.d, x[xi + 3u])
       + dot(q.e, x[xi + 4u]) + dot(q.f, x[xi + 5u]) + dot(q.g, x[xi + 6u]) + dot(q.h, x[xi + 7u]);
}

fn x_sum(xi: u32) -> f32 {
  let s = x[xi] + x[xi + 1u] + x[xi + 2u] + x[xi + 3u] + x[xi + 4u] + x[xi + 5u] + x[xi + 6u] + x[xi + 7u];
  return s.x + s.y + s.z + s.w;
}

// One row's chunk against the four tokens whose chunk offsets are xi.
fn row_dots(at: u32, xi: vec4<u32>) -> vec4<f32> {
  let q = load_q(at);
  return vec4<f32>(q_dot(q, xi.x), q_dot(q, xi.y), q_dot(q, xi.z), q_dot(q, xi.w));
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
  let n0 = gid.x * 4u;
  let m0 = wid.y * TT;
  let M = row_count(p.per_seq);
  if (n0 >= p.N || m0 >= M) { return; }
  let vec_per_chunk = BITS / 4u;
  let vec_per_row = (p.K / 32u) * vec_per_chunk;
  let chunks_per_group = GROUP_SIZE / 32u;
  let groups = p.K / GROUP_SIZE;
  let rows = min(vec4<u32>(n0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(p.N - 1u));
  let wrow = rows * vec_per_row;
  // Token rows past M re-read the last token and are not written.
  let xrow = min(vec4<u32>(m0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(M - 1u)) * (p.K / 4u);

  // acc_r[t]: output row n0 + r, token m0 + t.
  var acc0 = vec4<f32>(0.0);
  var acc1 = vec4<f32>(0.0);
  var acc2 = vec4<f32>(0.0);
  var acc3 = vec4<f32>(0.0);
  for (var g = 0u; g < groups; g++) {
    var d0 = vec4<f32>(0.0);
    var d1 = vec4<f32>(0.0);
    var d2 = vec4<f32>(0.0);
    var d3 = vec4<f32>(0.0);
    var xsum = vec4<f32>(0.0);
    for (var c = 0u; c < chunks_per_group; c++) {
      let chunk = g * chunks_per_group + c;
      let xi = xrow + vec4<u32>(chunk * 8u);
      xsum += vec4<f32>(x_sum(xi.x), x_sum(xi.y), x_sum(xi.z), x_sum(xi.w));
      let at = wrow + vec4<u32>(chunk * vec_per_chunk);
      d0 += row_dots(at.x, xi);
      d1 += row_dots(at.y, xi);
      d2 += row_dots(at.z, xi);
      d3 += row_dots(at.w, xi);
    }
    let gi = rows * groups + vec4<u32>(g);
    acc0 += w_scales[gi.x] * d0 + w_biases[gi.x] * xsum;
    acc1 += w_scales[gi.y] * d1 + w_biases[gi.y] * xsum;
    acc2 += w_scales[gi.z] * d2 + w_biases[gi.z] * xsum;
    acc3 += w_scales[gi.w] * d3 + w_biases[gi.w] * xsum;
  }
  for (var t = 0u; t < TT; t++) {
    if (m0 + t >= M) { break; }
    let out = vec4<f32>(acc0[t], acc1[t], acc2[t], acc3[t]);
    for (var r = 0u; r < 4u; r++) {
      if (n0 + r >= p.N) { break; }
      let col = p.n_offset + n0 + r;
      let i = (m0 + t) * p.y_stride + col;
      var v = out[r];
      if (HAS_BIAS) { v += bias[col]; }
      if (ACCUMULATE) { v += y[i]; }
      y[i] = v;
    }
  }
}
