// Ends a generation stuck in a loop: true when the last minCount * k tokens are one
// pattern of k tokens repeated minCount times, for some k in [minPatternSize, maxPatternSize].
import type { LoopDetection } from './types.js';

export function isLooping(tokens: number[], detection: LoopDetection): boolean {
  if (detection.minCount < 2 || detection.maxPatternSize <= 0) return false;
  const lo = Math.max(1, detection.minPatternSize);
  for (let k = lo; k <= detection.maxPatternSize; k++) {
    const span = k * detection.minCount;
    if (span > tokens.length) break;
    const start = tokens.length - span;
    let repeats = true;
    for (let i = start + k; i < tokens.length && repeats; i++) repeats = tokens[i] === tokens[i - k];
    if (repeats) return true;
  }
  return false;
}
