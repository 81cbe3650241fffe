// A plain CPU forward pass of Qwen2.5-VL's multimodal model with transformers' semantics
// (float64, written from Qwen2VLImageProcessor, Qwen2_5_VisionTransformerPretrainedModel and
// Qwen2_5_VLModel), for a checkpoint folder as test/helpers/random-checkpoint.ts writes it
// (f32 tensors, the decoder under model.language_model., the tower under model.visual., tied
// embeddings). It reads config.json, preprocessor_config.json and the safetensors and shares
// no code with src/models/qwen2-5-vl*.ts. The image side (features), for an image given at
// a size smart_resize keeps:
// - pixels: value * rescale_factor, minus image_mean, over image_std, per channel; the image
//   repeated as temporal_patch_size frames;
// - patches as the processor flattens them: merge block by merge block (row-major), the
//   merge x merge patches of a block row-major within it, each (channel, frame, y, x);
// - the patch embedding: the Conv3d over (frame, y, x), no bias;
// - 2D rotary positions: each patch's (row, column) on the patch grid, head_dim / 4
//   frequencies 10000^(-2j / (head_dim / 2)) for each, rows first, duplicated over the two
//   halves of the head (rotate_half);
// - get_window_index: the merged grid padded with -100 to whole windows of
//   window_size / merge / patch tokens, the windows' tokens in order, the padding dropped;
//   the rows and positions reordered by it (merge blocks whole);
// - each block: h += proj(attention), q, k, v from qkv(RMSNorm1(h)), q and k rotated, scores
//   times head_dim^-0.5, a row attending to the rows of its window (cu_window_seqlens) or, in
//   fullatt_block_indexes' blocks, of the image; h += down(silu(gate(x)) * up(x)),
//   x = RMSNorm2(h); all linear layers biased; RMSNorm eps 1e-6;
// - the merger: RMSNorm ln_q per patch, merge x merge rows concatenated, mlp.0, exact GELU
//   (erf), mlp.2; the tokens back in grid order (argsort of the window index).
// The language model (logits): the image pads' embeddings replaced by the image's tokens in
// order; get_rope_index's three position streams (text: st, st + 1, ... on all three; an
// image: (0, row, column) + st where st is the next text position; then st = its largest + 1);
// each layer h += o_proj(attention), q, k, v biased from input_layernorm(h), the rotary pairs
// split by mrope_section into runs turning by the t, h and w positions (rope_theta), causal
// GQA; h += down(silu(gate(x)) * up(x)), x = post_attention_layernorm(h); the final norm
// and the tied embedding as the head. A call whose tokens extend the previous call's (a greedy
// run) goes on from that call's keys and values: the same math, once per token.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { listCheckpointTensors, readTensorF32, type CheckpointTensor } from '../../src/models/safetensors.js';
import { linearRows, type Rows } from './gemma3-vision-reference.js';


export class Qwen25VlReference {
  private readonly tensors: Map<string, CheckpointTensor>;
  private readonly cache = new Map<string, Float32Array>();
  private readonly config: Record<string, unknown>;
  private readonly vision: Record<string, number> & { fullatt_block_indexes: number[] };
  private readonly pre: { rescale_factor: number; image_mean: number[]; image_std: number[]; merge_size: number; patch_size: number };

  constructor(readonly dir: string) {
    this.config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
    this.vision = this.config.vision_config as Qwen25VlReference['vision'];
    this.pre = JSON.parse(readFileSync(join(dir, 'preprocessor_config.json'), 'utf8'));
    this.tensors = listCheckpointTensors(dir);
  }

  private t(name: string): Float32Array {
    let v = this.cache.get(name);
    if (!v) {
      const t = this.tensors.get(name);
      if (!t) throw new Error(`${this.dir}: no ${name}`);
      this.cache.set(name, (v = readTensorF32(t)));
    }
    return v;
  }

  /** The image's tokens [h * w][text hidden], grid order, for RGB bytes of width x height (multiples of 28). */
  features(rgb: Uint8Array, width: number, height: number): Rows {
    const { hidden_size: V, num_heads: heads, patch_size: P, spatial_merge_size: m, window_size: windowSize, depth } = this.vision;
    const T = this.vision.temporal_patch_size;
    const d = V / heads;
    const pixel = (c: number, y: number, x: number) => (rgb[(y * width + x) * 3 + c]! * this.pre.rescale_factor - this.pre.image_mean[c]!) / this.pre.image_std[c]!;
    const gh = height / P;
    const gw = width / P;
    // The processor's patch order, and each patch's (row, column).
    const order: Array<[number, number]> = [];
    for (let by = 0; by < gh / m; by++) for (let bx = 0; bx < gw / m; bx++) for (let my = 0; my < m; my++) for (let mx = 0; mx < m; mx++) order.push([by * m + my, bx * m + mx]);
    const conv = this.t('model.visual.patch_embed.proj.weight');
    let h: Rows = order.map(([gy, gx]) => {
      const row = new Float64Array(V);
      for (let o = 0; o < V; o++) {
        let s = 0;
        for (let c = 0; c < 3; c++) for (let t = 0; t < T; t++) for (let y = 0; y < P; y++) for (let x = 0; x < P; x++) s += conv[(((o * 3 + c) * T + t) * P + y) * P + x]! * pixel(c, gy * P + y, gx * P + x);
        row[o] = s;
      }
      return row;
    });
    // get_window_index.
    const lh = gh / m;
    const lw = gw / m;
    const ws = windowSize / m / P;
    const ph = lh + (ws - (lh % ws));
    const pw = lw + (ws - (lw % ws));
    const windowIndex: number[] = [];
    const seqlens: number[] = [];
    for (let wy = 0; wy < ph / ws; wy++) {
      for (let wx = 0; wx < pw / ws; wx++) {
        let n = 0;
        for (let iy = 0; iy < ws; iy++) {
          for (let ix = 0; ix < ws; ix++) {
            const [y, x] = [wy * ws + iy, wx * ws + ix];
            const index = y < lh && x < lw ? y * lw + x : -100;
            if (index === -100) continue;
            windowIndex.push(index);
            n++;
          }
        }
        seqlens.push(n);
      }
    }
    const units = m * m;
    const segmentOf = (cuSeqlens: number[]) => {
      const seg: number[] = [];
      cuSeqlens.forEach((n, i) => seg.push(...new Array<number>(n * units).fill(i)));
      return seg;
    };
    const windowSegment = segmentOf(seqlens);
    const fullSegment = new Array<number>(h.length).fill(0);
    const reorder = <X>(rows: X[]) => windowIndex.flatMap((u) => rows.slice(u * units, (u + 1) * units));
    h = reorder(h);
    const pos = reorder(order);
    const invFreq = Array.from({ length: d / 4 }, (_, j) => 10000 ** (-(2 * j) / (d / 2)));
    const angle = (r: number, i: number) => (i < d / 4 ? pos[r]![0] * invFreq[i]! : pos[r]![1] * invFreq[i - d / 4]!);
    const rotate = (x: Rows) => x.forEach((row, r) => {
      for (let h0 = 0; h0 < V; h0 += d) {
        for (let i = 0; i < d / 2; i++) {
          const [a, b] = [row[h0 + i]!, row[h0 + i + d / 2]!];
          const [cos, sin] = [Math.cos(angle(r, i)), Math.sin(angle(r, i))];
          row[h0 + i] = a * cos - b * sin;
          row[h0 + i + d / 2] = b * cos + a * sin;
        }
      }
    });
    for (let l = 0; l < depth; l++) {
      const b = `model.visual.blocks.${l}`;
      const seg = this.vision.fullatt_block_indexes.includes(l) ? fullSegment : windowSegment;
      const qkv = this.linear(h.map((r) => this.rmsNorm(r, `${b}.norm1.weight`, 1e-6)), `${b}.attn.qkv`);
      const [q, k, v] = [0, 1, 2].map((s) => qkv.map((r) => r.slice(s * V, (s + 1) * V))) as [Rows, Rows, Rows];
      rotate(q);
      rotate(k);
      const attn = attention(q, k, v, heads, heads, d, (i, j) => seg[i] === seg[j]);
      h = add(h, this.linear(attn, `${b}.attn.proj`));
      const x = h.map((r) => this.rmsNorm(r, `${b}.norm2.weight`, 1e-6));
      const gate = this.linear(x, `${b}.mlp.gate_proj`);
      const up = this.linear(x, `${b}.mlp.up_proj`);
      h = add(h, this.linear(gate.map((r, i) => r.map((g, j) => silu(g) * up[i]![j]!)), `${b}.mlp.down_proj`));
    }
    const normed = h.map((r) => this.rmsNorm(r, 'model.visual.merger.ln_q.weight', 1e-6));
    const merged: Rows = [];
    for (let i = 0; i < normed.length; i += units) {
      const row = new Float64Array(V * units);
      for (let u = 0; u < units; u++) row.set(normed[i + u]!, u * V);
      merged.push(row);
    }
    const tokens = this.linear(this.linear(merged, 'model.visual.merger.mlp.0').map((r) => r.map(geluErf)), 'model.visual.merger.mlp.2');
    const out: Rows = new Array<Float64Array>(tokens.length);
    windowIndex.forEach((u, i) => (out[u] = tokens[i]!));
    return out;
  }

  /** The keys and values of the last logits call's tokens per layer, and where get_rope_index stood: a call extending those tokens goes on from them. */
  private kept?: { tokens: number[]; images: unknown; keys: Rows[]; values: Rows[]; next: number; image: number };

  /** Logits [vocab] after the last of `tokens`, each image (its rows and merged grid) replacing its run of image pads. */
  logits(tokens: number[], images: Array<{ rows: Rows; grid: { h: number; w: number } }>): Float64Array {
    const c = this.config as Record<string, number> & { rope_scaling: { mrope_section: number[] } };
    const { hidden_size: H, num_attention_heads: heads, num_key_value_heads: kvHeads, num_hidden_layers: layers, rms_norm_eps: eps, image_token_id: pad } = c;
    const d = H / heads;
    const theta = c.rope_theta;
    const [s0, s1] = c.rope_scaling.mrope_section as [number, number, number];
    const embed = this.t('model.language_model.embed_tokens.weight');
    let kept = this.kept;
    if (!kept || kept.images !== images || kept.tokens.length >= tokens.length || kept.tokens.some((t, i) => tokens[i] !== t)) {
      kept = { tokens: [], images, keys: Array.from({ length: layers }, () => []), values: Array.from({ length: layers }, () => []), next: 0, image: -1 };
    }
    const from = kept.tokens.length;
    // get_rope_index and the embeddings together, for the tokens not kept.
    const positions: Array<[number, number, number]> = [];
    let h: Rows = [];
    for (let p = from; p < tokens.length; p++) {
      if (tokens[p] === pad && (p === 0 || tokens[p - 1] !== pad)) {
        const { rows, grid } = images[++kept.image]!;
        const st = kept.next;
        rows.forEach((row, k) => {
          positions.push([st, st + Math.floor(k / grid.w), st + (k % grid.w)]);
          h.push(Float64Array.from(row));
        });
        kept.next = st + Math.max(grid.h, grid.w);
        p += rows.length - 1;
        continue;
      }
      positions.push([kept.next, kept.next, kept.next]);
      kept.next++;
      h.push(Float64Array.from(embed.subarray(tokens[p]! * H, (tokens[p]! + 1) * H)));
    }
    const rope = (x: Rows) => x.forEach((row, r) => {
      for (let h0 = 0; h0 < row.length; h0 += d) {
        for (let i = 0; i < d / 2; i++) {
          const stream = i < s0 ? 0 : i < s0 + s1 ? 1 : 2;
          const a = positions[r]![stream] * theta ** (-(2 * i) / d);
          const [x0, x1] = [row[h0 + i]!, row[h0 + i + d / 2]!];
          row[h0 + i] = x0 * Math.cos(a) - x1 * Math.sin(a);
          row[h0 + i + d / 2] = x1 * Math.cos(a) + x0 * Math.sin(a);
        }
      }
    });
    for (let l = 0; l < layers; l++) {
      const p = `model.language_model.layers.${l}`;
      const x = h.map((r) => this.rmsNorm(r, `${p}.input_layernorm.weight`, eps));
      const [q, k, v] = ['q_proj', 'k_proj', 'v_proj'].map((n) => this.linear(x, `${p}.self_attn.${n}`)) as [Rows, Rows, Rows];
      rope(q);
      rope(k);
      kept.keys[l]!.push(...k);
      kept.values[l]!.push(...v);
      h = add(h, this.linear(attention(q, kept.keys[l]!, kept.values[l]!, heads, kvHeads, d, (i, j) => j <= from + i), `${p}.self_attn.o_proj`, false));
      const y = h.map((r) => this.rmsNorm(r, `${p}.post_attention_layernorm.weight`, eps));
      const gate = this.linear(y, `${p}.mlp.gate_proj`, false);
      const up = this.linear(y, `${p}.mlp.up_proj`, false);
      h = add(h, this.linear(gate.map((r, i) => r.map((g, j) => silu(g) * up[i]![j]!)), `${p}.mlp.down_proj`, false));
    }
    kept.tokens = [...tokens];
    this.kept = kept;
    const last = this.rmsNorm(h[h.length - 1]!, 'model.language_model.norm.weight', eps);
    const out = new Float64Array(embed.length / H);
    for (let t = 0; t < out.length; t++) {
      let s = 0;
      for (let j = 0; j < H; j++) s += embed[t * H + j]! * last[j]!;
      out[t] = s;
    }
    return out;
  }

  /** x W^T (+ b), W [out, in]. */
  private linear(x: Rows, name: string, bias = this.tensors.has(`${name}.bias`)): Rows {
    return linearRows(x, this.t(`${name}.weight`), bias ? this.t(`${name}.bias`) : undefined);
  }

  private rmsNorm(x: Float64Array, name: string, eps: number): Float64Array {
    const w = this.t(name);
    const rms = Math.sqrt(x.reduce((s, v) => s + v * v, 0) / x.length + eps);
    return x.map((v, i) => (v / rms) * w[i]!);
  }
}

/** softmax(q k^T / sqrt(d)) v per head over the keys `visible(i, j)` allows, query head h reading KV head h / (heads / kvHeads). */
function attention(q: Rows, k: Rows, v: Rows, heads: number, kvHeads: number, d: number, visible: (i: number, j: number) => boolean): Rows {
  return q.map((qi, i) => {
    const out = new Float64Array(heads * d);
    for (let hd = 0; hd < heads; hd++) {
      const kv = Math.floor(hd / (heads / kvHeads));
      const scores = k.map((kj, j) => {
        if (!visible(i, j)) return -Infinity;
        let s = 0;
        for (let e = 0; e < d; e++) s += qi[hd * d + e]! * kj[kv * d + e]!;
        return s / Math.sqrt(d);
      });
      const max = Math.max(...scores);
      const w = scores.map((s) => Math.exp(s - max));
      const total = w.reduce((a, b) => a + b, 0);
      v.forEach((vj, j) => {
        for (let e = 0; e < d; e++) out[hd * d + e]! += (w[j]! / total) * vj[kv * d + e]!;
      });
    }
    return out;
  });
}

function add(a: Rows, b: Rows): Rows {
  return a.map((r, i) => r.map((x, j) => x + b[i]![j]!));
}

function silu(x: number): number {
  return x / (1 + Math.exp(-x));
}

/** x Φ(x) with erf from its Taylor series (|z| < 3) or its continued fraction, both to ~1e-14. */
function geluErf(x: number): number {
  const z = x / Math.SQRT2;
  let erf: number;
  if (Math.abs(z) < 3) {
    let term = z;
    let sum = z;
    for (let n = 1; n < 100 && Math.abs(term) > 1e-17; n++) {
      term *= (-z * z) / n;
      sum += term / (2 * n + 1);
    }
    erf = (2 / Math.sqrt(Math.PI)) * sum;
  } else {
    // erfc(|z|) = exp(-z^2) / sqrt(pi) * 1 / (|z| + 1/2 / (|z| + 1 / (|z| + 3/2 / (|z| + ...)))).
    const a = Math.abs(z);
    let f = a;
    for (let n = 60; n >= 1; n--) f = a + n / 2 / f;
    erf = Math.sign(z) * (1 - Math.exp(-a * a) / Math.sqrt(Math.PI) / f);
  }
  return 0.5 * x * (1 + erf);
}
