// RoPE inverse frequencies, computed on the host for each scaling config.ts accepts; the
// rope kernel only multiplies positions by this table.
import type { RopeConfig } from './config.js';

/**
 * What each base frequency theta^(-2i/headDim) is divided by: 1 unscaled, `factor` for
 * linear scaling, and for llama3 (transformers' _compute_llama3_parameters) 1 for
 * wavelengths under original / high_freq_factor, `factor` over original / low_freq_factor,
 * interpolated between. llama.cpp takes the llama3 divisors as its rope_freqs tensor.
 */
export function ropeFreqDivisors(cfg: RopeConfig): Float64Array {
  const half = cfg.headDim / 2;
  const s = cfg.ropeScaling;
  if (!s) return new Float64Array(half).fill(1);
  if (s.type === 'linear') return new Float64Array(half).fill(s.factor);
  const { factor, lowFreqFactor: low, highFreqFactor: high, originalMaxPositions: original } = s;
  return Float64Array.from(baseFrequencies(cfg), (freq) => {
    const wavelen = (2 * Math.PI) / freq;
    if (wavelen < original / high) return 1;
    if (wavelen > original / low) return factor;
    const smooth = (original / wavelen - low) / (high - low);
    return 1 / ((1 - smooth) / factor + smooth);
  });
}

/** Inverse frequencies [headDim / 2] in float64 (the CPU reference's precision). */
export function ropeInvFreq64(cfg: RopeConfig): Float64Array {
  const divisors = ropeFreqDivisors(cfg);
  return baseFrequencies(cfg).map((freq, i) => freq / divisors[i]!);
}

/** Inverse frequencies [headDim / 2], as the rope kernel reads them. */
export function ropeInvFreq(cfg: RopeConfig): Float32Array {
  return Float32Array.from(ropeInvFreq64(cfg));
}

function baseFrequencies(cfg: RopeConfig): Float64Array {
  return Float64Array.from({ length: cfg.headDim / 2 }, (_, i) => cfg.ropeTheta ** (-(2 * i) / cfg.headDim));
}
