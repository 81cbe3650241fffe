// The output side shared by the linear kernels (matmul, matvec_q, matmul_q): their params,
// bindings 6-9 and store_y. Bindings: 0 params, 6 y rw, 7 bias [n_total] (a dummy
// without has_bias), 8 y1 rw, 9 y2 rw (distinct dummies when unused: writable bindings may
// not alias).
// Of the n_total output columns (the whole weight's rows; a weight split into parts is one
// dispatch per part, its N rows at n_offset), col < split1 goes to y [M, split1], col <
// split2 to y1 [M, split2 - split1], the rest to y2 [M, n_total - split2], so a weight
// stacked from several matrices (q/k/v, gate/up) writes each source's rows to its own
// buffer; unstacked, split1 = split2 = n_total. accumulate (y only): add into Y (the
// residual add after o_proj and down_proj); has_bias: add bias[col]; out_scale: multiply the
// output (Granite's residual and logit multipliers; 1 otherwise) and softcap: cap it with
// cap * tanh(v / cap) (Gemma 2's final logits; 0: none), both before the accumulate;
// norm_eps: matvec_q's fused RMSNorm (documented there); act: the GLU's activation
// (common.wgsl activate).
// glu (matmul_q, matvec_q; Ops.gatedLinear): gate and up rows interleaved in
// blocks of 16 (GpuWeight.gluBlock), so of an invocation's 32 rows the first 16 are gate
// rows and the last 16 the up rows of the same columns; it stores glu(gate, up) as column
// (n_offset + n0) / 2 + r, r < 16 (n_total is then the output's width, half the weight's).
// Why: on llvmpipe a dispatch has a fixed cost however little it computes, and a 1024-row
// projection fills only two workgroups, so stacking and glu save dispatches (glu also the up
// projection's trip through memory). Flags are runtime values so one compiled kernel serves
// every layer (matmul_q's pipelines are large), but a branch in a hot loop is not free:
// matvec_q takes NORM, which its K loop reads, as a constant; matmul_q has no norm
// (rmsnorm.wgsl norms its input; Ops.linear).
struct Params { K: u32, N: u32, n_offset: u32, n_total: u32, split1: u32, split2: u32, per_seq: u32, accumulate: u32, has_bias: u32, glu: u32, norm_eps: f32, act: u32, out_scale: f32, softcap: f32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(6) var<storage, read_write> y: array<f32>;
@group(0) @binding(7) var<storage, read> bias: array<f32>;
@group(0) @binding(8) var<storage, read_write> y1: array<f32>;
@group(0) @binding(9) var<storage, read_write> y2: array<f32>;

// Stores `value` (+ bias) as row m's output column col.
fn store_y(m: u32, col: u32, value: f32) {
  var v = value;
  if (p.has_bias != 0u) { v += bias[col]; }
  v = softcap(v * p.out_scale, p.softcap);
  if (col < p.split1) {
    let i = m * p.split1 + col;
    if (p.accumulate != 0u) { v += y[i]; }
    y[i] = v;
  } else if (col < p.split2) {
    y1[m * (p.split2 - p.split1) + col - p.split1] = v;
  } else {
    y2[m * (p.n_total - p.split2) + col - p.split2] = v;
  }
}

fn glu(gate: f32, up: f32) -> f32 {
  return activate(gate, p.act) * up;
}
