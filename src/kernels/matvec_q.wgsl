// Y[m, n] (+)= sum_k X[m, k] * W[n, k] (+ bias[n]) for MLX affine-quantized W (BITS = 4
// or 8), one token per workgroup row: decode's hot loop, where reading the packed weights
// once per token is the whole cost.
// Bindings: 0 params, 1 step, 2 packed W [N, K*BITS/32] u32 viewed as vec4<u32>,
// 3 scales, 4 biases [N, K/GROUP_SIZE] f32, 5 X [M, K] f32, 6 Y [M, y_stride], 7 bias.
// X is declared by the runtime (Ops.matvecInput): a uniform array when its rows fit one
// uniform binding, a storage array otherwise; the kernel indexes it the same either way.
// Plan: one invocation per R = 8 output rows of one token (gid.y). The K loop walks
// 32-value chunks: 8 vec4 of X (the same for every invocation of the workgroup) against
// one 16-byte weight load per row (two for 8-bit). Per group the affine map is applied
// once: sum_k (s*q_k + b) * x_k = s * dot(q, x) + b * sum(x).
// Every private array is indexed by constants only, so it stays in registers: a
// runtime-indexed array becomes per-lane scratch memory on llvmpipe (measured 4x slower).
override BITS: u32 = 4u;
override GROUP_SIZE: u32 = 64u;
const R: u32 = 8u;
// accumulate: add into Y (fuses the residual add after o_proj and down_proj); has_bias: add
// bias[n]. Runtime flags rather than constants: one compiled kernel serves every layer.
struct Params { K: u32, N: u32, n_offset: u32, y_stride: u32, per_seq: u32, accumulate: u32, has_bias: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> w_data: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> w_scales: array<f32>;
@group(0) @binding(4) var<storage, read> w_biases: array<f32>;
@group(0) @binding(6) var<storage, read_write> y: array<f32>;
@group(0) @binding(7) var<storage, read> bias: array<f32>;

fn nibbles_dot(w: u32, a: vec4<f32>, b: vec4<f32>) -> f32 {
  let lo = vec4<f32>((vec4<u32>(w) >> vec4<u32>(0u, 4u, 8u, 12u)) & vec4<u32>(15u));
  let hi = vec4<f32>((vec4<u32>(w) >> vec4<u32>(16u, 20u, 24u, 28u)) & vec4<u32>(15u));
  return dot(lo, a) + dot(hi, b);
}

fn bytes_dot(w: u32, a: vec4<f32>) -> f32 {
  return dot(vec4<f32>((vec4<u32>(w) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(255u)), a);
}

// The 32 values of X one chunk multiplies, as eight vec4s.
struct Chunk { a: vec4<f32>, b: vec4<f32>, c: vec4<f32>, d: vec4<f32>, e: vec4<f32>, f: vec4<f32>, g: vec4<f32>, h: vec4<f32> }

// dot(q, x) over one 32-value chunk of one row starting at vec4<u32> index `at`.
fn chunk_dot(at: u32, x: Chunk) -> f32 {
  if (BITS == 4u) {
    let w = w_data[at];
    return nibbles_dot(w.x, x.a, x.b) + nibbles_dot(w.y, x.c, x.d) + nibbles_dot(w.z, x.e, x.f) + nibbles_dot(w.w, x.g, x.h);
  }
  let w0 = w_data[at];
  let w1 = w_data[at + 1u];
  return bytes_dot(w0.x, x.a) + bytes_dot(w0.y, x.b) + bytes_dot(w0.z, x.c) + bytes_dot(w0.w, x.d)
       + bytes_dot(w1.x, x.e) + bytes_dot(w1.y, x.f) + bytes_dot(w1.z, x.g) + bytes_dot(w1.w, x.h);
}

fn rows_dot(ra: vec4<u32>, rb: vec4<u32>, at: u32, x: Chunk, acc: ptr<function, array<vec4<f32>, 2>>) {
  (*acc)[0] += vec4<f32>(chunk_dot(ra.x + at, x), chunk_dot(ra.y + at, x), chunk_dot(ra.z + at, x), chunk_dot(ra.w + at, x));
  (*acc)[1] += vec4<f32>(chunk_dot(rb.x + at, x), chunk_dot(rb.y + at, x), chunk_dot(rb.z + at, x), chunk_dot(rb.w + at, x));
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
  let n0 = gid.x * R;
  let m = wid.y;
  if (n0 >= p.N || m >= row_count(p.per_seq)) { return; }
  let vec_per_chunk = BITS / 4u;              // vec4<u32> per 32 values
  let vec_per_row = (p.K / 32u) * vec_per_chunk;
  let chunks_per_group = GROUP_SIZE / 32u;
  let groups = p.K / GROUP_SIZE;
  let x_base = m * (p.K / 4u);
  // Rows past N re-read the last row (valid memory) and are not written.
  let last = p.N - 1u;
  let ra = min(vec4<u32>(n0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(last));
  let rb = min(vec4<u32>(n0) + vec4<u32>(4u, 5u, 6u, 7u), vec4<u32>(last));
  let wa = ra * vec_per_row;
  let wb = rb * vec_per_row;
  let ga = ra * groups;
  let gb = rb * groups;

  var acc_a = vec4<f32>(0.0);
  var acc_b = vec4<f32>(0.0);
  for (var g = 0u; g < groups; g++) {
    var dots: array<vec4<f32>, 2>;
    var xsum = 0.0;
    for (var c = 0u; c < chunks_per_group; c++) {
      let chunk = g * chunks_per_group + c;
      let xi = x_base + chunk * 8u;
      let xc = Chunk(x[xi], x[xi + 1u], x[xi + 2u], x[xi + 3u], x[xi + 4u], x[xi + 5u], x[xi + 6u], x[xi + 7u]);
      let s4 = xc.a + xc.b + xc.c + xc.d + xc.e + xc.f + xc.g + xc.h;
      xsum += s4.x + s4.y + s4.z + s4.w;
      rows_dot(wa, wb, chunk * vec_per_chunk, xc, &dots);
    }
    let sa = vec4<f32>(w_scales[ga.x + g], w_scales[ga.y + g], w_scales[ga.z + g], w_scales[ga.w + g]);
    let sb = vec4<f32>(w_scales[gb.x + g], w_scales[gb.y + g], w_scales[gb.z + g], w_scales[gb.w + g]);
    let ba = vec4<f32>(w_biases[ga.x + g], w_biases[ga.y + g], w_biases[ga.z + g], w_biases[ga.w + g]);
    let bb = vec4<f32>(w_biases[gb.x + g], w_biases[gb.y + g], w_biases[gb.z + g], w_biases[gb.w + g]);
    acc_a += sa * dots[0] + ba * xsum;
    acc_b += sb * dots[1] + bb * xsum;
  }
  for (var r = 0u; r < R; r++) {
    if (n0 + r >= p.N) { break; }
    let col = p.n_offset + n0 + r;
    let i = m * p.y_stride + col;
    var v: f32;
    if (r < 4u) { v = acc_a[r]; } else { v = acc_b[r - 4u]; }
    if (p.has_bias != 0u) { v += bias[col]; }
    if (p.accumulate != 0u) { v += y[i]; }
    y[i] = v;
  }
}
