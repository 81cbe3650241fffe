// Gemma 3's image encoder (Gemma3ForConditionalGeneration's vision side): preprocessing as
// preprocessor_config.json says (resize to the tower's square input, rescale, normalise),
// the SigLIP tower (./vision-layers.ts), and the multi-modal projector: the patch grid
// average-pooled to mm_tokens_per_image soft tokens, their RMSNorm (scaled by 1 + w, eps the
// tower's), and the projection into the language model's width (mm_input_projection_weight,
// stored [vision hidden, text hidden] and applied as x W). Checkpoints keep the tower and
// projector at the top level (as published, and as mlx-vlm saves them) or under model. (as
// transformers 4.52+ saves them); mlx-vlm's patch embedding is channels-last [hidden, y, x,
// channels]. A vision config this code does not implement is refused at load, naming the field.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import sharp from 'sharp';
import { mapRead, type Gpu } from '../runtime/gpu.js';
import { Ops } from '../runtime/ops.js';
import { Program } from '../runtime/program.js';
import { filledBuffer, storageBuffer, type GpuWeight } from '../runtime/tensors.js';
import { Checkpoint, loadMatrix, loadVector, type MatrixSource } from './checkpoint.js';
import { configReader, readConfigFiles, readModelConfig, type ConfigReader } from './config.js';
import { gemmaActivation } from './gemma3.js';
import { vitEncoder, type RgbImage, type VisionEncoder, type VisionLoader } from './vision-layers.js';

/** How an image's pixels become the tower's input values (the image processors' resample, rescale and normalise fields). */
export interface ImageNormalization {
  /** sharp's kernel for PIL's resample code. */
  kernel: 'nearest' | 'linear' | 'cubic' | 'lanczos3';
  rescale: number;
  mean: [number, number, number];
  std: [number, number, number];
}

/** How an image becomes the tower's input (Gemma3ImageProcessor's fields). */
export interface ImagePreprocessor extends ImageNormalization {
  /** The square side the image is resized to. */
  size: number;
}

/** PIL's resample codes (NEAREST, LANCZOS, BILINEAR, BICUBIC) as sharp's kernels. */
const RESAMPLE: Record<number, ImageNormalization['kernel']> = { 0: 'nearest', 1: 'lanczos3', 2: 'linear', 3: 'cubic' };

/** A checkpoint's preprocessor_config.json, for typed reads. */
export function readPreprocessorConfig(dir: string): ConfigReader {
  const file = join(dir, 'preprocessor_config.json');
  if (!existsSync(file)) throw new Error(`${dir}: no preprocessor_config.json, which says how images are prepared for the vision tower`);
  const c = configReader(JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>, file);
  c.oneOf('do_convert_rgb', [true, null], true);
  return c;
}

/** The resample filter (`resample`, PIL's code, default `resample`), rescale and normalisation an image processor config gives. */
export function readImageNormalization(c: ConfigReader, defaults: { resample: number; mean: [number, number, number]; std: [number, number, number] }): ImageNormalization {
  const resample = c.number('resample', defaults.resample);
  const kernel = RESAMPLE[resample] ?? c.fail('resample', `${resample} is not supported (0, 1, 2, 3: nearest, lanczos, bilinear, bicubic)`);
  const triple = (key: string, fallback: [number, number, number]): [number, number, number] => {
    const v = c.raw[key] ?? fallback;
    if (!Array.isArray(v) || v.length !== 3 || !v.every((x) => typeof x === 'number')) return c.fail(key, 'must be three numbers');
    return v as [number, number, number];
  };
  const normalize = c.bool('do_normalize', true);
  return {
    kernel,
    rescale: c.bool('do_rescale', true) ? c.positive('rescale_factor', 1 / 255) : 1,
    mean: normalize ? triple('image_mean', defaults.mean) : [0, 0, 0],
    std: normalize ? triple('image_std', defaults.std) : [1, 1, 1],
  };
}

/** preprocessor_config.json as Gemma 3's image processor reads it; `size` is the tower's image_size. */
export function readImagePreprocessor(dir: string, size: number): ImagePreprocessor {
  const c = readPreprocessorConfig(dir);
  if (c.bool('do_pan_and_scan', false)) c.fail('do_pan_and_scan', 'true is not supported (pan-and-scan crops are not implemented)');
  const sizeField = c.raw.size as { height?: unknown; width?: unknown } | undefined;
  if (sizeField != null && (sizeField.height !== size || sizeField.width !== size)) c.fail('size', `must be ${size} x ${size}, the vision tower's image_size`);
  return { size, ...readImageNormalization(c, { resample: 2, mean: [0.5, 0.5, 0.5], std: [0.5, 0.5, 0.5] }) };
}

/** The image resized to width x height and normalised: [3, height, width] channels-first. */
export async function preprocessImage(image: RgbImage, pre: ImageNormalization, width: number, height: number): Promise<Float32Array> {
  const pixels = image.width === width && image.height === height
    ? image.pixels
    : await sharp(image.pixels, { raw: { width: image.width, height: image.height, channels: 3 } }).resize(width, height, { fit: 'fill', kernel: pre.kernel }).raw().toBuffer();
  const n = width * height;
  const out = new Float32Array(3 * n);
  for (let i = 0; i < n; i++) {
    for (let c = 0; c < 3; c++) out[c * n + i] = (pixels[3 * i + c]! * pre.rescale - pre.mean[c]!) / pre.std[c]!;
  }
  return out;
}

/** [3, size, size] pixels as [patches, 3 * patch * patch] rows, patches in row-major grid order, each in [channel, y, x] order. */
export function unfoldPatches(pixels: Float32Array, size: number, patch: number): Float32Array {
  const side = size / patch;
  const values = 3 * patch * patch;
  const out = new Float32Array(side * side * values);
  for (let gy = 0; gy < side; gy++) {
    for (let gx = 0; gx < side; gx++) {
      const row = (gy * side + gx) * values;
      for (let c = 0; c < 3; c++) {
        for (let y = 0; y < patch; y++) {
          const from = c * size * size + (gy * patch + y) * size + gx * patch;
          out.set(pixels.subarray(from, from + patch), row + (c * patch + y) * patch);
        }
      }
    }
  }
  return out;
}

/** The image encoder of a gemma3 checkpoint with a vision_config; undefined for one without. */
export async function loadGemma3Vision(gpu: Gpu, dir: string, batchTokens: number): Promise<VisionEncoder | undefined> {
  const { json, file } = readConfigFiles(dir);
  if (json.model_type !== 'gemma3' || json.vision_config == null) return undefined;
  const top = configReader({ ...json, text_config: undefined }, file);
  const vc = configReader(json.vision_config as Record<string, unknown>, `${file}: vision_config`);
  vc.oneOf('model_type', ['siglip_vision_model'], 'siglip_vision_model');
  vc.oneOf('vision_use_head', [false], false);
  vc.oneOf('num_channels', [3], 3);
  const activation = gemmaActivation(vc);
  const hidden = vc.count('hidden_size');
  const imageSize = vc.count('image_size');
  const patch = vc.count('patch_size');
  if (imageSize % patch !== 0) vc.fail('patch_size', `${patch} does not divide image_size ${imageSize}`);
  const side = imageSize / patch;
  const tokens = top.count('mm_tokens_per_image', 256);
  const tokenSide = Math.round(Math.sqrt(tokens));
  if (tokenSide * tokenSide !== tokens || side % tokenSide !== 0) top.fail('mm_tokens_per_image', `${tokens} is not a square whose side divides the ${side} x ${side} patch grid`);
  const eps = vc.positive('layer_norm_eps', 1e-6);
  const textHidden = readModelConfig(dir).hidden;
  const pre = readImagePreprocessor(dir, imageSize);

  const ckpt = new Checkpoint(dir);
  const base = ['', 'model.'].find((p) => ckpt.has(`${p}vision_tower.vision_model.post_layernorm.weight`));
  if (base === undefined) throw new Error(`${dir}: config.json has a vision_config but the checkpoint has no vision_tower.vision_model tensors`);
  const named = (name: string) => base + name;
  const floatMatrix = (name: string, rows: number, cols: number, data: Float32Array): GpuWeight => ({
    format: 'f32', rows, cols, groupSize: 0,
    parts: [{ rowStart: 0, rows, data: filledBuffer(gpu.device, data.byteLength, name, (dst) => dst.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength))) }],
  });
  const load: VisionLoader = {
    matrix: (...sources: MatrixSource[]) => {
      for (const s of sources) if (ckpt.has(`${named(s.prefix)}.scales`)) throw new Error(`${dir}: ${s.prefix} is quantized; quantized vision towers are not supported`);
      return loadMatrix(gpu.device, gpu, ckpt, sources.map((s) => ({ ...s, prefix: named(s.prefix) })));
    },
    vector: (sources, shift) => loadVector(gpu.device, ckpt, [sources].flat().map((s) => ({ ...s, name: named(s.name) })), shift),
    patchEmbedding: (name, rows, cols) => {
      const { shape } = ckpt.entry(named(name)).info;
      const w = ckpt.readF32(named(name));
      if (shape.join() === [rows, 3, patch, patch].join()) return floatMatrix(name, rows, cols, w);
      if (shape.join() !== [rows, patch, patch, 3].join()) throw new Error(`${dir}: ${name} has shape [${shape.join(', ')}], expected [${rows}, 3, ${patch}, ${patch}] or mlx's [${rows}, ${patch}, ${patch}, 3]`);
      // Channels-last to the conv weight's [channels, y, x].
      const torch = new Float32Array(w.length);
      for (let o = 0; o < rows; o++) {
        for (let y = 0; y < patch; y++) for (let x = 0; x < patch; x++) for (let c = 0; c < 3; c++) torch[o * cols + (c * patch + y) * patch + x] = w[o * cols + (y * patch + x) * 3 + c]!;
      }
      return floatMatrix(name, rows, cols, torch);
    },
  };
  const ops = new Ops(gpu);
  const vt = vitEncoder(ops, load, {
    prefix: 'vision_tower.vision_model', hidden, intermediate: vc.count('intermediate_size'), layers: vc.count('num_hidden_layers'),
    heads: vc.count('num_attention_heads'), patches: side * side, patchValues: 3 * patch * patch, eps, activation,
  });
  const tower = new Program();
  tower.add(...vt.dispatches);

  // The projector: its weight is applied as x W, so it loads transposed, [text hidden, vision hidden].
  const projName = 'multi_modal_projector.mm_input_projection_weight';
  const projShape = ckpt.entry(named(projName)).info.shape;
  if (projShape.join() !== [hidden, textHidden].join()) throw new Error(`${dir}: ${projName} has shape [${projShape.join(', ')}], expected [${hidden}, ${textHidden}]`);
  const stored = ckpt.readF32(named(projName));
  const transposed = new Float32Array(stored.length);
  for (let r = 0; r < hidden; r++) for (let c = 0; c < textHidden; c++) transposed[c * hidden + r] = stored[r * textHidden + c]!;
  const f32 = (n: number, label: string) => storageBuffer(gpu.device, n * 4, `vision.${label}`);
  const pooled = f32(tokens * hidden, 'pooled');
  const normed = f32(tokens * hidden, 'soft_emb_norm');
  const out = f32(tokens * textHidden, 'soft_tokens');
  const projector = new Program();
  projector.add(
    ops.patchPool(vt.buffers.h, pooled, { width: hidden, side, k: side / tokenSide }),
    ops.rmsnorm('multi_modal_projector.mm_soft_emb_norm', pooled, load.vector({ name: 'multi_modal_projector.mm_soft_emb_norm.weight', length: hidden }, 1), normed, { width: hidden, eps }),
    ...ops.linear(projName, floatMatrix(projName, textHidden, hidden, transposed), normed, out),
  );
  ckpt.close();

  const staging = gpu.device.createBuffer({ label: 'vision.readback', size: out.size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  // One image at a time: the passes share their buffers.
  let queue: Promise<unknown> = Promise.resolve();
  const encodeOne = async (image: RgbImage): Promise<Float32Array> => {
    const patches = unfoldPatches(await preprocessImage(image, pre, imageSize, imageSize), imageSize, patch);
    const device = gpu.device;
    device.queue.writeBuffer(vt.buffers.patches, 0, patches);
    for (const [program, rows] of [[tower, side * side], [projector, tokens]] as const) {
      const shape = { tokens: rows, seqs: 0, bias: 0 };
      ops.writeStep(shape);
      const encoder = device.createCommandEncoder();
      program.encode(encoder, shape);
      if (program === projector) encoder.copyBufferToBuffer(out, 0, staging, 0, tokens * textHidden * 4);
      device.queue.submit([encoder.finish()]);
    }
    return new Float32Array(await mapRead(staging), 0, tokens * textHidden);
  };
  // Gemma3Processor's expansion of the template's image marker.
  const expansion = `\n\n<start_of_image>${'<image_soft_token>'.repeat(tokens)}<end_of_image>\n\n`;
  return {
    tokensPerImage: tokens,
    maxImageTokens: batchTokens,
    imageToken: top.count('image_token_index', 262144),
    marker: '<start_of_image>',
    tokens: () => tokens,
    expansion: () => expansion,
    encode: (image) => {
      const result = queue.then(async () => ({ rows: await encodeOne(image) }));
      queue = result.catch(() => undefined);
      return result;
    },
  };
}
