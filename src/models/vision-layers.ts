// The vision-tower layer vocabulary, beside the decoder's (./layers.ts): a ViT encoder over
// one image's patches, run as a pass of its own with one row per patch. Patch embedding is
// a linear layer over the unfolded patches (the host lays each patch out as the conv
// weight's [channels, y, x] order), learned positions are gathered by patch index, and
// attention is bidirectional over the image (every patch's keyEnd is the last patch), its
// K and V going through one KV texture pair that the layers, running one after another,
// share. Blocks are pre-norm: h += attn(LN1(h)), h += fc2(act(fc1(LN2(h)))), all projections
// biased. Tensors are named as transformers' SigLIP (vision_model.embeddings.*,
// vision_model.encoder.layers.N.{self_attn,mlp,layer_norm1,layer_norm2}.*,
// vision_model.post_layernorm) under the tower's prefix.
import type { Activation } from '../runtime/ops/linear.js';
import type { Ops } from '../runtime/ops.js';
import type { Dispatch } from '../runtime/program.js';
import { kvCacheTexture, storageBuffer, type GpuWeight } from '../runtime/tensors.js';
import type { MatrixSource, VectorSource } from './checkpoint.js';

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
const KV_BLOCK = 16;

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
  const blocks = Math.ceil(N / KV_BLOCK);
  const meta = {
    tokenPos: filled('patch_index', Uint32Array.from({ length: N }, (_, i) => i)),
    tokenTable: filled('token_table', new Uint32Array(N)),
    blockTable: filled('block_table', Uint32Array.from({ length: blocks }, (_, i) => i)),
    keyEnd: filled('key_end', new Uint32Array(N).fill(N - 1)),
  };
  const kvTexels = (blocks * KV_BLOCK * V) / 4;
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
      ...ops.attention(`${l}.self_attn`, { q, k, v, heads, kvHeads: heads, cache, blockSize: KV_BLOCK }, attn, { headDim, rotaryDim: 0, scale: headDim ** -0.5 }, meta),
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
