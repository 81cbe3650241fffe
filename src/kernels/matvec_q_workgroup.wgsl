// Y[m, n] (+)= sum_k X[m, k] * W[n, k] (+ bias[n]) for MLX affine-quantized W (BITS = 2,
// 3, 4, 5, 6 or 8), one token per workgroup row: decode's matvec in the layout for GPUs
// (matvec_q.wgsl is the CPU layout; Ops.linear picks by Gpu.isCpu).
// Bindings and constants as matvec_q.wgsl: 0 params, 1 step, 2-4 W (formats/affine.wgsl),
// 5 X and 10 the norm weight (matvec_input.wgsl, with the RMSNorm fused under NORM),
// 6-9 the outputs (linear_out.wgsl).
// Plan: a workgroup owns 16 rows: tiles j and j + 2 (PACKED_TILE_ROWS = 8 rows each) of a
// 32-row block (j = wid.x % 2), so a gated weight's gate rows meet their up rows, 16 rows
// further (linear_out.wgsl), in one workgroup. Invocation t takes row t % 8 of both tiles
// and 32-value chunks t / 8, t / 8 + LANES, ...: in each step the WG invocations read WG
// adjacent texels of each tile (texel c of a tile's row r sits at c * 8 + r), each X
// chunk serves the 8 invocations that share it, and each chunk's affine map is applied
// at once (s * dot(q, x) + b * sum(x)). The LANES partial sums of each row, and the
// sums of squares with NORM, are then added up in workgroup memory.
// Why: on a GPU, coalesced weight reads and enough workgroups to fill the device matter.
// On llvmpipe Ops.linear picks it only when told the adapter is a GPU (test/kernels).
#include "common"
#include "formats/affine"
#include "linear_out"
#include "matvec_input"
const WG: u32 = 128u;
// Rows per tile: PACKED_TILE_ROWS, whose value (8) the coalescing above assumes.
const TILE: u32 = 8u;
// Invocations that share a row, striding over its chunks.
const LANES: u32 = WG / TILE;

var<workgroup> part_a: array<f32, WG>;
var<workgroup> part_b: array<f32, WG>;
var<workgroup> part_ss: array<f32, WG>;

// Row n's dot product with its token's X over chunk `chunk`, the affine map applied.
fn chunk_row(n: u32, chunk: u32, xc: XChunk, row_texels: u32, groups: u32) -> f32 {
  let sb = w_scale_bias(w_affine_entry(n, chunk * 32u / GROUP_SIZE, groups));
  return sb.x * chunk_dot(w_row_texel(n, 0u, row_texels), chunk, xc.x) + sb.y * xc.xsum;
}

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>) {
  let m = wid.y;
  let block = (wid.x / 2u) * 32u;
  let j = (wid.x % 2u) * TILE;
  let n0 = block + j;
  if (n0 >= p.N || m >= row_count(p.per_seq)) { return; }
  let r = t % TILE;
  // Row a in the first tile, b in the one 16 rows further; rows past N re-read the last
  // row (valid memory) and are not written.
  let a = min(n0 + r, p.N - 1u);
  let b = min(n0 + 16u + r, p.N - 1u);
  let row_texels = w_row_texels(p.K);
  let groups = p.K / GROUP_SIZE;
  var sa = 0.0;
  var sb = 0.0;
  var ss = 0.0;
  for (var chunk = t / TILE; chunk < p.K / 32u; chunk += LANES) {
    let xc = load_chunk(chunk, m * (p.K / 4u));
    ss += xc.ss;
    sa += chunk_row(a, chunk, xc, row_texels, groups);
    sb += chunk_row(b, chunk, xc, row_texels, groups);
  }
  part_a[t] = sa;
  part_b[t] = sb;
  part_ss[t] = ss;
  workgroupBarrier();
  if (t >= TILE) { return; }
  sa = 0.0;
  sb = 0.0;
  ss = 0.0;
  for (var lane = 0u; lane < LANES; lane++) {
    sa += part_a[lane * TILE + t];
    sb += part_b[lane * TILE + t];
    ss += part_ss[lane * TILE];
  }
  let scale = norm_scale(ss);
  if (p.glu != 0u) {
    store_y(m, (p.n_offset + block) / 2u + j + t, glu(sa * scale, sb * scale));
    return;
  }
  if (n0 + t < p.N) { store_y(m, p.n_offset + n0 + t, sa * scale); }
  if (n0 + 16u + t < p.N) { store_y(m, p.n_offset + n0 + 16u + t, sb * scale); }
}
