// Attention over the paged KV cache: the rotary embedding and cache append
// (rope_kv_write.wgsl), then attention.wgsl or, for a GPU's decode steps,
// attention_decode_workgroup.wgsl.
import type { Dispatch, StepShape } from '../program.js';
import { KV_TEXTURE_WIDTH, kvTypeOf } from '../tensors.js';
import { ceil, type BatchMeta, type Ops } from '../ops.js';

/**
 * Query rows per attention invocation: tokens in steps with a prefill chunk (attention.wgsl
 * TQ), and at most this many heads of one KV head in decode steps (HQ). More rows share
 * more key and value loads, and compile slower: past 3 the compile time grows steeply.
 */
const ATTENTION_GROUP = 3;
/**
 * How Ops.ropeKvWrite rotates: the first rotaryDim dims of each head (default head_dim; 0:
 * none, a NoPE layer) by inv_freq [rotaryDim / 2], the result times mscale (default 1);
 * with headNorm, each head RMS-normed first by its weights ([2 * head_dim]: q's, k's).
 * With `mrope`, pair i turns by one of each token's three positions (meta.ropePos, [tokens,
 * 3] u32: t, h, w): t for i < sections[0], h for i < sections[0] + sections[1], w beyond
 * (Qwen2.5-VL's multimodal RoPE).
 */
export interface RopeOptions {
  headDim: number;
  rotaryDim?: number;
  invFreq?: GPUBuffer;
  mscale?: number;
  headNorm?: GPUBuffer;
  eps?: number;
  mrope?: { sections: readonly [number, number] };
}

/** A pass's positions as the attention kernels read them; ropePos only with RopeOptions.mrope. */
/** The batch metadata the attention kernels read; tokenSlot only a ring layer's, ropePos only multimodal RoPE's (BatchMeta). */
export type AttentionMeta = Pick<BatchMeta, 'tokenPos' | 'tokenTable' | 'blockTable'> & Partial<Pick<BatchMeta, 'tokenSlot'>> & { keyEnd?: GPUBuffer; ropePos?: GPUBuffer };

/**
 * How Ops.attention scores: q times scale, each score soft-capped (0: not), over the last
 * `window` positions (0: all); with `sinks` ([heads] f32), each head's sink logit joins its
 * softmax's denominator (attention_io.wgsl).
 */
export interface AttentionScores {
  scale: number;
  softcap?: number;
  window?: number;
  sinks?: GPUBuffer;
}

/**
 * One layer's KV cache textures (tensors.ts kvCacheTexture) in one of kv_cache.wgsl's
 * layouts: paged blocks (ring 0 or absent), or a ring of `ring` positions per slot (a
 * sliding-window layer's). The engine may replace a paged layer's textures with larger
 * ones as the pool grows; the dispatches bind whichever the layer holds when they run.
 */
export interface KvLayer {
  k: GPUTexture;
  v: GPUTexture;
  ring?: number;
}

/** What Ops.ropeKvWrite reads and writes: one layer's q, k, v [tokens, heads, head_dim] and its KV cache. */
export interface RopeKvInputs {
  q: GPUBuffer;
  k: GPUBuffer;
  v: GPUBuffer;
  heads: number;
  kvHeads: number;
  cache: KvLayer;
  blockSize: number;
}

/** The KV cache's variant values: its keys' and values' types (kv_cache.wgsl). */
function kvVariant(cache: KvLayer): { K_TYPE: string; V_TYPE: string } {
  return { K_TYPE: kvTypeOf(cache.k), V_TYPE: kvTypeOf(cache.v) };
}

/** A dispatch whose bind group (made by `bind` over the layer's textures) is made again when the layer's textures have been replaced. */
function kvDispatch(cache: KvLayer, d: Omit<Dispatch, 'bindGroup'>, bind: (k: GPUTextureView, v: GPUTextureView) => GPUBindGroup): Dispatch {
  let bound: { k: GPUTexture; v: GPUTexture; group: GPUBindGroup } | undefined;
  return {
    ...d,
    get bindGroup() {
      if (bound?.k !== cache.k || bound.v !== cache.v) bound = { k: cache.k, v: cache.v, group: bind(cache.k.createView(), cache.v.createView()) };
      return bound.group;
    },
  };
}

/**
 * Rotary embedding of q (in place) and k, and the append of this pass's k and v to the
 * layer's paged KV cache, in one dispatch (rope_kv_write.wgsl). With `headNorm` ([2 *
 * head_dim]: q's weight, then k's), each head is RMS-normed first (Qwen3's q/k norm).
 */
/** A ring layer's token slots (kv_cache.wgsl token_slot), which it cannot run without. */
function tokenSlots(ops: Ops, label: string, cache: KvLayer, meta: AttentionMeta): GPUBuffer {
  if (!cache.ring) return ops.dummy;
  if (!meta.tokenSlot) throw new Error(`${label}: a ring KV layer needs the tokens' slots`);
  return meta.tokenSlot;
}

export function ropeKvWrite(ops: Ops, label: string, inputs: RopeKvInputs, rope: RopeOptions, meta: AttentionMeta): Dispatch {
  if (rope.headDim % 8 !== 0) throw new Error(`head_dim ${rope.headDim} unsupported (multiple of 8)`);
  const rotDim = rope.rotaryDim ?? rope.headDim;
  if (rotDim % 8 !== 0 || rotDim > rope.headDim) throw new Error(`rotary dims ${rotDim} unsupported (a multiple of 8, at most head_dim ${rope.headDim})`);
  if (rotDim > 0 && !rope.invFreq) throw new Error(`${label}: rotary dims without inverse frequencies`);
  if (rope.mrope && !meta.ropePos) throw new Error(`${label}: multimodal RoPE without its positions`);
  const pipeline = ops.pipelines.get('rope_kv_write', kvVariant(inputs.cache), { NORM: rope.headNorm !== undefined, MROPE: rope.mrope !== undefined, KV_WIDTH: KV_TEXTURE_WIDTH });
  const [sectionT, sectionH] = rope.mrope?.sections ?? [0, 0];
  const params = ops.params('rope_kv_write', {
    heads: inputs.heads, kv_heads: inputs.kvHeads, head_dim: rope.headDim, eps: rope.eps ?? 0, block_size: inputs.blockSize, rot_dim: rotDim, mscale: rope.mscale ?? 1, ring: inputs.cache.ring ?? 0,
    section_t: sectionT, section_h: sectionH,
  });
  const token_slot = tokenSlots(ops, label, inputs.cache, meta);
  return kvDispatch(inputs.cache, { label, pipeline, workgroups: (s) => [ceil(s.tokens * (inputs.heads + inputs.kvHeads), 64)] }, (k_cache, v_cache) => ops.bind(label, pipeline, params, {
    q: inputs.q, token_pos: meta.tokenPos, inv_freq: rope.invFreq ?? ops.dummy, norm_weight: rope.headNorm ?? ops.dummy, k: inputs.k, v: inputs.v,
    token_table: meta.tokenTable, block_table: meta.blockTable, k_cache, v_cache, token_slot, rope_pos: meta.ropePos ?? ops.dummy,
  }));
}


/**
 * Causal self-attention of a step's tokens over their sequences' paged KV caches: first
 * the rotary embedding and the cache append (Ops.ropeKvWrite), then one of two recorded
 * kernels. For steps of decode tokens only, on a CPU adapter attention.wgsl with one token
 * per invocation and the heads of a KV head that share its key and value loads (up to
 * ATTENTION_GROUP; the largest divisor of the group size), and on a GPU
 * attention_decode_workgroup.wgsl. For steps with a prefill chunk, attention.wgsl with
 * groups of ATTENTION_GROUP consecutive tokens of one head (sharing the loads when they
 * belong to one sequence).
 * With `keyEnd` ([tokens] u32), a token attends to its sequence's keys at positions
 * 0 ..= keyEnd[token] instead of 0 ..= its own position: bidirectional attention (an
 * encoder's) when each token's keyEnd is its sequence's last position. The cache append
 * still writes each token at its own position.
 */
export function attention(ops: Ops, label: string, inputs: RopeKvInputs, out: GPUBuffer, rope: RopeOptions & AttentionScores, meta: AttentionMeta): Dispatch[] {
  return [ropeKvWrite(ops, `${label}.rope_kv_write`, inputs, rope, meta), ...cachedAttention(ops, label, inputs, out, rope, meta)];
}

/**
 * Ops.attention without the cache append: the step's queries attend to keys and values
 * already in the cache (an encoder-decoder's cross-attention over the encoder's output,
 * written once per input by Ops.ropeKvWrite), each up to its keyEnd (else its position).
 */
export function cachedAttention(ops: Ops, label: string, inputs: RopeKvInputs, out: GPUBuffer, rope: RopeOptions & AttentionScores, meta: AttentionMeta): Dispatch[] {
  if (rope.headDim > 256) throw new Error(`head_dim ${rope.headDim} unsupported (at most 256)`);
  if (inputs.heads % inputs.kvHeads !== 0) throw new Error(`${inputs.heads} attention heads are not a multiple of ${inputs.kvHeads} KV heads`);
  const params = ops.params('attention_io', {
    heads: inputs.heads, kv_heads: inputs.kvHeads, block_size: inputs.blockSize, scale: rope.scale, window: rope.window ?? 0, softcap: rope.softcap ?? 0, has_sinks: rope.sinks !== undefined, ring: inputs.cache.ring ?? 0,
  });
  const token_slot = tokenSlots(ops, label, inputs.cache, meta);
  // The group's registers grow with head_dim; past 128 a group compiles slowly.
  const group = rope.headDim <= 128 ? ATTENTION_GROUP : 1;
  const perKv = inputs.heads / inputs.kvHeads;
  let sharing = group;
  while (perKv % sharing !== 0) sharing--;
  // Sampled textures read f32 and f16 texels through one binding type; storage ones name their format.
  const read = ops.textureRead();
  const variant = { KV_READ: read, D4: rope.headDim / 4, ...(read === 'storage' ? kvVariant(inputs.cache) : {}) };
  const attend = (pipeline: GPUComputePipeline, workgroups: Dispatch['workgroups']) =>
    kvDispatch(inputs.cache, { label: `${label}.attention`, pipeline, workgroups }, (k_cache, v_cache) => ops.bind(`${label}.attention`, pipeline, params, {
      q: inputs.q, k_cache, v_cache, token_pos: meta.keyEnd ?? meta.tokenPos, token_table: meta.tokenTable, block_table: meta.blockTable, out, sinks: rope.sinks ?? ops.dummy, token_slot,
    }));
  /** attention.wgsl over groups of tq tokens x hq heads. */
  const grouped = (tq: number, hq: number, active: (s: StepShape) => boolean): Dispatch => {
    const wg = Math.max(1, Math.floor(8 / hq));
    const pipeline = ops.pipelines.get('attention', { ...variant, TQ: tq, HQ: hq }, { WG: wg, KV_WIDTH: KV_TEXTURE_WIDTH });
    return attend(pipeline, (s) => (active(s) ? [ceil(ceil(s.tokens, tq) * (inputs.heads / hq), wg)] : [0]));
  };
  // Steps with tokens beyond one per sequence hold a prefill chunk.
  const prefillChunk = (s: StepShape) => s.tokens > s.seqs;
  const decodeOnly = (s: StepShape) => !prefillChunk(s);
  let decode: Dispatch;
  if (ops.gpu.isCpu) {
    decode = grouped(1, sharing, decodeOnly);
  } else {
    const pipeline = ops.pipelines.get('attention_decode_workgroup', variant, { KV_WIDTH: KV_TEXTURE_WIDTH });
    decode = attend(pipeline, (s) => [decodeOnly(s) ? s.tokens * inputs.heads : 0]);
  }
  return [decode, grouped(group, 1, prefillChunk)];
}
