// Included by every kernel that reads the step uniform (the speech kernels of
// runtime/ops/audio.ts take their shapes in params instead). The step uniform is the only
// state that changes between forward passes (everything else is bound once at load), so
// recorded bind groups replay.
struct Step {
  n_tokens: u32,  // tokens in this forward pass (all sequences, prefill and decode)
  n_seqs: u32,    // sequences that sample a token this pass
  n_bias: u32,    // logit penalty entries this pass (logit_bias.wgsl)
}
@group(0) @binding(1) var<uniform> step: Step;
#include "math"

// Rows a row-wise op covers: one per token, or one per sampling sequence (the head).
fn row_count(per_seq: u32) -> u32 {
  return select(step.n_tokens, step.n_seqs, per_seq == 1u);
}

// A gated MLP's activation of its gate, by code: SiLU, GELU with the tanh approximation
// (gelu_pytorch_tanh), GELU (erf), tanh (a sequence classifier's pooler), squared ReLU
// (Nemotron-H's plain MLP), quick GELU x * sigmoid(1.702 x) (GPT-OSS's experts). The host
// reads these codes (runtime/kernel-source.ts kernelEnum).
const ACT_SILU: u32 = 0u;
const ACT_GELU_TANH: u32 = 1u;
const ACT_GELU: u32 = 2u;
const ACT_TANH: u32 = 3u;
const ACT_RELU2: u32 = 4u;
const ACT_GELU_QUICK: u32 = 5u;
fn activate(x: f32, act: u32) -> f32 {
  if (act == ACT_RELU2) { let r = max(x, 0.0); return r * r; }
  if (act == ACT_TANH) { return tanh_sat(x); }
  if (act == ACT_GELU_QUICK) { return x / (1.0 + exp(-1.702 * x)); }
  if (act == ACT_GELU_TANH) { return 0.5 * x * (1.0 + tanh_sat(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
  if (act == ACT_GELU) { return 0.5 * x * (1.0 + erf_approx(x * 0.7071067811865476)); }
  return x / (1.0 + exp(-x));
}

// cap * tanh(x / cap) (Gemma 2's logit soft-capping); x itself when cap is 0.
fn softcap(x: f32, cap: f32) -> f32 {
  if (cap == 0.0) { return x; }
  return cap * tanh_sat(x / cap);
}
