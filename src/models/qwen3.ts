// Qwen3: the Llama decoder with a per-head RMSNorm on q and k before RoPE, and an
// explicit head_dim (not hidden / heads).
import { llamaLike } from './llama.js';

export const qwen3 = llamaLike('qwen3', { qkNorm: true });
