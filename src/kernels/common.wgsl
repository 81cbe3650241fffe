// Prepended to every kernel. The step uniform is the only state that changes between
// forward passes (everything else is bound once at load), so recorded bind groups replay.
struct Step {
  n_tokens: u32,  // tokens in this forward pass (all sequences, prefill and decode)
  n_seqs: u32,    // sequences that sample a token this pass
  n_bias: u32,    // logit penalty entries this pass (logit_bias.wgsl)
}
@group(0) @binding(1) var<uniform> step: Step;

// Rows a row-wise op covers: one per token, or one per sampling sequence (the head).
fn row_count(per_seq: u32) -> u32 {
  return select(step.n_tokens, step.n_seqs, per_seq == 1u);
}
