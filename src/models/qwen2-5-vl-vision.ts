// Qwen2.5-VL's image encoder (Qwen2_5_VLForConditionalGeneration's vision side), as
// transformers' Qwen2VLImageProcessor and Qwen2_5_VisionTransformerPretrainedModel compute it:
// - dynamic resolution: the image resized to smartResize's multiples of patch x merge (28)
//   within min_pixels and max_pixels (--image-min-tokens / --image-max-tokens replace them),
//   rescaled and normalised; patches of patch x patch, listed merge block by merge block
//   (the merge x merge patches that become one token together);
// - the patch embedding, a Conv3d over temporal_patch_size frames of one image: the frames
//   are the same picture, so the kernel's temporal slices are summed into one 2D kernel at load;
// - the blocks (./vision-layers.ts windowedVitEncoder) over the patches in window order: the
//   merged grid cut into windows of window_size / patch / merge tokens a side (the last ones
//   short), each attending within itself except in fullatt_block_indexes' blocks;
// - the merger: RMSNorm (eps 1e-6) of each patch, the merge block's patches concatenated,
//   mlp.0, exact GELU, mlp.2 into the language model's width; then the tokens back in
//   row-major grid order.
// Checkpoints keep the tower under visual. (transformers before 4.52), model.visual.
// (4.52+) or vision_tower. (mlx-vlm, whose Conv3d weight is channels-last [out, t, y, x, c]);
// mlx-vlm's quantized linear layers load as the language model's do. A vision config this
// code does not implement is refused at load, naming the field.
import { mapRead, type Gpu } from '../runtime/gpu.js';
import { Ops } from '../runtime/ops.js';
import { Program } from '../runtime/program.js';
import { filledBuffer, storageBuffer, type GpuWeight } from '../runtime/tensors.js';
import { Checkpoint, loadMatrix, loadVector, type MatrixSource } from './checkpoint.js';
import { configReader, readConfigFiles, readModelConfig } from './config.js';
import { preprocessImage, readImageNormalization, readPreprocessorConfig, type ImageNormalization } from './gemma3-vision.js';
import { VISION_KV_BLOCK, windowedVitEncoder, type RgbImage, type VisionAttentionMeta, type VisionEncoder, type VisionLoader } from './vision-layers.js';

/** Qwen2VLImageProcessor's fields. */
export interface QwenImageProcessor extends ImageNormalization {
  patch: number;
  merge: number;
  minPixels: number;
  maxPixels: number;
}

/** Image token bounds that replace the preprocessor's pixel bounds (--image-min-tokens, --image-max-tokens). */
export interface ImageTokenBounds {
  minTokens?: number;
  maxTokens?: number;
}

/** CLIP's mean and std, Qwen2VLImageProcessor's defaults. */
const CLIP_MEAN: [number, number, number] = [0.48145466, 0.4578275, 0.40821073];
const CLIP_STD: [number, number, number] = [0.26862954, 0.26130258, 0.27577711];

/** preprocessor_config.json as Qwen2VLImageProcessor reads it, token bounds (of (patch x merge)^2 pixels each) replacing its pixel bounds. */
export function readQwenImageProcessor(dir: string, bounds: ImageTokenBounds = {}): QwenImageProcessor {
  const c = readPreprocessorConfig(dir);
  const patch = c.count('patch_size', 14);
  const merge = c.count('merge_size', 2);
  c.oneOf('temporal_patch_size', [2], 2);
  const size = (c.raw.size ?? {}) as { shortest_edge?: number; longest_edge?: number };
  const factor = (patch * merge) ** 2;
  const minPixels = bounds.minTokens !== undefined ? bounds.minTokens * factor : c.count('min_pixels', size.shortest_edge ?? 56 * 56);
  const maxPixels = bounds.maxTokens !== undefined ? bounds.maxTokens * factor : c.count('max_pixels', size.longest_edge ?? 28 * 28 * 1280);
  if (minPixels > maxPixels) throw new Error(`${dir}: images of at least ${minPixels} pixels (${minPixels / factor} tokens) cannot be at most ${maxPixels} (${maxPixels / factor} tokens)`);
  return { patch, merge, minPixels, maxPixels, ...readImageNormalization(c, { resample: 3, mean: CLIP_MEAN, std: CLIP_STD }) };
}

/** Python's round(): halves to the even neighbour. */
function roundHalfEven(x: number): number {
  const r = Math.round(x);
  return Math.abs(x % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/**
 * transformers' smart_resize: height and width rounded to multiples of `factor`, then scaled
 * (keeping the aspect ratio) into [minPixels, maxPixels] pixels; an aspect ratio over 200 is refused.
 */
export function smartResize(height: number, width: number, factor: number, minPixels: number, maxPixels: number): { height: number; width: number } {
  if (Math.max(height, width) / Math.min(height, width) > 200) throw new Error(`an image of ${width}x${height} pixels has an aspect ratio over 200`);
  let h = roundHalfEven(height / factor) * factor;
  let w = roundHalfEven(width / factor) * factor;
  if (h * w > maxPixels) {
    const beta = Math.sqrt((height * width) / maxPixels);
    h = Math.max(factor, Math.floor(height / beta / factor) * factor);
    w = Math.max(factor, Math.floor(width / beta / factor) * factor);
  } else if (h * w < minPixels) {
    const beta = Math.sqrt(minPixels / (height * width));
    h = Math.ceil((height * beta) / factor) * factor;
    w = Math.ceil((width * beta) / factor) * factor;
  }
  return { height: h, width: w };
}

/**
 * transformers' get_window_index for one image: the tokens of an h x w grid (row-major
 * indices) in window order, windows of side x side tokens row by row (the last row and
 * column of windows short), and each window's token count.
 */
export function windowOrder(h: number, w: number, side: number): { tokens: number[]; windows: number[] } {
  const tokens: number[] = [];
  const windows: number[] = [];
  for (let wy = 0; wy < h; wy += side) {
    for (let wx = 0; wx < w; wx += side) {
      const before = tokens.length;
      for (let y = wy; y < Math.min(wy + side, h); y++) for (let x = wx; x < Math.min(wx + side, w); x++) tokens.push(y * w + x);
      windows.push(tokens.length - before);
    }
  }
  return { tokens, windows };
}

/** The image encoder of a qwen2_5_vl checkpoint; undefined for any other. `batchTokens`: the most tokens one image may be. */
export async function loadQwen25VlVision(gpu: Gpu, dir: string, batchTokens: number, bounds: ImageTokenBounds = {}): Promise<VisionEncoder | undefined> {
  const { json, file } = readConfigFiles(dir);
  if (json.model_type !== 'qwen2_5_vl' || json.vision_config == null) return undefined;
  const top = configReader({ ...json, text_config: undefined }, file);
  const vc = configReader(json.vision_config as Record<string, unknown>, `${file}: vision_config`);
  vc.oneOf('hidden_act', ['silu'], 'silu');
  vc.oneOf('in_chans', [3], 3);
  vc.oneOf('in_channels', [3], 3);
  vc.oneOf('temporal_patch_size', [2], 2);
  const hidden = vc.count('hidden_size');
  const layers = vc.count('depth');
  const heads = vc.count('num_heads');
  const patch = vc.count('patch_size', 14);
  const merge = vc.count('spatial_merge_size', 2);
  const windowSize = vc.count('window_size', 112);
  if (windowSize % (patch * merge) !== 0) vc.fail('window_size', `${windowSize} is not a multiple of patch_size x spatial_merge_size = ${patch * merge}`);
  const listed: unknown = vc.raw.fullatt_block_indexes ?? [];
  if (!Array.isArray(listed) || !listed.every((i) => Number.isInteger(i) && i >= 0 && i < layers)) vc.fail('fullatt_block_indexes', `must list block indexes below depth ${layers}`);
  const fullAttention = new Set(listed as number[]);
  const { hidden: textHidden, quantization } = readModelConfig(dir);
  const outHidden = vc.count('out_hidden_size', textHidden);
  if (outHidden !== textHidden) vc.fail('out_hidden_size', `${outHidden} differs from the language model's hidden_size ${textHidden}`);
  const pre = readQwenImageProcessor(dir, bounds);
  if (pre.patch !== patch || pre.merge !== merge) throw new Error(`${dir}: preprocessor_config.json's patch_size ${pre.patch} and merge_size ${pre.merge} differ from the vision_config's ${patch} and ${merge}`);
  const factor = patch * merge;
  const units = merge * merge;
  const gridOf = (size: { width: number; height: number }) => {
    const s = smartResize(size.height, size.width, factor, pre.minPixels, pre.maxPixels);
    return { ...s, h: s.height / factor, w: s.width / factor };
  };
  const maxImageTokens = Math.min(Math.floor(pre.maxPixels / (factor * factor)), batchTokens);
  const maxPatches = maxImageTokens * units;

  const ckpt = new Checkpoint(dir);
  const base = ['visual', 'model.visual', 'vision_tower'].find((p) => ckpt.has(`${p}.merger.ln_q.weight`));
  if (base === undefined) throw new Error(`${dir}: config.json has a vision_config but the checkpoint has no visual.merger tensors`);
  const named = (name: string) => `${base}.${name}`;
  const patchValues = 3 * patch * patch;
  const load: VisionLoader = {
    matrix: (...sources: MatrixSource[]) => loadMatrix(gpu.device, gpu, ckpt, sources, quantization),
    vector: (sources, shift) => loadVector(gpu.device, ckpt, [sources].flat(), shift),
    patchEmbedding: (name, rows, cols) => {
      const { shape } = ckpt.entry(name).info;
      const w = ckpt.readF32(name);
      const mlx = shape.join() === [rows, 2, patch, patch, 3].join();
      if (!mlx && shape.join() !== [rows, 3, 2, patch, patch].join()) throw new Error(`${dir}: ${name} has shape [${shape.join(', ')}], expected [${rows}, 3, 2, ${patch}, ${patch}] or mlx's [${rows}, 2, ${patch}, ${patch}, 3]`);
      // Both frames' slices summed, as [channels, y, x].
      const folded = new Float32Array(rows * cols);
      for (let o = 0; o < rows; o++) {
        for (let c = 0; c < 3; c++) for (let t = 0; t < 2; t++) for (let y = 0; y < patch; y++) for (let x = 0; x < patch; x++) {
          const from = mlx ? (((o * 2 + t) * patch + y) * patch + x) * 3 + c : (((o * 3 + c) * 2 + t) * patch + y) * patch + x;
          folded[o * cols + (c * patch + y) * patch + x]! += w[from]!;
        }
      }
      return {
        format: 'f32', rows, cols, groupSize: 0,
        parts: [{ rowStart: 0, rows, data: filledBuffer(gpu.device, folded.byteLength, name, (dst) => dst.set(new Uint8Array(folded.buffer))) }],
      } satisfies GpuWeight;
    },
  };
  const ops = new Ops(gpu);
  const intermediate = vc.count('intermediate_size');
  // Quantized linear layers read their input through one shared texture: sized for the widest, the MLP's.
  if (quantization) ops.reserveMatmulInput(maxPatches * Math.max(hidden, intermediate) * 4);
  const vt = windowedVitEncoder(ops, load, {
    prefix: base, hidden, intermediate, layers, heads, maxPatches, patchValues, eps: 1e-6, activation: 'silu', fullAttention,
  });
  const f32 = (n: number, label: string) => storageBuffer(gpu.device, n * 4, `vision.${label}`);
  const normed = f32(maxPatches * hidden, 'ln_q');
  const tower = new Program();
  tower.add(...vt.dispatches, ops.rmsnorm(named('merger.ln_q'), vt.buffers.h, load.vector({ name: named('merger.ln_q.weight'), length: hidden }), normed, { width: hidden, eps: 1e-6 }));
  const wide = hidden * units;
  const mid = f32(maxImageTokens * wide, 'merger.mlp');
  const out = f32(maxImageTokens * textHidden, 'image_tokens');
  const merger = new Program();
  merger.add(
    ...ops.linear(named('merger.mlp.0'), load.matrix({ prefix: named('merger.mlp.0'), rows: wide, cols: wide }), normed, mid, { bias: load.vector({ name: named('merger.mlp.0.bias'), length: wide }) }),
    ops.glu(mid, undefined, wide, 'gelu'),
    ...ops.linear(named('merger.mlp.2'), load.matrix({ prefix: named('merger.mlp.2'), rows: textHidden, cols: wide }), mid, out, { bias: load.vector({ name: named('merger.mlp.2.bias'), length: textHidden }) }),
  );
  ckpt.close();
  // Every layout numbers its blocks from 0: a group's table entries start at its first block.
  gpu.device.queue.writeBuffer(vt.buffers.window.blockTable, 0, Uint32Array.from({ length: vt.buffers.kvBlocks }, (_, i) => i));
  gpu.device.queue.writeBuffer(vt.buffers.full.blockTable, 0, Uint32Array.from({ length: vt.buffers.kvBlocks }, (_, i) => i));

  const staging = gpu.device.createBuffer({ label: 'vision.readback', size: out.size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const windowSide = windowSize / factor;
  const encodeOne = async (image: RgbImage) => {
    const { width, height, h, w } = gridOf(image);
    const tokens = h * w;
    if (tokens > maxImageTokens) throw new Error(`an image of ${tokens} tokens exceeds the ${maxImageTokens} the vision tower holds`);
    const pixels = await preprocessImage(image, pre, width, height);
    const { tokens: order, windows } = windowOrder(h, w, windowSide);
    const n = tokens * units;
    const patches = new Float32Array(n * patchValues);
    const ropePos = new Uint32Array(3 * n);
    order.forEach((token, i) => {
      const [ty, tx] = [Math.floor(token / w), token % w];
      for (let u = 0; u < units; u++) {
        const row = i * units + u;
        const gy = ty * merge + Math.floor(u / merge);
        const gx = tx * merge + (u % merge);
        ropePos.set([0, gy, gx], 3 * row);
        for (let c = 0; c < 3; c++) for (let y = 0; y < patch; y++) {
          const from = c * width * height + (gy * patch + y) * width + gx * patch;
          patches.set(pixels.subarray(from, from + patch), row * patchValues + (c * patch + y) * patch);
        }
      }
    });
    const queue = gpu.device.queue;
    const layout = (meta: VisionAttentionMeta, groups: number[]) => {
      const pos = new Uint32Array(n);
      const table = new Uint32Array(n);
      const keyEnd = new Uint32Array(n);
      let row = 0;
      let block = 0;
      for (const rows of groups) {
        for (let i = 0; i < rows; i++, row++) [pos[row], table[row], keyEnd[row]] = [i, block, rows - 1];
        block += Math.ceil(rows / VISION_KV_BLOCK);
      }
      queue.writeBuffer(meta.tokenPos, 0, pos);
      queue.writeBuffer(meta.tokenTable, 0, table);
      queue.writeBuffer(meta.keyEnd, 0, keyEnd);
    };
    layout(vt.buffers.window, windows.map((t) => t * units));
    layout(vt.buffers.full, [n]);
    queue.writeBuffer(vt.buffers.patches, 0, patches);
    queue.writeBuffer(vt.buffers.ropePos, 0, ropePos);
    for (const [program, rows] of [[tower, n], [merger, tokens]] as const) {
      const shape = { tokens: rows, seqs: 0, bias: 0 };
      ops.writeStep(shape);
      const encoder = gpu.device.createCommandEncoder();
      program.encode(encoder, shape);
      if (program === merger) encoder.copyBufferToBuffer(out, 0, staging, 0, tokens * textHidden * 4);
      queue.submit([encoder.finish()]);
    }
    const windowed = new Float32Array(await mapRead(staging), 0, tokens * textHidden);
    // Back to row-major grid order.
    const rows = new Float32Array(tokens * textHidden);
    order.forEach((token, i) => rows.set(windowed.subarray(i * textHidden, (i + 1) * textHidden), token * textHidden));
    return { rows, grid: { h, w } };
  };
  // One image at a time: the passes share their buffers.
  let queue: Promise<unknown> = Promise.resolve();
  const tokensOf = (size: { width: number; height: number }) => {
    const { h, w } = gridOf(size);
    return h * w;
  };
  // Qwen2_5_VLProcessor's expansion of the template's image pad.
  return {
    maxImageTokens,
    imageToken: top.count('image_token_id', 151655),
    marker: '<|vision_start|><|image_pad|><|vision_end|>',
    tokens: tokensOf,
    expansion: (size) => `<|vision_start|>${'<|image_pad|>'.repeat(tokensOf(size))}<|vision_end|>`,
    encode: (image) => {
      const result = queue.then(() => encodeOne(image));
      queue = result.catch(() => undefined);
      return result;
    },
  };
}
