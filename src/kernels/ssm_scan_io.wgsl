// What the Mamba-2 scans (ssm_scan.wgsl, the walk; ssm_scan_chunk.wgsl, the chunked-parallel
// prefill) read and write, and the recurrence they share. The including kernel declares its
// Params (head_dim, heads, groups, conv_dim, proj_stride, dt_offset at least) as `p` and the
// state size D_STATE.
// Bindings: 2 chunks [max chunks] vec4 (first token, tokens, state slot, start position),
// 3 xbc [T, conv_dim]: x (H * P) | B (G * N) | C (G * N) after the conv, 4 proj [T,
// proj_stride]: in_proj's output, dt_raw at dt_offset, 5 a_log [H], 6 dt_bias [H], 7 d [H],
// 8 state [slots, H, P, N], 9 y [T, H * P].
@group(0) @binding(2) var<storage, read> chunks: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> xbc: array<f32>;
@group(0) @binding(4) var<storage, read> proj: array<f32>;
@group(0) @binding(5) var<storage, read> a_log: array<f32>;
@group(0) @binding(6) var<storage, read> dt_bias: array<f32>;
@group(0) @binding(7) var<storage, read> d: array<f32>;
@group(0) @binding(8) var<storage, read_write> state: array<f32>;
@group(0) @binding(9) var<storage, read_write> y: array<f32>;

// torch.nn.functional.softplus (threshold 20: linear above it).
fn softplus(v: f32) -> f32 {
  return select(log(1.0 + exp(v)), v, v > 20.0);
}

// One head channel's view of the scan: its head h, channel pc, A = -exp(A_log[h]), and where
// its group's B and C start in a row of xbc.
struct Channel { h: u32, pc: u32, a: f32, b_at: u32, c_at: u32 }

fn scan_channel(h: u32, pc: u32) -> Channel {
  let inner = p.heads * p.head_dim;
  let g = h / (p.heads / p.groups);
  return Channel(h, pc, -exp(a_log[h]), inner + g * D_STATE, inner + (p.groups + g) * D_STATE);
}

// Token t's step dt = softplus(dt_raw + dt_bias).
fn scan_dt(t: u32, c: Channel) -> f32 {
  return softplus(proj[t * p.proj_stride + p.dt_offset + c.h] + dt_bias[c.h]);
}

// Token t through the channel's N state values s: s = exp(dt A) s + dt x B; returns
// y = C . s + D x when `output` (else 0, C unread).
fn scan_token(s: ptr<function, array<f32, D_STATE>>, t: u32, c: Channel, output: bool) -> f32 {
  let dt = scan_dt(t, c);
  let decay = exp(dt * c.a);
  let row = t * p.conv_dim;
  let xv = xbc[row + c.h * p.head_dim + c.pc];
  let dx = dt * xv;
  var acc = 0.0;
  for (var n = 0u; n < D_STATE; n++) {
    (*s)[n] = decay * (*s)[n] + dx * xbc[row + c.b_at + n];
    if (output) { acc += xbc[row + c.c_at + n] * (*s)[n]; }
  }
  return select(0.0, acc + d[c.h] * xv, output);
}

// Writes token t's output y.
fn scan_write(t: u32, c: Channel, v: f32) {
  y[t * p.heads * p.head_dim + c.h * p.head_dim + c.pc] = v;
}
