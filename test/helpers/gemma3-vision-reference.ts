// A plain CPU forward pass of Gemma 3's multimodal model with transformers' semantics
// (float64, written from Gemma3ForConditionalGeneration, SiglipVisionModel and
// Gemma3TextModel), for a checkpoint folder as test/helpers/random-checkpoint.ts writes it
// (f32 tensors, the decoder under language_model.model., torch layouts). It reads
// config.json, preprocessor_config.json and the safetensors and shares no code with
// src/models/gemma3*.ts. The image side (Gemma3VisionReference):
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
// The language model (Gemma3Reference), for configs without RoPE scaling or soft-capping:
// - embeddings times sqrt(hidden), then each image token's replaced by its image's soft
//   token (in order);
// - each layer: h += post_attention_layernorm(o_proj(attention)), q, k, v from
//   input_layernorm(h), q and k RMS-normed per head, rotate_half RoPE (rope_local_base_freq
//   on sliding layers, rope_theta on the others), scores times query_pre_attn_scalar^-0.5,
//   GQA; the mask causal within the sliding window, and both ways among one image's tokens;
//   then h += post_feedforward_layernorm(down(gelu_tanh(gate(x)) * up(x))),
//   x = pre_feedforward_layernorm(h); every RMSNorm scales by (1 + w);
// - the final norm and the tied embedding as the head.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { listCheckpointTensors, readTensorF32, type CheckpointTensor } from '../../src/models/safetensors.js';

export type Rows = Float64Array[];

/** Each row of x times W^T (+ b), W [out, in] row-major, in float64. */
export function linearRows(x: Rows, w: ArrayLike<number>, b?: ArrayLike<number>): Rows {
  const inDim = x[0]!.length;
  const outDim = w.length / inDim;
  return x.map((row) => {
    const y = new Float64Array(outDim);
    for (let o = 0; o < outDim; o++) {
      let s = b ? b[o]! : 0;
      for (let i = 0; i < inDim; i++) s += w[o * inDim + i]! * row[i]!;
      y[o] = s;
    }
    return y;
  });
}

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
    return linearRows(x, this.t(`${prefix}.weight`), this.t(`${prefix}.bias`));
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

/** Gemma 3's decoder with images' soft tokens in place (see the header). */
export class Gemma3Reference {
  private readonly tensors: Map<string, CheckpointTensor>;
  private readonly cache = new Map<string, Float32Array>();
  private readonly text: Record<string, unknown>;
  readonly imageToken: number;

  constructor(readonly dir: string) {
    const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as { text_config: Record<string, unknown>; image_token_index: number };
    this.text = config.text_config;
    if (this.text.rope_scaling != null || this.text.attn_logit_softcapping != null || this.text.final_logit_softcapping != null) throw new Error('the reference covers no RoPE scaling or soft-capping');
    this.imageToken = config.image_token_index;
    this.tensors = listCheckpointTensors(dir);
  }

  private t(name: string): Float32Array {
    let v = this.cache.get(name);
    if (!v) {
      const t = this.tensors.get(`language_model.model.${name}`);
      if (!t) throw new Error(`${this.dir}: no language_model.model.${name}`);
      this.cache.set(name, (v = readTensorF32(t)));
    }
    return v;
  }

  private num(key: string, fallback: number): number {
    return (this.text[key] as number | undefined) ?? fallback;
  }

  /** Logits [vocab] after the last of `tokens`, each image's rows replacing its run of image tokens. */
  logits(tokens: number[], images: Rows[]): Float64Array {
    const H = this.num('hidden_size', 0);
    const heads = this.num('num_attention_heads', 0);
    const kvHeads = this.num('num_key_value_heads', heads);
    const d = this.num('head_dim', 0);
    const eps = this.num('rms_norm_eps', 1e-6);
    const layers = this.num('num_hidden_layers', 0);
    const pattern = this.num('sliding_window_pattern', 6);
    const window = this.num('sliding_window', 4096);
    const scale = this.num('query_pre_attn_scalar', d) ** -0.5;
    const embed = this.t('embed_tokens.weight');
    // Each position's image (its index in `images`), or -1.
    const imageOf: number[] = [];
    let image = -1;
    let row = 0;
    let h: Rows = tokens.map((tok, p) => {
      if (tok === this.imageToken) {
        if (p === 0 || tokens[p - 1] !== this.imageToken) {
          image++;
          row = 0;
        }
        imageOf.push(image);
        return Float64Array.from(images[image]![row++]!);
      }
      imageOf.push(-1);
      return Float64Array.from(embed.subarray(tok * H, (tok + 1) * H), (x) => x * Math.sqrt(H));
    });
    const n = tokens.length;
    for (let l = 0; l < layers; l++) {
      const p = `layers.${l}`;
      const sliding = (l + 1) % pattern !== 0;
      const base = sliding ? this.num('rope_local_base_freq', 10000) : this.num('rope_theta', 10000);
      const x = h.map((r) => this.rmsNorm(r, `${p}.input_layernorm.weight`, eps));
      const q = this.linear(x, `${p}.self_attn.q_proj.weight`).map((r) => this.headNorm(r, `${p}.self_attn.q_norm.weight`, d, eps));
      const k = this.linear(x, `${p}.self_attn.k_proj.weight`).map((r) => this.headNorm(r, `${p}.self_attn.k_norm.weight`, d, eps));
      const v = this.linear(x, `${p}.self_attn.v_proj.weight`);
      q.forEach((r, pos) => rope(r, pos, d, base));
      k.forEach((r, pos) => rope(r, pos, d, base));
      const attn = q.map(() => new Float64Array(heads * d));
      for (let i = 0; i < n; i++) {
        const visible = (j: number) => (j <= i && i - j < window) || (imageOf[i]! >= 0 && imageOf[i] === imageOf[j]);
        for (let hd = 0; hd < heads; hd++) {
          const kv = Math.floor(hd / (heads / kvHeads));
          const scores = k.map((kr, j) => {
            if (!visible(j)) return -Infinity;
            let s = 0;
            for (let e = 0; e < d; e++) s += q[i]![hd * d + e]! * kr[kv * d + e]!;
            return s * scale;
          });
          const max = Math.max(...scores);
          const w = scores.map((s) => Math.exp(s - max));
          const total = w.reduce((a, b) => a + b, 0);
          for (let j = 0; j < n; j++) for (let e = 0; e < d; e++) attn[i]![hd * d + e]! += (w[j]! / total) * v[j]![kv * d + e]!;
        }
      }
      const o = this.linear(attn, `${p}.self_attn.o_proj.weight`).map((r) => this.rmsNorm(r, `${p}.post_attention_layernorm.weight`, eps));
      h = add(h, o);
      const y = h.map((r) => this.rmsNorm(r, `${p}.pre_feedforward_layernorm.weight`, eps));
      const gate = this.linear(y, `${p}.mlp.gate_proj.weight`);
      const up = this.linear(y, `${p}.mlp.up_proj.weight`);
      const mid = gate.map((r, i) => r.map((g, j) => geluTanh(g) * up[i]![j]!));
      h = add(h, this.linear(mid, `${p}.mlp.down_proj.weight`).map((r) => this.rmsNorm(r, `${p}.post_feedforward_layernorm.weight`, eps)));
    }
    const last = this.rmsNorm(h[n - 1]!, 'norm.weight', eps);
    const vocab = embed.length / H;
    const out = new Float64Array(vocab);
    for (let t = 0; t < vocab; t++) {
      let s = 0;
      for (let j = 0; j < H; j++) s += embed[t * H + j]! * last[j]!;
      out[t] = s;
    }
    return out;
  }

  /** x W^T, W [out, in], no bias. */
  private linear(x: Rows, name: string): Rows {
    return linearRows(x, this.t(name));
  }

  private rmsNorm(x: Float64Array, name: string, eps: number): Float64Array {
    const w = this.t(name);
    const rms = Math.sqrt(x.reduce((s, v) => s + v * v, 0) / x.length + eps);
    return x.map((v, i) => (v / rms) * (1 + w[i]!));
  }

  private headNorm(x: Float64Array, name: string, d: number, eps: number): Float64Array {
    const w = this.t(name);
    const out = new Float64Array(x.length);
    for (let h0 = 0; h0 < x.length; h0 += d) {
      let ss = 0;
      for (let e = 0; e < d; e++) ss += x[h0 + e]! ** 2;
      const rms = Math.sqrt(ss / d + eps);
      for (let e = 0; e < d; e++) out[h0 + e] = (x[h0 + e]! / rms) * (1 + w[e]!);
    }
    return out;
  }
}

/** rotate_half RoPE in place on each head of `x`: dims (i, i + d/2) pair, angle pos * base^(-2i/d). */
function rope(x: Float64Array, pos: number, d: number, base: number): void {
  for (let h0 = 0; h0 < x.length; h0 += d) {
    for (let i = 0; i < d / 2; i++) {
      const angle = pos * base ** (-(2 * i) / d);
      const a = x[h0 + i]!;
      const b = x[h0 + i + d / 2]!;
      x[h0 + i] = a * Math.cos(angle) - b * Math.sin(angle);
      x[h0 + i + d / 2] = b * Math.cos(angle) + a * Math.sin(angle);
    }
  }
}
