// A plain CPU forward pass of Gemma 3's image side with transformers' semantics (float64,
// written from Gemma3ForConditionalGeneration.get_image_features and SiglipVisionModel), for
// a checkpoint folder as test/helpers/random-checkpoint.ts writes it (f32 tensors at the top
// level, torch layouts). It reads config.json, preprocessor_config.json and the safetensors
// and shares no code with src/models/gemma3-vision.ts:
// - pixels: value * rescale_factor, minus image_mean, over image_std, per channel (the image
//   is given at the tower's size: no resize);
// - patch embedding: a stride-patch Conv2d, computed as the convolution it is, plus bias,
//   then the learned position embedding of each patch (row-major grid order);
// - each encoder layer: h += out_proj(softmax(q k^T / sqrt(head_dim)) v) over all patches
//   (no mask), q, k, v from LayerNorm1(h); h += fc2(gelu_tanh(fc1(LayerNorm2(h)))); all
//   projections biased; then post_layernorm;
// - projector: AvgPool2d over the patch grid to mm_tokens_per_image tokens,
//   x / sqrt(mean(x^2) + eps) * (1 + w) with the tower's layer_norm_eps, then x W with
//   W = mm_input_projection_weight [vision hidden, text hidden].
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { listCheckpointTensors, readTensorF32, type CheckpointTensor } from '../../src/models/safetensors.js';

type Rows = Float64Array[];

export class Gemma3VisionReference {
  private readonly tensors: Map<string, CheckpointTensor>;
  private readonly vision: Record<string, number>;
  private readonly pre: { rescale_factor: number; image_mean: number[]; image_std: number[] };
  readonly tokens: number;

  constructor(readonly dir: string) {
    const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as { vision_config: Record<string, number>; mm_tokens_per_image: number };
    this.vision = config.vision_config;
    this.tokens = config.mm_tokens_per_image;
    this.pre = JSON.parse(readFileSync(join(dir, 'preprocessor_config.json'), 'utf8'));
    this.tensors = listCheckpointTensors(dir);
  }

  private t(name: string): Float32Array {
    const t = this.tensors.get(name);
    if (!t) throw new Error(`${this.dir}: no ${name}`);
    return readTensorF32(t);
  }

  /** Soft-token embeddings [tokens][text hidden] of an image of the tower's size, RGB bytes row-major. */
  features(rgb: Uint8Array): Rows {
    const { hidden_size: V, image_size: S, patch_size: P, num_hidden_layers: layers, num_attention_heads: heads, layer_norm_eps: eps } = this.vision;
    const side = S / P;
    const pixel = (c: number, y: number, x: number) => (rgb[(y * S + x) * 3 + c]! * this.pre.rescale_factor - this.pre.image_mean[c]!) / this.pre.image_std[c]!;
    const e = 'vision_tower.vision_model.embeddings';
    const conv = this.t(`${e}.patch_embedding.weight`);
    const convBias = this.t(`${e}.patch_embedding.bias`);
    const pos = this.t(`${e}.position_embedding.weight`);
    let h: Rows = [];
    for (let gy = 0; gy < side; gy++) {
      for (let gx = 0; gx < side; gx++) {
        const row = new Float64Array(V);
        for (let o = 0; o < V; o++) {
          let sum = convBias[o]!;
          for (let c = 0; c < 3; c++) for (let ky = 0; ky < P; ky++) for (let kx = 0; kx < P; kx++) sum += conv[((o * 3 + c) * P + ky) * P + kx]! * pixel(c, gy * P + ky, gx * P + kx);
          row[o] = sum + pos[(gy * side + gx) * V + o]!;
        }
        h.push(row);
      }
    }
    for (let i = 0; i < layers; i++) {
      const l = `vision_tower.vision_model.encoder.layers.${i}`;
      const xn = this.layerNorm(h, `${l}.layer_norm1`, eps);
      const [q, k, v] = ['q_proj', 'k_proj', 'v_proj'].map((n) => this.linear(xn, `${l}.self_attn.${n}`)) as [Rows, Rows, Rows];
      const attn = attention(q, k, v, heads);
      h = add(h, this.linear(attn, `${l}.self_attn.out_proj`));
      const mid = this.linear(this.layerNorm(h, `${l}.layer_norm2`, eps), `${l}.mlp.fc1`).map((r) => r.map(geluTanh));
      h = add(h, this.linear(mid, `${l}.mlp.fc2`));
    }
    h = this.layerNorm(h, 'vision_tower.vision_model.post_layernorm', eps);
    // AvgPool2d(k, k) over the [V, side, side] grid, flattened back to rows.
    const tokenSide = Math.round(Math.sqrt(this.tokens));
    const k = side / tokenSide;
    const pooled: Rows = [];
    for (let oy = 0; oy < tokenSide; oy++) {
      for (let ox = 0; ox < tokenSide; ox++) {
        const row = new Float64Array(V);
        for (let dy = 0; dy < k; dy++) for (let dx = 0; dx < k; dx++) h[(oy * k + dy) * side + ox * k + dx]!.forEach((x, d) => (row[d]! += x / (k * k)));
        pooled.push(row);
      }
    }
    const normW = this.t('multi_modal_projector.mm_soft_emb_norm.weight');
    const proj = this.t('multi_modal_projector.mm_input_projection_weight');
    const textHidden = proj.length / V;
    return pooled.map((row) => {
      const rms = Math.sqrt(row.reduce((s, x) => s + x * x, 0) / V + eps);
      const normed = row.map((x, d) => (x / rms) * (1 + normW[d]!));
      const out = new Float64Array(textHidden);
      for (let d = 0; d < V; d++) for (let j = 0; j < textHidden; j++) out[j]! += normed[d]! * proj[d * textHidden + j]!;
      return out;
    });
  }

  /** x W^T + b, W [out, in]. */
  private linear(x: Rows, prefix: string): Rows {
    const w = this.t(`${prefix}.weight`);
    const b = this.t(`${prefix}.bias`);
    const inDim = x[0]!.length;
    const outDim = b.length;
    return x.map((row) => {
      const y = new Float64Array(outDim);
      for (let o = 0; o < outDim; o++) {
        let s = b[o]!;
        for (let i = 0; i < inDim; i++) s += w[o * inDim + i]! * row[i]!;
        y[o] = s;
      }
      return y;
    });
  }

  private layerNorm(x: Rows, prefix: string, eps: number): Rows {
    const w = this.t(`${prefix}.weight`);
    const b = this.t(`${prefix}.bias`);
    return x.map((row) => {
      const mean = row.reduce((s, v) => s + v, 0) / row.length;
      const variance = row.reduce((s, v) => s + (v - mean) ** 2, 0) / row.length;
      return row.map((v, i) => ((v - mean) / Math.sqrt(variance + eps)) * w[i]! + b[i]!);
    });
  }
}

/** Unmasked multi-head attention, heads side by side in each row. */
function attention(q: Rows, k: Rows, v: Rows, heads: number): Rows {
  const n = q.length;
  const width = q[0]!.length;
  const d = width / heads;
  const out = q.map(() => new Float64Array(width));
  for (let hd = 0; hd < heads; hd++) {
    for (let i = 0; i < n; i++) {
      const scores = k.map((kr) => {
        let s = 0;
        for (let j = 0; j < d; j++) s += q[i]![hd * d + j]! * kr[hd * d + j]!;
        return s / Math.sqrt(d);
      });
      const max = Math.max(...scores);
      const weights = scores.map((s) => Math.exp(s - max));
      const total = weights.reduce((a, b) => a + b, 0);
      for (let t = 0; t < n; t++) for (let j = 0; j < d; j++) out[i]![hd * d + j]! += (weights[t]! / total) * v[t]![hd * d + j]!;
    }
  }
  return out;
}

function add(a: Rows, b: Rows): Rows {
  return a.map((row, i) => row.map((x, j) => x + b[i]![j]!));
}

function geluTanh(x: number): number {
  return 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3)));
}
