// RoPE inverse frequencies, computed on the host for each scaling config.ts accepts; the
// rope kernel only multiplies positions by this table.
import type { RopeConfig, RopeScaling } from './config.js';

/**
 * What each base frequency theta^(-2i/rotaryDim) is divided by: 1 unscaled, `factor` for
 * linear scaling; for llama3 (transformers' _compute_llama3_parameters) 1 for wavelengths
 * under original / high_freq_factor, `factor` over original / low_freq_factor,
 * interpolated between; for longrope the short factors, or the long ones where the
 * context (`context` tokens) exceeds the original (llama.cpp's choice, made once per
 * load); for yarn 1 / ((1 - e) / factor + e), e the extrapolation weight (yarnExtrapolation).
 * llama.cpp takes the llama3 and longrope divisors as rope_freqs / rope_factors_{short,long}
 * tensors.
 */
export function ropeFreqDivisors(cfg: RopeConfig, context = 0): Float64Array {
  const half = cfg.rotaryDim / 2;
  const s = cfg.ropeScaling;
  if (!s) return new Float64Array(half).fill(1);
  if (s.type === 'linear') return new Float64Array(half).fill(s.factor);
  if (s.type === 'longrope') {
    const factors = context > s.originalMaxPositions ? s.longFactor : s.shortFactor;
    if (factors.length !== half) throw new Error(`longrope: ${factors.length} factors for ${half} rotary frequencies`);
    return Float64Array.from(factors);
  }
  if (s.type === 'yarn') {
    const e = yarnExtrapolation(cfg, s);
    return e.map((x) => 1 / ((1 - x) / s.factor + x));
  }
  const { factor, lowFreqFactor: low, highFreqFactor: high, originalMaxPositions: original } = s;
  return Float64Array.from(baseFrequencies(cfg), (freq) => {
    const wavelen = (2 * Math.PI) / freq;
    if (wavelen < original / high) return 1;
    if (wavelen > original / low) return factor;
    const smooth = (original / wavelen - low) / (high - low);
    return 1 / ((1 - smooth) / factor + smooth);
  });
}

/** Inverse frequencies [rotaryDim / 2] in float64 (the CPU reference's precision). */
export function ropeInvFreq64(cfg: RopeConfig, context = 0): Float64Array {
  const divisors = ropeFreqDivisors(cfg, context);
  return baseFrequencies(cfg).map((freq, i) => freq / divisors[i]!);
}

/** Inverse frequencies [rotaryDim / 2], as the rope kernel reads them. */
export function ropeInvFreq(cfg: RopeConfig, context = 0): Float32Array {
  return Float32Array.from(ropeInvFreq64(cfg, context));
}

/** What the rotated values are multiplied by: longrope's and yarn's attention factor, else 1. */
export function ropeAttentionFactor(cfg: RopeConfig): number {
  const s = cfg.ropeScaling;
  return s?.type === 'longrope' || s?.type === 'yarn' ? s.attentionFactor : 1;
}

/**
 * YaRN's weight of each frequency's unscaled value (transformers' 1 - linear_ramp_factor):
 * 1 below the correction range's low dim, 0 above its high one, linear between. The range is
 * where a frequency turns beta_fast and beta_slow times over original positions, rounded out
 * to whole dims with truncate (llama.cpp always rounds it).
 */
function yarnExtrapolation(cfg: RopeConfig, s: Extract<RopeScaling, { type: 'yarn' }>): Float64Array {
  const dim = cfg.rotaryDim;
  const correction = (rotations: number) => (dim * Math.log(s.originalMaxPositions / (rotations * 2 * Math.PI))) / (2 * Math.log(cfg.ropeTheta));
  let low = correction(s.betaFast);
  let high = correction(s.betaSlow);
  if (s.truncate) [low, high] = [Math.floor(low), Math.ceil(high)];
  [low, high] = [Math.max(low, 0), Math.min(high, dim - 1)];
  if (low === high) high += 0.001;
  return Float64Array.from({ length: dim / 2 }, (_, i) => 1 - Math.min(1, Math.max(0, (i - low) / (high - low))));
}

function baseFrequencies(cfg: RopeConfig): Float64Array {
  return Float64Array.from({ length: cfg.rotaryDim / 2 }, (_, i) => cfg.ropeTheta ** (-(2 * i) / cfg.rotaryDim));
}
