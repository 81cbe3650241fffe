// Scalar functions the kernels share (included by common.wgsl, and by kernels that read no step uniform).
// tanh through exp, saturating to +-1 where exp overflows (a library tanh may return NaN there).
fn tanh_sat(x: f32) -> f32 {
  return 1.0 - 2.0 / (exp(2.0 * x) + 1.0);
}

// erf by Abramowitz and Stegun 7.1.26 (absolute error under 1.5e-7).
fn erf_approx(x: f32) -> f32 {
  let t = 1.0 / (1.0 + 0.3275911 * abs(x));
  let y = 1.0 - ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * exp(-x * x);
  return select(-y, y, x >= 0.0);
}
