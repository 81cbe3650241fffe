// iSTFTNet's harmonic-plus-noise source (SourceModuleHnNSF over SineGen), one value per
// output sample n, from F0 at its frame rate (frames j, `upsample` samples each):
// uv = f0[n / upsample] > voiced_threshold; per harmonic h the phase is the frame-rate
// phase (harmonic_phase.wgsl) linearly interpolated to the sample (PyTorch's linear
// interpolation, align_corners false: src = (n + 0.5) / upsample - 0.5, clamped at 0)
// and scaled by upsample, e = sine_amp * sin(2 pi phase) * uv + noise, noise of standard
// deviation noise_std where voiced and sine_amp / 3 where not; then out[n] =
// tanh(lw . e + lb) (the merge layer). The noise is drawn from a counter-based generator
// keyed by (seed, n * harmonics + h): the same seed gives the same audio on any device.
// Bindings: 0 params, 2 f0 [frames], 3 phase [frames, harmonics], 4 merge [lw (harmonics),
// lb], 5 out [frames * upsample].
// Plan: one invocation per sample.
#include "math"
struct Params { frames: u32, harmonics: u32, upsample: u32, seed: u32, sample_rate: f32, sine_amp: f32, noise_std: f32, voiced_threshold: f32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> f0: array<f32>;
@group(0) @binding(3) var<storage, read> phase: array<f32>;
@group(0) @binding(4) var<storage, read> merge: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;

// PCG's output hash of a 32-bit word (O'Neill's pcg32 "RXS M XS" step).
fn pcg(v: u32) -> u32 {
  let state = v * 747796405u + 2891336453u;
  let word = ((state >> ((state >> 28u) + 4u)) ^ state) * 277803737u;
  return (word >> 22u) ^ word;
}

// A uniform in (0, 1) from 24 bits of a hash: exact in f32.
fn unit(bits: u32) -> f32 {
  return (f32(bits >> 8u) + 0.5) / 16777216.0;
}

// A standard normal draw for counter `i` (Box-Muller's cosine branch).
fn normal(i: u32) -> f32 {
  let key = pcg(p.seed);
  let u1 = unit(pcg(key ^ (2u * i)));
  let u2 = unit(pcg(key ^ (2u * i + 1u)));
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let n = gid.x + gid.y * 65535u * 64u;
  if (n >= p.frames * p.upsample) { return; }
  let j = n / p.upsample;
  let voiced = f0[j] > p.voiced_threshold;
  let src = max((f32(n) + 0.5) / f32(p.upsample) - 0.5, 0.0);
  let i0 = min(u32(floor(src)), p.frames - 1u);
  let lambda = src - f32(i0);
  var acc = merge[p.harmonics];
  for (var h = 0u; h < p.harmonics; h++) {
    // Between frames i0 and i0 + 1 the phase advances by frame i0 + 1's step.
    var step = 0.0;
    if (i0 + 1u < p.frames) { step = fract(f0[i0 + 1u] * f32(h + 1u) / p.sample_rate); }
    let turns = fract(fract(phase[i0 * p.harmonics + h] * f32(p.upsample)) + lambda * step * f32(p.upsample));
    var e = normal(n * p.harmonics + h);
    if (voiced) {
      e = p.sine_amp * sin(6.283185307179586 * turns) + p.noise_std * e;
    } else {
      e *= p.sine_amp / 3.0;
    }
    acc += merge[h] * e;
  }
  out[n] = tanh_sat(acc);
}
