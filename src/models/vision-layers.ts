// The vision-tower layer vocabulary, beside the decoder's (./layers.ts), and the encoder
// interface the engine and server use (VisionEncoder). vitEncoder is SigLIP's (Gemma 3),
// windowedVitEncoder Qwen2.5-VL's (RMSNorm, SwiGLU, 2D rotary positions through the rope
// kernel's multimodal variant, each window a sequence of its own in the shared KV texture);
// both run as a pass of their own over one image's patches, one row per patch. In vitEncoder,
// the patch embedding is a linear layer over the unfolded patches (the host lays each patch out
// as the conv weight's [channels, y, x] order), learned positions are gathered by patch index,
// and attention is bidirectional over the image (every patch's keyEnd is the last patch), its K
// and V going through one KV texture pair that the layers, running one after another, share.
// Blocks are pre-norm: h += attn(LN1(h)), h += fc2(act(fc1(LN2(h)))), all projections biased.
// Tensors are named as transformers' SigLIP (vision_model.embeddings.*,
// vision_model.encoder.layers.N.{self_attn,mlp,layer_norm1,layer_norm2}.*,
// vision_model.post_layernorm) under the tower's prefix.
import type { Activation } from '../runtime/ops/linear.js';
import type { Ops } from '../runtime/ops.js';
import type { Dispatch } from '../runtime/program.js';
import { kvCacheTexture, storageBuffer, type GpuWeight } from '../runtime/tensors.js';
import type { MatrixSource, VectorSource } from './checkpoint.js';

/** Decoded RGB pixels, row-major, 3 bytes a pixel. */
export interface RgbImage {
  width: number;
  height: number;
  pixels: Uint8Array;
}

/** An image's soft tokens: [tokens, text hidden] row-major, and for a multimodal-RoPE model their grid (PromptImage.grid). */
export interface EncodedImage {
  rows: Float32Array;
  grid?: { h: number; w: number };
}

/** A vision-language family's image encoder, as the server and engine use it. */
export interface VisionEncoder {
  /** Soft tokens each image becomes, where that does not depend on its size (Gemma 3). */
  tokensPerImage?: number;
  /** The most soft tokens one image may be: what one prefill batch holds (--batch-size). */
  maxImageTokens: number;
  /** The id of the soft tokens' placeholder token in the prompt. */
  imageToken: number;
  /** What the chat template writes where an image goes (for a {"type": "image"} part). */
  marker: string;
  /** Soft tokens an image of this size becomes. */
  tokens(size: { width: number; height: number }): number;
  /** The prompt text the marker stands for, for an image of this size: its placeholder tokens with their delimiters. */
  expansion(size: { width: number; height: number }): string;
  encode(image: RgbImage): Promise<EncodedImage>;
}

export interface VitSpec {
  /** Where the tower's tensors are, e.g. "vision_tower.vision_model". */
  prefix: string;
  hidden: number;
  intermediate: number;
  layers: number;
  heads: number;
  /** Patches per image (rows of the pass). */
  patches: number;
  /** Values per unfolded patch: channels x patch x patch. */
  patchValues: number;
  eps: number;
  activation: Activation;
}

/** How the vocabulary loads its tensors (the caller's checkpoint, names as the spec's prefix gives them). */
export interface VisionLoader {
  matrix(...sources: MatrixSource[]): GpuWeight;
  /** The patch embedding as [hidden, patchValues] in the conv weight's [channels, y, x] order. */
  patchEmbedding(name: string, hidden: number, patchValues: number): GpuWeight;
  vector(sources: VectorSource | VectorSource[], shift?: number): GPUBuffer;
}

/** The pass's buffers: the host writes `patches` ([patches, patchValues] f32) and reads the hidden states from `h`. */
export interface VitBuffers {
  patches: GPUBuffer;
  h: GPUBuffer;
}

/** Rows per block of the shared KV texture. */
export const VISION_KV_BLOCK = 16;

/** The encoder's dispatches through its final LayerNorm, and the buffers the host fills and reads. */
export function vitEncoder(ops: Ops, load: VisionLoader, spec: VitSpec): { dispatches: Dispatch[]; buffers: VitBuffers } {
  const device = ops.gpu.device;
  const { prefix: p, hidden: V, intermediate: I, patches: N, heads } = spec;
  const headDim = V / heads;
  if (!Number.isInteger(headDim)) throw new Error(`vision hidden size ${V} does not split into ${heads} heads`);
  const f32 = (n: number, label: string) => storageBuffer(device, n * 4, `vision.${label}`);
  const filled = (label: string, values: Uint32Array) => {
    const b = f32(values.length, label);
    device.queue.writeBuffer(b, 0, values);
    return b;
  };
  const blocks = Math.ceil(N / VISION_KV_BLOCK);
  const meta = {
    tokenPos: filled('patch_index', Uint32Array.from({ length: N }, (_, i) => i)),
    tokenTable: filled('token_table', new Uint32Array(N)),
    blockTable: filled('block_table', Uint32Array.from({ length: blocks }, (_, i) => i)),
    keyEnd: filled('key_end', new Uint32Array(N).fill(N - 1)),
  };
  const kvTexels = (blocks * VISION_KV_BLOCK * V) / 4;
  // The tower's keys and values live for one image: kept in f32, as its activations.
  const cache = { k: kvCacheTexture(device, kvTexels, 'f32', 'vision.k_cache'), v: kvCacheTexture(device, kvTexels, 'f32', 'vision.v_cache') };
  const buffers = { patches: f32(N * spec.patchValues, 'patches'), h: f32(N * V, 'h') };
  const [xn, q, k, v, attn] = ['xn', 'q', 'k', 'v', 'attn'].map((label) => f32(N * V, label)) as [GPUBuffer, GPUBuffer, GPUBuffer, GPUBuffer, GPUBuffer];
  const hiddenAct = f32(N * I, 'mlp');
  const { h } = buffers;
  const layerNorm = (name: string, out?: GPUBuffer) =>
    ops.layernorm(name, h, load.vector({ name: `${name}.weight`, length: V }), load.vector({ name: `${name}.bias`, length: V }), { width: V, eps: spec.eps, out });
  const biased = (names: string[], rows: number, cols: number) => ({
    w: load.matrix(...names.map((prefix) => ({ prefix, rows, cols }))),
    bias: load.vector(names.map((name) => ({ name: `${name}.bias`, length: rows }))),
  });
  const e = `${p}.embeddings`;
  const patchBias = load.vector({ name: `${e}.patch_embedding.bias`, length: V });
  const dispatches: Dispatch[] = [
    ...ops.linear(`${e}.patch_embedding`, load.patchEmbedding(`${e}.patch_embedding.weight`, V, spec.patchValues), buffers.patches, h, { bias: patchBias }),
    ...ops.embedding(load.matrix({ prefix: `${e}.position_embedding`, rows: N, cols: V }), meta.tokenPos, h, 1, true),
  ];
  for (let i = 0; i < spec.layers; i++) {
    const l = `${p}.encoder.layers.${i}`;
    const qkv = biased(['q_proj', 'k_proj', 'v_proj'].map((n) => `${l}.self_attn.${n}`), V, V);
    const o = biased([`${l}.self_attn.out_proj`], V, V);
    const fc1 = biased([`${l}.mlp.fc1`], I, V);
    const fc2 = biased([`${l}.mlp.fc2`], V, I);
    dispatches.push(
      layerNorm(`${l}.layer_norm1`, xn),
      ...ops.linear(`${l}.self_attn.qkv`, qkv.w, xn, [q, k, v], { bias: qkv.bias }),
      ...ops.attention(`${l}.self_attn`, { q, k, v, heads, kvHeads: heads, cache, blockSize: VISION_KV_BLOCK }, attn, { headDim, rotaryDim: 0, scale: headDim ** -0.5 }, meta),
      ...ops.linear(`${l}.self_attn.out_proj`, o.w, attn, h, { bias: o.bias, accumulate: true }),
      layerNorm(`${l}.layer_norm2`, xn),
      ...ops.linear(`${l}.mlp.fc1`, fc1.w, xn, hiddenAct, { bias: fc1.bias }),
      ops.glu(hiddenAct, undefined, I, spec.activation),
      ...ops.linear(`${l}.mlp.fc2`, fc2.w, hiddenAct, h, { bias: fc2.bias, accumulate: true }),
    );
  }
  dispatches.push(layerNorm(`${p}.post_layernorm`));
  return { dispatches, buffers };
}

/**
 * Where one attention pattern of a tower lays its keys out in the shared KV texture, as
 * Ops.attention reads them: each row's position in its group, its group's block-table
 * offset, the block table, and the last position its group holds (every row sees its whole
 * group both ways). The host fills them per image.
 */
export interface VisionAttentionMeta {
  tokenPos: GPUBuffer;
  tokenTable: GPUBuffer;
  blockTable: GPUBuffer;
  keyEnd: GPUBuffer;
}

export interface WindowedVitSpec {
  /** Where the tower's tensors are, e.g. "visual". */
  prefix: string;
  hidden: number;
  intermediate: number;
  layers: number;
  heads: number;
  /** The most patches an image may have (rows of the pass). */
  maxPatches: number;
  /** Values per unfolded patch: channels x patch x patch. */
  patchValues: number;
  eps: number;
  activation: Activation;
  /** The blocks that attend over the whole image; the others attend within their window. */
  fullAttention: ReadonlySet<number>;
}

/**
 * The buffers the host fills per image of a WindowedVitSpec tower: the patches, each row's
 * 2D rotary positions ([patches, 3] u32: 0, row, column), and the window and whole-image
 * attention layouts; the blocks' output is `h`.
 */
export interface WindowedVitBuffers {
  patches: GPUBuffer;
  h: GPUBuffer;
  ropePos: GPUBuffer;
  window: VisionAttentionMeta;
  full: VisionAttentionMeta;
  /** KV blocks of VISION_KV_BLOCK rows the texture holds: a layout may use at most this many. */
  kvBlocks: number;
}

/**
 * Qwen2.5-VL's vision blocks (transformers' Qwen2_5_VisionTransformerPretrainedModel up to
 * its merger): a bias-free patch embedding, then per block h += proj(attn(RMSNorm1(h))) with
 * q, k, v from one biased `attn.qkv`, 2D rotary positions (the first half of each head's
 * rotary pairs turn by the patch's row, the second by its column, both over the same
 * frequencies: `invFreq`), attention within the row's window or, in the fullAttention
 * blocks, over the image; and h += down(act(gate(x)) * up(x)), x = RMSNorm2(h), all three
 * projections biased. Tensors as transformers names them under the prefix:
 * patch_embed.proj, blocks.N.{norm1,norm2,attn.qkv,attn.proj,mlp.gate_proj,mlp.up_proj,mlp.down_proj}.
 */
export function windowedVitEncoder(ops: Ops, load: VisionLoader, spec: WindowedVitSpec): { dispatches: Dispatch[]; buffers: WindowedVitBuffers } {
  const device = ops.gpu.device;
  const { prefix: p, hidden: V, intermediate: I, maxPatches: N, heads } = spec;
  const headDim = V / heads;
  if (!Number.isInteger(headDim) || headDim % 8 !== 0) throw new Error(`vision hidden size ${V} does not split into ${heads} heads of a multiple of 8`);
  const f32 = (n: number, label: string) => storageBuffer(device, n * 4, `vision.${label}`);
  // A window's rows may end inside a block: a layout wastes less than a block per window,
  // fewer than ceil(N / 16) + 8 in all.
  const kvBlocks = 2 * Math.ceil(N / VISION_KV_BLOCK) + 8;
  const attentionMeta = (label: string): VisionAttentionMeta => ({
    tokenPos: f32(N, `${label}.pos`), tokenTable: f32(N, `${label}.token_table`), blockTable: f32(kvBlocks, `${label}.block_table`), keyEnd: f32(N, `${label}.key_end`),
  });
  const kvTexels = (kvBlocks * VISION_KV_BLOCK * V) / 4;
  const cache = { k: kvCacheTexture(device, kvTexels, 'f32', 'vision.k_cache'), v: kvCacheTexture(device, kvTexels, 'f32', 'vision.v_cache') };
  const buffers: WindowedVitBuffers = {
    patches: f32(N * spec.patchValues, 'patches'), h: f32(N * V, 'h'), ropePos: f32(3 * N, 'rope_pos'),
    window: attentionMeta('window'), full: attentionMeta('full'), kvBlocks,
  };
  const [xn, q, k, v, attn] = ['xn', 'q', 'k', 'v', 'attn'].map((label) => f32(N * V, label)) as [GPUBuffer, GPUBuffer, GPUBuffer, GPUBuffer, GPUBuffer];
  const [gate, up] = ['gate', 'up'].map((label) => f32(N * I, label)) as [GPUBuffer, GPUBuffer];
  const { h } = buffers;
  const rmsNorm = (name: string) => ops.rmsnorm(name, h, load.vector({ name: `${name}.weight`, length: V }), xn, { width: V, eps: spec.eps });
  // Rows then columns: each half of the rotary pairs over theta^(-2j / (head_dim / 2)), theta 10000.
  const quarter = headDim / 4;
  const freqs = Float32Array.from({ length: 2 * quarter }, (_, i) => 10000 ** (-(2 * (i % quarter)) / (2 * quarter)));
  const invFreq = f32(freqs.length, 'inv_freq');
  device.queue.writeBuffer(invFreq, 0, freqs);
  const rope = { mrope: { sections: [0, quarter] as const }, invFreq, rotaryDim: headDim };
  const dispatches: Dispatch[] = [...ops.linear(`${p}.patch_embed.proj`, load.patchEmbedding(`${p}.patch_embed.proj.weight`, V, spec.patchValues), buffers.patches, h)];
  for (let i = 0; i < spec.layers; i++) {
    const b = `${p}.blocks.${i}`;
    const qkvName = `${b}.attn.qkv`;
    const qkv = load.matrix(...[0, 1, 2].map((s) => ({ prefix: qkvName, rows: 3 * V, cols: V, slice: { first: s * V, rows: V } })));
    const meta = spec.fullAttention.has(i) ? buffers.full : buffers.window;
    const mlpNames = ['gate_proj', 'up_proj'].map((n) => `${b}.mlp.${n}`);
    dispatches.push(
      rmsNorm(`${b}.norm1`),
      ...ops.linear(qkvName, qkv, xn, [q, k, v], { bias: load.vector({ name: `${qkvName}.bias`, length: 3 * V }) }),
      ...ops.attention(`${b}.attn`, { q, k, v, heads, kvHeads: heads, cache, blockSize: VISION_KV_BLOCK }, attn, { headDim, ...rope, scale: headDim ** -0.5 }, { ...meta, ropePos: buffers.ropePos }),
      ...ops.linear(`${b}.attn.proj`, load.matrix({ prefix: `${b}.attn.proj`, rows: V, cols: V }), attn, h, { bias: load.vector({ name: `${b}.attn.proj.bias`, length: V }), accumulate: true }),
      rmsNorm(`${b}.norm2`),
      ...ops.linear(`${b}.mlp.gate_up`, load.matrix(...mlpNames.map((prefix) => ({ prefix, rows: I, cols: V }))), xn, [gate, up], { bias: load.vector(mlpNames.map((name) => ({ name: `${name}.bias`, length: I }))) }),
      ops.glu(gate, up, I, spec.activation),
      ...ops.linear(`${b}.mlp.down_proj`, load.matrix({ prefix: `${b}.mlp.down_proj`, rows: V, cols: I }), gate, h, { bias: load.vector({ name: `${b}.mlp.down_proj.bias`, length: V }), accumulate: true }),
    );
  }
  return { dispatches, buffers };
}
