// RoPE inverse frequencies, computed on the host for each scaling config.ts accepts; the
// rope kernel only multiplies positions by this table.
import type { RopeConfig } from './config.js';

/**
 * What each base frequency theta^(-2i/rotaryDim) is divided by: 1 unscaled, `factor` for
 * linear scaling; for llama3 (transformers' _compute_llama3_parameters) 1 for wavelengths
 * under original / high_freq_factor, `factor` over original / low_freq_factor,
 * interpolated between; for longrope the short factors, or the long ones where the
 * context (`context` tokens) exceeds the original (llama.cpp's choice, made once per
 * load). llama.cpp takes the llama3 and longrope divisors as rope_freqs /
 * rope_factors_{short,long} tensors.
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

/** What the rotated values are multiplied by: longrope's attention factor, else 1. */
export function ropeAttentionFactor(cfg: RopeConfig): number {
  return cfg.ropeScaling?.type === 'longrope' ? cfg.ropeScaling.attentionFactor : 1;
}

function baseFrequencies(cfg: RopeConfig): Float64Array {
  return Float64Array.from({ length: cfg.rotaryDim / 2 }, (_, i) => cfg.ropeTheta ** (-(2 * i) / cfg.rotaryDim));
}
