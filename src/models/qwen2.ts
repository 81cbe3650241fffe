// Qwen2 / Qwen2.5: the Llama decoder with biases on the q, k and v projections.
import { llamaLike } from './llama.js';

export const qwen2 = llamaLike('qwen2', { qkvBias: true });
