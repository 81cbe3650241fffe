// The short-time Fourier transform of the harmonic source (iSTFTNet's har_spec and
// har_phase; torch.stft with center, reflect padding and a periodic Hann window):
// frame m covers samples m * hop - n_fft / 2 .. + n_fft - 1 (reflected at both ends),
// X[m, k] = sum_n x w[n] exp(-2 pi i k n / n_fft) for k = 0 .. n_fft / 2, and y[m, k] =
// |X|, y[m, n_fft / 2 + 1 + k] = arg X (0 for X = 0). A bin whose imaginary part is
// below IMAG_FLOOR of its real part's magnitude is taken as real, its phase 0 or pi: the
// DC and Nyquist bins, and every bin of the first frame (reflected about its centre, it is
// symmetric), are real, and the sign of their rounding noise would otherwise pick +pi or
// -pi differently on every device.
// Bindings: 0 params, 2 x [samples], 3 y [frames, n_fft + 2].
// Plan: one invocation per (frame, bin): a direct DFT of n_fft (a few tens of) samples.
struct Params { samples: u32, frames: u32, n_fft: u32, hop: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

const TAU: f32 = 6.283185307179586;
const IMAG_FLOOR: f32 = 1e-5;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let bins = p.n_fft / 2u + 1u;
  let i = gid.x + gid.y * 65535u * 64u;
  if (i >= p.frames * bins) { return; }
  let m = i / bins;
  let k = i % bins;
  var re = 0.0;
  var im = 0.0;
  let last = i32(p.samples) - 1;
  for (var n = 0u; n < p.n_fft; n++) {
    var at = i32(m * p.hop + n) - i32(p.n_fft / 2u);
    if (at < 0) { at = -at; }
    if (at > last) { at = 2 * last - at; }
    let w = 0.5 - 0.5 * cos(TAU * f32(n) / f32(p.n_fft));
    let a = TAU * f32((k * n) % p.n_fft) / f32(p.n_fft);
    let v = x[u32(at)] * w;
    re += v * cos(a);
    im -= v * sin(a);
  }
  if (k == 0u || 2u * k == p.n_fft || abs(im) <= IMAG_FLOOR * abs(re)) { im = 0.0; }
  var angle = 0.0;
  if (im != 0.0) { angle = atan2(im, re); } else if (re < 0.0) { angle = 3.141592653589793; }
  let row = m * (p.n_fft + 2u);
  y[row + k] = sqrt(re * re + im * im);
  y[row + bins + k] = angle;
}
