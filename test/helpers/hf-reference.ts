// A plain CPU forward pass with Hugging Face semantics (float64 activations, no KV cache) for
// Llama / Mistral / Qwen2 / Qwen3 checkpoint folders, including mlx-lm quantized ones (dequantized with
// dequantizeAffine). It reads only config.json (through config.ts's normaliser, as the engine
// does) and the safetensors, so it checks the GGUF conversion (llama.cpp must agree with it)
// and is the reference where llama.cpp cannot run a format (MLX affine weights). Small models
// only: everything is held as float32 arrays.
//
// Semantics: RMSNorm (x / sqrt(mean(x²) + eps) * w), rotate_half RoPE on the HF q/k layout
// (rope.ts's inverse frequencies, so with llama3 or linear scaling), Qwen3's per-head q/k
// RMSNorm before RoPE, Qwen2's q/k/v biases, GQA with query head h reading KV head
// h / (heads / kvHeads), Mistral's sliding window (position p attends to p - window + 1 .. p;
// passed in, as config.ts leaves sliding_window to the families), SwiGLU MLP; and the
// Qwen3-MoE and Mixtral sparse blocks (transformers' per-expert tensors) on the layers that
// have a router: softmax over the experts, the top num_experts_per_tok (ties to the lower
// expert), renormalised for Mixtral and where norm_topk_prob says, their SwiGLUs weighted.
import { moduleQuantization, readConfigFiles, readModelConfig, type ModelConfig } from '../../src/models/config.js';
import { dequantizeAffine } from '../../src/models/quantize.js';
import { ropeInvFreq64 } from '../../src/models/rope.js';
import { listCheckpointTensors, readSafetensorsBytes, readTensorF32, type CheckpointTensor } from '../../src/models/safetensors.js';

interface Matrix { rows: number; cols: number; w: Float32Array }

export class HfReference {
  private readonly cfg: ModelConfig;
  private readonly tensors: Map<string, CheckpointTensor>;
  private readonly cache = new Map<string, Matrix>();
  private readonly vectors = new Map<string, Float32Array | undefined>();
  readonly heads: number;
  readonly kvHeads: number;
  readonly headDim: number;
  readonly hidden: number;
  private readonly invFreq: Float64Array;
  private readonly moe: { topK: number; renormalize: boolean };

  /** `window`: attend to the last `window` positions only (every layer). */
  constructor(readonly dir: string, private readonly window = Infinity) {
    this.cfg = readModelConfig(dir);
    this.tensors = listCheckpointTensors(dir);
    this.hidden = this.cfg.hidden;
    this.heads = this.cfg.heads;
    this.kvHeads = this.cfg.kvHeads;
    this.headDim = this.cfg.headDim;
    this.invFreq = ropeInvFreq64(this.cfg);
    const { json } = readConfigFiles(dir);
    this.moe = { topK: Number(json.num_experts_per_tok ?? 0), renormalize: json.model_type === 'mixtral' || json.norm_topk_prob === true };
  }

  has(name: string): boolean {
    return this.tensors.has(name);
  }

  /** A weight matrix as f32 [rows, cols], dequantized if the checkpoint stores it packed. */
  matrix(prefix: string): Matrix {
    let m = this.cache.get(prefix);
    if (m) return m;
    const t = this.tensors.get(`${prefix}.weight`);
    if (!t) throw new Error(`${this.dir}: no ${prefix}.weight`);
    const [rows, stored] = t.info.shape as [number, number];
    if (t.info.dtype === 'U32') {
      const q = moduleQuantization(this.cfg.quantization, prefix, true);
      if (!q) throw new Error(`${this.dir}: ${prefix}.weight is packed but config.json has no quantization for it`);
      const cols = (stored * 32) / q.bits;
      const packed = new Uint32Array(readSafetensorsBytes(t.path, t.header, t.name).buffer);
      const scales = readTensorF32(this.tensors.get(`${prefix}.scales`)!);
      const biases = readTensorF32(this.tensors.get(`${prefix}.biases`)!);
      m = { rows, cols, w: dequantizeAffine(packed, scales, biases, rows, cols, q.bits, q.groupSize) };
    } else {
      m = { rows, cols: stored, w: readTensorF32(t) };
    }
    this.cache.set(prefix, m);
    return m;
  }

  vector(name: string): Float32Array | undefined {
    if (!this.vectors.has(name)) {
      const t = this.tensors.get(name);
      this.vectors.set(name, t ? readTensorF32(t) : undefined);
    }
    return this.vectors.get(name);
  }

  /** Logits (float64) at the last position of `tokens`. */
  logits(tokens: number[]): Float64Array {
    const H = this.hidden;
    const D = this.headDim;
    const eps = this.cfg.rmsEps;
    const embed = this.matrix('model.embed_tokens');
    let x: Float64Array[] = tokens.map((t) => Float64Array.from(embed.w.subarray(t * H, (t + 1) * H)));
    for (let l = 0; l < this.cfg.layers; l++) {
      const p = `model.layers.${l}`;
      const h = x.map((v) => rmsNorm(v, this.vector(`${p}.input_layernorm.weight`)!, eps));
      const project = (name: string, n: number) => h.map((v) => {
        const out = matVec(this.matrix(`${p}.self_attn.${name}`), v);
        const b = this.vector(`${p}.self_attn.${name}.bias`);
        if (b) for (let i = 0; i < out.length; i++) out[i]! += b[i]!;
        const norm = this.vector(`${p}.self_attn.${name[0]}_norm.weight`);
        if (norm && name !== 'v_proj') for (let hh = 0; hh < n; hh++) out.set(rmsNorm(out.subarray(hh * D, (hh + 1) * D), norm, eps), hh * D);
        return out;
      });
      const q = project('q_proj', this.heads);
      const k = project('k_proj', this.kvHeads);
      const v = project('v_proj', this.kvHeads);
      q.forEach((vec, pos) => this.rope(vec, this.heads, pos));
      k.forEach((vec, pos) => this.rope(vec, this.kvHeads, pos));
      const group = this.heads / this.kvHeads;
      const attn = q.map((qv, pos) => {
        const out = new Float64Array(this.heads * D);
        for (let hh = 0; hh < this.heads; hh++) {
          const kh = Math.floor(hh / group);
          const first = Math.max(0, pos - this.window + 1);
          const scores = new Float64Array(pos + 1 - first);
          for (let j = first; j <= pos; j++) scores[j - first] = dot(qv, hh * D, k[j]!, kh * D, D) / Math.sqrt(D);
          const probs = softmax(scores);
          for (let j = first; j <= pos; j++) for (let d = 0; d < D; d++) out[hh * D + d]! += probs[j - first]! * v[j]![kh * D + d]!;
        }
        return out;
      });
      x = x.map((xv, pos) => add(xv, matVec(this.matrix(`${p}.self_attn.o_proj`), attn[pos]!)));
      x = x.map((xv) => {
        const hv = rmsNorm(xv, this.vector(`${p}.post_attention_layernorm.weight`)!, eps);
        return add(xv, this.feedForward(p, hv));
      });
    }
    const last = rmsNorm(x[x.length - 1]!, this.vector('model.norm.weight')!, eps);
    const head = this.cfg.tieEmbeddings || !this.has('lm_head.weight') ? embed : this.matrix('lm_head');
    return matVec(head, last);
  }

  /** The layer's MLP, or its mixture of experts where it has a router. */
  private feedForward(p: string, hv: Float64Array): Float64Array {
    const block = ['mlp', 'block_sparse_moe'].find((b) => this.has(`${p}.${b}.gate.weight`));
    if (!block) return this.swiglu(`${p}.mlp`, ['gate_proj', 'up_proj', 'down_proj'], hv);
    const probs = softmax(matVec(this.matrix(`${p}.${block}.gate`), hv));
    const chosen = [...probs.keys()].sort((a, b) => probs[b]! - probs[a]! || a - b).slice(0, this.moe.topK);
    const total = this.moe.renormalize ? chosen.reduce((n, e) => n + probs[e]!, 0) : 1;
    const names = block === 'mlp' ? ['gate_proj', 'up_proj', 'down_proj'] : ['w1', 'w3', 'w2'];
    const out = new Float64Array(this.hidden);
    for (const e of chosen) {
      const y = this.swiglu(`${p}.${block}.experts.${e}`, names, hv);
      for (let i = 0; i < out.length; i++) out[i]! += (probs[e]! / total) * y[i]!;
    }
    return out;
  }

  /** down(silu(gate(x)) * up(x)) of the projections `<p>.<gate|up|down>`. */
  private swiglu(p: string, [gateName, upName, downName]: string[], hv: Float64Array): Float64Array {
    const gate = matVec(this.matrix(`${p}.${gateName}`), hv);
    const up = matVec(this.matrix(`${p}.${upName}`), hv);
    for (let i = 0; i < gate.length; i++) gate[i] = (gate[i]! / (1 + Math.exp(-gate[i]!))) * up[i]!;
    return matVec(this.matrix(`${p}.${downName}`), gate);
  }

  /** Greedy continuation (recomputes the whole prefix each step: fine for a few dozen tokens). */
  greedy(prompt: number[], steps: number): number[] {
    return this.greedyWithMargins(prompt, steps).tokens;
  }

  /** The greedy continuation and each step's logit(top1) - logit(top2). */
  greedyWithMargins(prompt: number[], steps: number): { tokens: number[]; margins: number[] } {
    const seq = [...prompt];
    const tokens: number[] = [];
    const margins: number[] = [];
    for (let s = 0; s < steps; s++) {
      const logits = this.logits(seq);
      let best = 0;
      let second = -Infinity;
      for (let i = 1; i < logits.length; i++) {
        if (logits[i]! > logits[best]!) {
          second = logits[best]!;
          best = i;
        } else second = Math.max(second, logits[i]!);
      }
      tokens.push(best);
      margins.push(logits[best]! - second);
      seq.push(best);
    }
    return { tokens, margins };
  }

  /** HF rotate_half RoPE in place: dims (i, i + D/2) of each head form a pair. */
  private rope(vec: Float64Array, nHeads: number, pos: number): void {
    const D = this.headDim;
    for (let h = 0; h < nHeads; h++) {
      for (let i = 0; i < D / 2; i++) {
        const angle = pos * this.invFreq[i]!;
        const cos = Math.cos(angle);
        const sin = Math.sin(angle);
        const a = vec[h * D + i]!;
        const b = vec[h * D + i + D / 2]!;
        vec[h * D + i] = a * cos - b * sin;
        vec[h * D + i + D / 2] = b * cos + a * sin;
      }
    }
  }
}

function rmsNorm(v: ArrayLike<number>, w: Float32Array, eps: number): Float64Array {
  let ss = 0;
  for (let i = 0; i < v.length; i++) ss += v[i]! * v[i]!;
  const r = 1 / Math.sqrt(ss / v.length + eps);
  const out = new Float64Array(v.length);
  for (let i = 0; i < v.length; i++) out[i] = v[i]! * r * w[i]!;
  return out;
}

function matVec(m: Matrix, v: Float64Array): Float64Array {
  const out = new Float64Array(m.rows);
  for (let r = 0; r < m.rows; r++) {
    let s = 0;
    const base = r * m.cols;
    for (let c = 0; c < m.cols; c++) s += m.w[base + c]! * v[c]!;
    out[r] = s;
  }
  return out;
}

function dot(a: Float64Array, ai: number, b: Float64Array, bi: number, n: number): number {
  let s = 0;
  for (let i = 0; i < n; i++) s += a[ai + i]! * b[bi + i]!;
  return s;
}

function softmax(x: Float64Array): Float64Array {
  let max = -Infinity;
  for (const v of x) max = Math.max(max, v);
  const out = x.map((v) => Math.exp(v - max));
  const sum = out.reduce((a, b) => a + b, 0);
  return out.map((v) => v / sum);
}

function add(a: Float64Array, b: Float64Array): Float64Array {
  const out = new Float64Array(a.length);
  for (let i = 0; i < a.length; i++) out[i] = a[i]! + b[i]!;
  return out;
}
