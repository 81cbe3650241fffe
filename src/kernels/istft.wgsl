// iSTFTNet's output: the inverse STFT of the generator's last convolution (torch.istft
// with center and a periodic Hann window). Row m of x holds n_fft + 2 channels: the
// magnitudes exp(x[m, k]) and phases sin(x[m, n_fft / 2 + 1 + k]) of bins k = 0 .. n_fft
// / 2. Each frame's inverse real DFT (the imaginary parts of the DC and Nyquist bins
// ignored) is windowed and overlap-added at m * hop - n_fft / 2, and the sum divided by
// the overlapping windows' squares: out[s] for s < hop * (frames - 1).
// Bindings: 0 params, 2 x [frames, n_fft + 2], 3 out [hop * (frames - 1)].
// Plan: one invocation per output sample; it evaluates the n_fft / hop frames over it.
struct Params { frames: u32, n_fft: u32, hop: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

const TAU: f32 = 6.283185307179586;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let s = gid.x + gid.y * 65535u * 64u;
  if (s >= p.hop * (p.frames - 1u)) { return; }
  let q = s + p.n_fft / 2u;
  let half = p.n_fft / 2u;
  var sum = 0.0;
  var env = 0.0;
  let first = select(0u, (q - p.n_fft) / p.hop + 1u, q >= p.n_fft);
  for (var m = first; m <= q / p.hop && m < p.frames; m++) {
    let n = q - m * p.hop;
    let w = 0.5 - 0.5 * cos(TAU * f32(n) / f32(p.n_fft));
    let row = m * (p.n_fft + 2u);
    var v = exp(x[row]) * cos(sin(x[row + half + 1u]));
    let nyquist = exp(x[row + half]) * cos(sin(x[row + 2u * half + 1u]));
    v += select(nyquist, -nyquist, n % 2u == 1u);
    for (var k = 1u; k < half; k++) {
      let mag = exp(x[row + k]);
      let ph = sin(x[row + half + 1u + k]);
      let a = TAU * f32((k * n) % p.n_fft) / f32(p.n_fft);
      v += 2.0 * mag * cos(ph + a);
    }
    sum += w * v / f32(p.n_fft);
    env += w * w;
  }
  out[s] = sum / env;
}
