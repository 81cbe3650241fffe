// The sampler's side of a step: penalty and bias entries added to the logits
// (logit_bias.wgsl) and the sampler chain with its logprobs (sample.wgsl).
import type { Dispatch } from '../program.js';
import { kernelStruct } from '../kernel-source.js';
import { packArray } from '../wgsl-struct.js';
import { ceil, type BatchMeta, type Ops } from '../ops.js';

/** u32 words of one sequence's grammar mask. */
export function maskWords(vocab: number): number {
  return Math.ceil(vocab / 32);
}

/** One sequence's sampler params: sample.wgsl's SeqParams, field by field (writeStruct checks the names). */
export interface SeqParams {
  temperature: number;
  top_k: number;
  top_p: number;
  /** The uniform draw for the final pick. */
  u: number;
  min_p: number;
  p_less: boolean;
  /** 0: XTC not applied at this step. */
  xtc_threshold: number;
  masked: boolean;
  /** 0: none; else 1 + the number of top logprobs. */
  logprobs: number;
  /** Logprobs of the distribution the token was drawn from, not the temperature-1 row. */
  post_sampling: boolean;
}

/** The sampler's seq-params buffer for `seqs` (sample.wgsl SeqParams, one per sequence). */
export function packSeqParams(seqs: SeqParams[]): ArrayBuffer {
  return packArray(kernelStruct('sample', 'SeqParams'), seqs);
}

/** One penalty entry: logit_bias.wgsl's Entry. */
export interface BiasEntry {
  seq: number;
  token: number;
  repeat: number;
  subtract: number;
}

/** Bytes per penalty entry (logit_bias.wgsl Entry). */
export const BIAS_ENTRY_BYTES = kernelStruct('logit_bias', 'Entry').bytes;

/** The most distinct tokens one request's logit_bias may name (sizes the entry buffer). */
export const MAX_LOGIT_BIAS_TOKENS = 1024;

/** The penalty-entries buffer's contents for `entries` (logit_bias.wgsl Entry). */
export function packBiasEntries(entries: BiasEntry[]): ArrayBuffer {
  return packArray(kernelStruct('logit_bias', 'Entry'), entries);
}

/** Bytes per sequence in the sampler's seq-params buffer. */
export const SEQ_PARAMS_BYTES = kernelStruct('sample', 'SeqParams').bytes;
/** Top logprobs the sampler can return besides the chosen token's (sample.wgsl MAX_TOP). */
export const MAX_TOP_LOGPROBS = 20;


export function logitBias(ops: Ops, logits: GPUBuffer, vocab: number, entries: GPUBuffer): Dispatch {
  const pipeline = ops.pipelines.get('logit_bias');
  const params = ops.params('logit_bias', { vocab });
  return {
    label: 'logit_bias',
    pipeline,
    bindGroup: ops.bind('logit_bias', pipeline, params, { logits, entries }),
    workgroups: (s) => [ceil(s.bias, 64)],
  };
}


export function sample(ops: Ops, logits: GPUBuffer, vocab: number, meta: BatchMeta): Dispatch {
  const pipeline = ops.pipelines.get('sample', {}, { MAX_TOP: MAX_TOP_LOGPROBS });
  const params = ops.params('sample', { vocab, mask_words: maskWords(vocab), neg_inf: -Infinity });
  return {
    label: 'sample',
    pipeline,
    bindGroup: ops.bind('sample', pipeline, params, { logits, seqs: meta.seqParams, out: meta.sampled, masks: meta.masks, logprobs: meta.logprobs }),
    workgroups: (s) => [s.seqs],
  };
}
