// The harmonic source's phase at the F0 frame rate (iSTFTNet's SineGen): per harmonic h
// (1 .. harmonics), r[j] = fract(f0[j] * h / sample_rate), the per-sample phase advance in
// turns, and phase[j, h - 1] = fract(r[0] + ... + r[j]), the running sum kept in [0, 1)
// (whole turns do not change a sine; keeping them would spend f32's precision on them).
// Bindings: 0 params, 2 f0 [frames], 3 phase [frames, harmonics].
// Plan: one invocation per harmonic, a serial scan over the frames (a few hundred to a
// few thousand, and only `harmonics` of them).
struct Params { frames: u32, harmonics: u32, sample_rate: f32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> f0: array<f32>;
@group(0) @binding(3) var<storage, read_write> phase: array<f32>;

@compute @workgroup_size(16)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let h = gid.x;
  if (h >= p.harmonics) { return; }
  var sum = 0.0;
  for (var j = 0u; j < p.frames; j++) {
    sum = fract(sum + fract(f0[j] * f32(h + 1u) / p.sample_rate));
    phase[j * p.harmonics + h] = sum;
  }
}
