// X's side of the quantized decode matvecs (matvec_q, matvec_q_workgroup): one 32-value
// chunk of a token's X, loaded, summed for the affine map, normed where the layer's
// RMSNorm is fused into its input (NORM), and scaled for the weight fields masked in place.
// X is binding 5, `x`: vec4s of [M, K] f32, a uniform array of X_VEC4S when its rows fit
// one uniform binding (X_UNIFORM), else a storage array; the norm weight is binding 10,
// read as norm_w(i), vec4 i, a uniform array of NORM_VEC4S where it fits one uniform binding
// (NORM_UNIFORM), else a storage array; a layer without the norm binds zeros, as WGSL counts
// the binding used either way. Why uniform: on llvmpipe a storage load whose address varies
// in a loop becomes a per-lane scalar loop with a bounds check per component, while a
// uniform load is one vector gather (runtime/ops/linear.ts matvecInput; bench/linear-q.ts measures both).
// With NORM, X is the raw residual stream and a kernel computes RMSNorm(x) W^T as
// ((x * norm_w) W^T) * norm_scale(sum(x^2)): each X value is multiplied by its norm weight
// as it is loaded, the sum of squares comes from the same loads, and the finished dot
// products are scaled once, before the bias. That saves the norm's own dispatch before the
// q/k/v and gate/up projections of a decode step (on llvmpipe a dispatch has a fixed cost
// however little it computes).
override NORM: bool = false;

#if X_UNIFORM
#const X_VEC4S: u32
@group(0) @binding(5) var<uniform> x: array<vec4<f32>, X_VEC4S>;
#else
@group(0) @binding(5) var<storage, read> x: array<vec4<f32>>;
#endif
#if NORM_UNIFORM
#const NORM_VEC4S: u32
@group(0) @binding(10) var<uniform> norm_weight: array<vec4<f32>, NORM_VEC4S>;
#else
@group(0) @binding(10) var<storage, read> norm_weight: array<vec4<f32>>;
#endif

fn norm_w(i: u32) -> vec4<f32> {
  return norm_weight[i];
}

// 1 / rms of a row whose squares sum to ss (rounded as rmsnorm.wgsl rounds it); 1 without norm.
fn norm_scale(ss: f32) -> f32 {
  if (!NORM) { return 1.0; }
  return inverseSqrt(ss / f32(p.K) + p.norm_eps);
}

// A chunk of X as chunk_dot takes it (x), the sum of its values after the norm weight
// (xsum) and, with NORM, the sum of their raw squares (ss).
struct XChunk { x: Chunk, xsum: f32, ss: f32 }

// Chunk `chunk` (32 values from 32 * chunk) of the token whose X row starts at vec4 x_base.
fn load_chunk(chunk: u32, x_base: u32) -> XChunk {
  let xi = x_base + chunk * 8u;
  var xc = Chunk(x[xi], x[xi + 1u], x[xi + 2u], x[xi + 3u], x[xi + 4u], x[xi + 5u], x[xi + 6u], x[xi + 7u]);
  var ss = 0.0;
  if (NORM) {
    ss = dot(xc.a, xc.a) + dot(xc.b, xc.b) + dot(xc.c, xc.c) + dot(xc.d, xc.d)
       + dot(xc.e, xc.e) + dot(xc.f, xc.f) + dot(xc.g, xc.g) + dot(xc.h, xc.h);
    let wi = chunk * 8u;
    xc = Chunk(xc.a * norm_w(wi), xc.b * norm_w(wi + 1u), xc.c * norm_w(wi + 2u), xc.d * norm_w(wi + 3u),
               xc.e * norm_w(wi + 4u), xc.f * norm_w(wi + 5u), xc.g * norm_w(wi + 6u), xc.h * norm_w(wi + 7u));
  }
  let s4 = xc.a + xc.b + xc.c + xc.d + xc.e + xc.f + xc.g + xc.h;
  let scaled = Chunk(xc.a * x_field_scale(0u), xc.b * x_field_scale(1u), xc.c * x_field_scale(2u), xc.d * x_field_scale(3u),
                     xc.e * x_field_scale(4u), xc.f * x_field_scale(5u), xc.g * x_field_scale(6u), xc.h * x_field_scale(7u));
  return XChunk(scaled, s4.x + s4.y + s4.z + s4.w, ss);
}
