// Y[m, n] (+)= sum_k X[m, k] * W[n, k] (+ bias[n]) for MLX affine-quantized W (BITS = 2,
// 3, 4, 5, 6 or 8), one token per workgroup row: decode's hot loop, where reading the
// packed weights once per token is the whole cost. The layout for CPU adapters (llvmpipe);
// matvec_q_workgroup.wgsl is the one for GPUs (Ops.linear picks by Gpu.isCpu).
// Bindings: 0 params, 1 step, 2-4 W (formats/affine.wgsl), 5 X and 10 the norm weight
// (matvec_input.wgsl, which fuses the RMSNorm under NORM); outputs 6-9, params and the GLU
// row layout are linear_out.wgsl's.
// Plan: one invocation per R = 32 output rows of one token (gid.y), four tiles of
// PACKED_TILE_ROWS = 8 rows, so each tile's texels for a chunk are adjacent; workgroups of
// 16 (512 rows: a 1024-row projection still has two). Each X chunk (8 vec4, the same for
// the workgroup) meets BITS words per row (one 16-byte texel for 4-bit); per group the
// affine map is applied once: sum_k (s*q_k + b) * x_k = s * dot(q, x) + b * sum(x).
// Why: on llvmpipe an X load is a per-lane gather even when every lane reads the same
// address (only constant offsets become one broadcast load), so each X chunk serves many
// rows; a runtime-indexed private array is per-lane scratch memory, so private arrays are
// indexed only by loops exactly as long as they are, which NIR unrolls.
#include "common"
#include "formats/affine"
#include "linear_out"
#include "matvec_input"
const R: u32 = 32u;
// The rows as vec4s.
const RV: u32 = R / 4u;

// The invocation's rows, four per vector: first packed texel (w) of each, and the quad's
// first scale-and-bias entry (g; formats/affine.wgsl).
struct Rows { w: array<vec4<u32>, RV>, g: array<u32, RV> }
// The rows' sums so far.
struct Acc { a: array<vec4<f32>, RV>, ss: f32 }
// One group's partial dot products (before the affine map), sum of X and, with norm, sum of
// the raw X squared.
struct Dots { a: array<vec4<f32>, RV>, xsum: f32, ss: f32 }

// Adds 32-value chunk `chunk` of K (X from vec4 index x_base of x) to the group's dots.
fn chunk_dots(chunk: u32, x_base: u32, r: Rows, d: ptr<function, Dots>) {
  let xc = load_chunk(chunk, x_base);
  if (NORM) { (*d).ss += xc.ss; }
  (*d).xsum += xc.xsum;
  for (var i = 0u; i < RV; i++) {
    let w = r.w[i];
    (*d).a[i] += vec4<f32>(chunk_dot(w.x, chunk, xc.x), chunk_dot(w.y, chunk, xc.x), chunk_dot(w.z, chunk, xc.x), chunk_dot(w.w, chunk, xc.x));
  }
}

// Applies group g's affine map to its dots, into the row sums.
fn group_end(g: u32, d: Dots, r: Rows, acc: ptr<function, Acc>) {
  (*acc).ss += d.ss;
  for (var i = 0u; i < RV; i++) {
    let sb = w_scale_bias4(r.g[i] + 4u * g);
    (*acc).a[i] += sb.s * d.a[i] + sb.b * d.xsum;
  }
}

// The K loop: per group, chunk_dots for each of its 32-value chunks, unrolled (llvmpipe
// runs a loop over them slower), then group_end.
fn k_loop(m: u32, r: Rows, acc: ptr<function, Acc>) {
  let x_base = m * (p.K / 4u);
  for (var g = 0u; g < p.K / GROUP_SIZE; g++) {
    var d: Dots;
    let c = g * (GROUP_SIZE / 32u);
    chunk_dots(c, x_base, r, &d);
#if GROUP_SIZE >= 64
    chunk_dots(c + 1u, x_base, r, &d);
#endif
#if GROUP_SIZE >= 128
    chunk_dots(c + 2u, x_base, r, &d);
    chunk_dots(c + 3u, x_base, r, &d);
#endif
    group_end(g, d, r, acc);
  }
}

@compute @workgroup_size(16)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
  let n0 = gid.x * R;
  let m = wid.y;
  if (n0 >= p.N || m >= row_count(p.per_seq)) { return; }
  let row_texels = w_row_texels(p.K);
  let groups = p.K / GROUP_SIZE;
  // Rows past N re-read the last row (valid memory) and are not written.
  let last = p.N - 1u;
  var rows: Rows;
  for (var i = 0u; i < RV; i++) {
    let r = min(vec4<u32>(n0 + 4u * i) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(last));
    rows.w[i] = vec4<u32>(w_row_texel(r.x, 0u, row_texels), w_row_texel(r.y, 0u, row_texels), w_row_texel(r.z, 0u, row_texels), w_row_texel(r.w, 0u, row_texels));
    rows.g[i] = w_affine_entry(r.x & ~3u, 0u, groups);
  }
  var acc: Acc;
  k_loop(m, rows, &acc);
  let scale = norm_scale(acc.ss);
  if (p.glu != 0u) {
    // Vectors 0 to RV/2 - 1 hold gate rows, the rest the matching up rows (linear_out.wgsl).
    // The loop runs RV times, as long as the array, so that it unrolls (see above).
    for (var i = 0u; i < RV; i++) {
      if (i < RV / 2u) {
        let gate = acc.a[i] * scale;
        let up = acc.a[i + RV / 2u] * scale;
        for (var j = 0u; j < 4u; j++) { store_y(m, (p.n_offset + n0) / 2u + 4u * i + j, glu(gate[j], up[j])); }
      }
    }
    return;
  }
  for (var i = 0u; i < RV; i++) {
    for (var j = 0u; j < 4u; j++) {
      let r = 4u * i + j;
      if (n0 + r < p.N) { store_y(m, p.n_offset + n0 + r, acc.a[i][j] * scale); }
    }
  }
}
