// One forward pass over a batch of sequence chunks: fill the batch metadata, replay the
// recorded program in one submission, and read back only the sampled token ids (and the
// few logprobs a request asked for).
import { mapRead, workDone } from '../runtime/gpu.js';
import { MAX_TOP_LOGPROBS, maskWords, packBiasEntries, packSeqParams, type BiasEntry, type SeqParams } from '../runtime/ops/sampling.js';
import type { Dispatch } from '../runtime/program.js';
import type { LoadedModel } from '../models/model.js';
import type { PromptImage } from './types.js';

/** A penalty on one token: logit -> (repeat-penalised logit) - subtract. */
export interface TokenPenalty {
  repeat: number;
  subtract: number;
}

export interface SampleInput {
  /** 0 = greedy. */
  temperature: number;
  topK: number;
  topP: number;
  minP: number;
  pLess: boolean;
  /** XTC probability threshold when XTC fires this step (the host draws its chance), else 0. */
  xtcThreshold: number;
  /** Uniform draw in [0, 1) from the request's own RNG. */
  u: number;
  /** Allowed tokens this step (bit t % 32 of word t / 32), or undefined for all. */
  mask?: Uint32Array;
  /** Penalties (repetition, frequency, presence, DRY) per token id. */
  penalties?: Map<number, TokenPenalty>;
  /** Top logprobs wanted besides the chosen token's; undefined = no logprobs. */
  topLogprobs?: number;
  /** The logprobs are of the distribution the token was drawn from (after the whole chain). */
  postSampling?: boolean;
}

export interface TokenLogprob {
  token: number;
  logprob: number;
}

export interface Sampled {
  token: number;
  /** The chosen token's logprob first, then the top ones, when asked for. */
  logprobs?: TokenLogprob[];
}

export interface SeqChunk {
  /** Tokens to run, at positions startPos, startPos + 1, ... */
  tokens: number[];
  startPos: number;
  /** KV block ids covering positions 0 .. startPos + tokens.length - 1. */
  table: number[];
  /**
   * The sequence's slot: the recurrent state the chunk continues from and leaves its state
   * in (a recurrent model's), and the ring its sliding-window layers keep their last
   * positions in (a ring KV layer's, kv_cache.wgsl). Default 0. A chunk at position 0 starts
   * from a zero state.
   */
  state?: number;
  /** Present when this chunk ends with a token whose successor is sampled. */
  sample?: SampleInput;
  /**
   * Samples at the tokens before the last, with `sample` (speculative verification):
   * verify[i] at token tokens.length - 1 - verify.length + i. Their results come before `sample`'s.
   */
  verify?: SampleInput[];
  /**
   * Choices forked from this sequence (n > 1): each samples its own first token from the
   * same last-token logits, after `sample`.
   */
  forks?: SampleInput[];
  /** Images whose soft tokens lie in this chunk, each whole (a vision-language model's). */
  images?: ChunkImage[];
  /** All of the sequence's images, where their grids place its multimodal-RoPE positions (PromptImage.grid). */
  seqImages?: readonly PromptImage[];
}

/** One image's soft tokens in a chunk: they replace the embeddings of tokens at .. at + n - 1, which attend to each other both ways. */
export interface ChunkImage {
  /** Index of the first in the chunk's tokens. */
  at: number;
  /** [n, hidden] embeddings. */
  rows: Float32Array;
}

const LOGPROB_WORDS = 2 * (1 + MAX_TOP_LOGPROBS);
/**
 * Batch sizes whose steps select different kernels: 5 tokens takes matmul_q's 8-token
 * tiles and the prefill attention, 3 its 4-token tiles, 1 the matvecs and decode attention.
 */
const WARMUP_TOKENS = [5, 3, 1];
/** Ends a sequence's logprob list early (sample.wgsl). */
const NO_TOKEN = 0xffffffff;

export class ForwardRunner {
  private readonly staging: GPUBuffer;
  private readonly maskWords: number;

  constructor(readonly model: LoadedModel) {
    this.maskWords = maskWords(model.cfg.vocab);
    this.staging = model.ops.gpu.device.createBuffer({
      label: 'sampled_readback',
      size: model.maxSeqs * 4 * (1 + LOGPROB_WORDS),
      usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
    });
  }

  /**
   * Dispatches every pipeline of the forward pass once in each batch shape, so that the
   * driver compiles what it compiles on first use now rather than in a user's first
   * request (llvmpipe compiles a kernel on its first dispatch, from its on-disk shader
   * cache when warm). Only each pipeline's first active dispatch runs, so the values are
   * garbage; they land in activations every step rewrites and in KV block 0 at positions
   * a sequence writes before it reads them.
   */
  async warmUp(): Promise<void> {
    const sample: SampleInput = { temperature: 0, topK: 0, topP: 1, minP: 0, pLess: false, xtcThreshold: 0, u: 0 };
    for (const n of new Set(WARMUP_TOKENS.map((t) => Math.min(t, this.model.maxTokens)))) {
      const seen = new Set<GPUComputePipeline>();
      const firstOfEach = (d: Dispatch) => {
        if (seen.has(d.pipeline)) return false;
        seen.add(d.pipeline);
        return true;
      };
      await this.run([{ tokens: new Array<number>(n).fill(0), startPos: 0, table: [0], sample }], firstOfEach);
    }
  }

  /**
   * Runs the chunks; returns what each chunk that asked to sample got, in order: a chunk's
   * verify samples, its sample, then its forks. `only` restricts the step to some of its dispatches (warmUp).
   */
  async run(chunks: SeqChunk[], only?: (d: Dispatch) => boolean): Promise<Sampled[]> {
    const { model } = this;
    const { meta } = model;
    const queue = model.ops.gpu.device.queue;
    const nTokens = chunks.reduce((n, c) => n + c.tokens.length, 0);
    if (nTokens > model.maxTokens) throw new Error(`batch of ${nTokens} tokens exceeds ${model.maxTokens}`);
    const tokens = new Uint32Array(nTokens);
    const pos = new Uint32Array(nTokens);
    const tableOf = new Uint32Array(nTokens);
    const slotOf = new Uint32Array(nTokens);
    const tables: number[] = [];
    const seqLast: number[] = [];
    const samples: SampleInput[] = [];
    const chunkMeta = new Uint32Array(4 * chunks.length);
    let t = 0;
    for (const [i, c] of chunks.entries()) {
      chunkMeta.set([t, c.tokens.length, c.state ?? 0, c.startPos], 4 * i);
      const tableOffset = tables.length;
      tables.push(...c.table);
      for (let i = 0; i < c.tokens.length; i++, t++) {
        tokens[t] = c.tokens[i];
        pos[t] = c.startPos + i;
        tableOf[t] = tableOffset;
        slotOf[t] = c.state ?? 0;
      }
      const verify = c.sample ? c.verify ?? [] : [];
      verify.forEach((sample, i) => {
        seqLast.push(t - 1 - verify.length + i);
        samples.push(sample);
      });
      for (const sample of c.sample ? [c.sample, ...(c.forks ?? [])] : []) {
        seqLast.push(t - 1);
        samples.push(sample);
      }
    }
    if (tables.length > model.maxTableEntries) throw new Error('block table overflow');
    if (samples.length > model.maxSeqs) throw new Error(`${samples.length} sampled sequences exceed ${model.maxSeqs}`);
    if (model.mropePositions) queue.writeBuffer(model.mropePositions, 0, mropePositions(chunks, model.cfg.hidden));
    if (model.images) this.writeImages(chunks, pos);
    else if (chunks.some((c) => c.images)) throw new Error('this model takes no images');
    queue.writeBuffer(meta.tokens, 0, tokens);
    queue.writeBuffer(meta.tokenPos, 0, pos);
    queue.writeBuffer(meta.tokenTable, 0, tableOf);
    queue.writeBuffer(meta.tokenSlot, 0, slotOf);
    queue.writeBuffer(meta.blockTable, 0, Uint32Array.from(tables));
    queue.writeBuffer(meta.chunks, 0, chunkMeta);
    const nSeqs = samples.length;
    const nBias = nSeqs > 0 ? this.writeSampling(seqLast, samples) : 0;
    const shape = { tokens: nTokens, seqs: nSeqs, bias: nBias, chunks: chunks.length };
    model.ops.writeStep(shape);
    const wantLogprobs = samples.some((s) => s.topLogprobs !== undefined);
    await model.program.submit(model.ops.gpu, shape, {
      only,
      finish: (encoder) => {
        if (nSeqs > 0) encoder.copyBufferToBuffer(meta.sampled, 0, this.staging, 0, nSeqs * 4);
        if (wantLogprobs) encoder.copyBufferToBuffer(meta.logprobs, 0, this.staging, model.maxSeqs * 4, nSeqs * LOGPROB_WORDS * 4);
      },
    });
    // Waiting even when nothing is read back lets HTTP events (a client hanging up)
    // run between the chunks of a long prompt.
    if (nSeqs === 0) {
      await workDone(queue);
      return [];
    }
    const data = await mapRead(this.staging);
    const ids = new Uint32Array(data, 0, nSeqs);
    const lp = new DataView(data, model.maxSeqs * 4);
    return samples.map((s, i) => {
      const out: Sampled = { token: ids[i] };
      if (s.topLogprobs !== undefined) {
        out.logprobs = [];
        for (let k = 0; k <= Math.min(s.topLogprobs, MAX_TOP_LOGPROBS); k++) {
          const o = (i * LOGPROB_WORDS + 2 * k) * 4;
          const token = lp.getUint32(o, true);
          if (token === NO_TOKEN) break;
          out.logprobs.push({ token, logprob: lp.getFloat32(o + 4, true) });
        }
      }
      return out;
    });
  }

  /**
   * A vision-language model's image inputs for the pass: each token attends to its own
   * position, an image's tokens to their image's last; the image tokens' rows and flags.
   */
  private writeImages(chunks: SeqChunk[], pos: Uint32Array): void {
    const images = this.model.images!;
    const queue = this.model.ops.gpu.device.queue;
    const hidden = this.model.cfg.hidden;
    const keyEnd = pos.slice();
    const flags = new Uint32Array(pos.length);
    let first = 0;
    for (const c of chunks) {
      for (const image of c.images ?? []) {
        const n = image.rows.length / hidden;
        const start = first + image.at;
        keyEnd.fill(pos[start + n - 1]!, start, start + n);
        flags.fill(1, start, start + n);
        queue.writeBuffer(images.rows, start * hidden * 4, image.rows);
      }
      first += c.tokens.length;
    }
    queue.writeBuffer(images.keyEnd, 0, keyEnd);
    queue.writeBuffer(images.flags, 0, flags);
  }

  /** Writes per-sequence sampler params, masks and penalties; returns the entry count. */
  private writeSampling(seqLast: number[], samples: SampleInput[]): number {
    const { meta } = this.model;
    const queue = this.model.ops.gpu.device.queue;
    queue.writeBuffer(meta.seqLast, 0, Uint32Array.from(seqLast));
    const entries: BiasEntry[] = [];
    const params = samples.map((s, seq): SeqParams => {
      if (s.mask) queue.writeBuffer(meta.masks, seq * this.maskWords * 4, s.mask);
      for (const [token, pen] of s.penalties ?? []) entries.push({ seq, token, repeat: pen.repeat, subtract: pen.subtract });
      return {
        temperature: s.temperature, top_k: s.topK, top_p: s.topP, u: s.u, min_p: s.minP, p_less: s.pLess,
        xtc_threshold: s.xtcThreshold, masked: s.mask !== undefined,
        logprobs: s.topLogprobs === undefined ? 0 : 1 + Math.min(s.topLogprobs, MAX_TOP_LOGPROBS),
        post_sampling: s.postSampling === true,
      };
    });
    queue.writeBuffer(meta.seqParams, 0, packSeqParams(params));
    const n = entries.length;
    if (n > meta.biasCapacity) throw new Error(`${n} penalty entries exceed ${meta.biasCapacity}`);
    if (n > 0) queue.writeBuffer(meta.biasEntries, 0, packBiasEntries(entries));
    return n;
  }

  /**
   * The full logits rows of the last pass's sampling sequences, after penalties. For
   * tests and oracle comparisons only: generation never reads logits back.
   */
  async readLogits(seqs: number): Promise<Float32Array> {
    const device = this.model.ops.gpu.device;
    const bytes = seqs * this.model.cfg.vocab * 4;
    const staging = device.createBuffer({ label: 'logits_readback', size: bytes, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    const encoder = device.createCommandEncoder();
    encoder.copyBufferToBuffer(this.model.logits, 0, staging, 0, bytes);
    device.queue.submit([encoder.finish()]);
    const data = new Float32Array(await mapRead(staging));
    staging.destroy();
    return data;
  }
}

/** Each token's multimodal-RoPE positions (t, h, w) in the pass, from its sequence's images' grids (PromptImage.grid). */
export function mropePositions(chunks: readonly SeqChunk[], hidden: number): Uint32Array {
  const out = new Uint32Array(3 * chunks.reduce((n, c) => n + c.tokens.length, 0));
  let t = 0;
  for (const c of chunks) {
    const images = (c.seqImages ?? []).filter((im) => im.grid);
    let next = 0;
    // Position j of the sequence is j + shift until the next image: each image moves the text after it by p + max(h, w) - its end.
    let shift = 0;
    for (let j = c.startPos; j < c.startPos + c.tokens.length; j++, t++) {
      while (next < images.length && j >= images[next]!.start + images[next]!.rows.length / hidden) {
        const im = images[next++]!;
        shift = im.start + shift + Math.max(im.grid!.h, im.grid!.w) - (im.start + im.rows.length / hidden);
      }
      const im = images[next];
      if (im && j >= im.start) {
        const p = im.start + shift;
        const k = j - im.start;
        out.set([p, p + Math.floor(k / im.grid!.w), p + (k % im.grid!.w)], 3 * t);
      } else {
        out.fill(j + shift, 3 * t, 3 * t + 3);
      }
    }
  }
  return out;
}
