// RoPE inverse frequencies, computed on the host for every supported rope_scaling type;
// the rope kernel only multiplies positions by this table.
import type { ModelConfig } from './config.js';

export function ropeInvFreq(cfg: Pick<ModelConfig, 'headDim' | 'ropeTheta' | 'ropeScaling'>): Float32Array {
  const half = cfg.headDim / 2;
  const base = Array.from({ length: half }, (_, i) => Math.pow(cfg.ropeTheta, -(2 * i) / cfg.headDim));
  const s = cfg.ropeScaling;
  const type = s?.rope_type ?? s?.type ?? 'default';
  switch (type) {
    case 'default':
      return Float32Array.from(base);
    case 'linear':
      return Float32Array.from(base, (f) => f / (s?.factor ?? 1));
    case 'llama3':
      return Float32Array.from(base, (f) => llama3Frequency(f, s!));
    default:
      throw new Error(`rope_scaling type "${type}" is not supported`);
  }
}

// Llama 3.1's scaling: long wavelengths are divided by `factor`, short ones kept, and the
// band between is interpolated (as in transformers' _compute_llama3_parameters).
function llama3Frequency(freq: number, s: NonNullable<ModelConfig['ropeScaling']>): number {
  const factor = s.factor ?? 8;
  const low = s.low_freq_factor ?? 1;
  const high = s.high_freq_factor ?? 4;
  const original = s.original_max_position_embeddings ?? 8192;
  const wavelen = (2 * Math.PI) / freq;
  if (wavelen < original / high) return freq;
  if (wavelen > original / low) return freq / factor;
  const smooth = (original / wavelen - low) / (high - low);
  return (1 - smooth) * (freq / factor) + smooth * freq;
}
