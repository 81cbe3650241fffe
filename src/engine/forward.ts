// One forward pass over a batch of sequence chunks: fill the batch metadata, replay the
// recorded program in one submission, and read back only the sampled token ids.
import { mapRead, workDone } from '../runtime/gpu.js';
import type { LoadedModel } from '../models/model.js';

export interface SampleInput {
  temperature: number;
  topK: number;
  topP: number;
  /** Uniform draw in [0, 1) from the request's own RNG. */
  u: number;
}

export interface SeqChunk {
  /** Tokens to run, at positions startPos, startPos + 1, ... */
  tokens: number[];
  startPos: number;
  /** KV block ids covering positions 0 .. startPos + tokens.length - 1. */
  table: number[];
  /** Present when this chunk ends with a token whose successor is sampled. */
  sample?: SampleInput;
}

export class ForwardRunner {
  private readonly staging: GPUBuffer;

  constructor(readonly model: LoadedModel) {
    this.staging = model.ops.gpu.device.createBuffer({
      label: 'sampled_readback',
      size: Math.max(16, model.maxSeqs * 4),
      usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
    });
  }

  /** Runs the chunks; returns the sampled id of each chunk that asked to sample, in order. */
  async run(chunks: SeqChunk[]): Promise<number[]> {
    const { model } = this;
    const { meta } = model;
    const queue = model.ops.gpu.device.queue;
    const nTokens = chunks.reduce((n, c) => n + c.tokens.length, 0);
    if (nTokens > model.maxTokens) throw new Error(`batch of ${nTokens} tokens exceeds ${model.maxTokens}`);
    const tokens = new Uint32Array(nTokens);
    const pos = new Uint32Array(nTokens);
    const tableOf = new Uint32Array(nTokens);
    const tables: number[] = [];
    const seqLast: number[] = [];
    const params: number[] = [];
    let t = 0;
    for (const c of chunks) {
      const tableOffset = tables.length;
      tables.push(...c.table);
      for (let i = 0; i < c.tokens.length; i++, t++) {
        tokens[t] = c.tokens[i];
        pos[t] = c.startPos + i;
        tableOf[t] = tableOffset;
      }
      if (c.sample) {
        seqLast.push(t - 1);
        params.push(c.sample.temperature, c.sample.topK, c.sample.topP, c.sample.u);
      }
    }
    if (tables.length > model.maxTableEntries) throw new Error('block table overflow');
    const nSeqs = seqLast.length;
    queue.writeBuffer(meta.tokens, 0, tokens);
    queue.writeBuffer(meta.tokenPos, 0, pos);
    queue.writeBuffer(meta.tokenTable, 0, tableOf);
    queue.writeBuffer(meta.blockTable, 0, Uint32Array.from(tables));
    if (nSeqs > 0) {
      queue.writeBuffer(meta.seqLast, 0, Uint32Array.from(seqLast));
      const sp = new ArrayBuffer(nSeqs * 16);
      const f = new Float32Array(sp);
      const u = new Uint32Array(sp);
      for (let s = 0; s < nSeqs; s++) {
        f[s * 4] = params[s * 4];
        u[s * 4 + 1] = params[s * 4 + 1];
        f[s * 4 + 2] = params[s * 4 + 2];
        f[s * 4 + 3] = params[s * 4 + 3];
      }
      queue.writeBuffer(meta.seqParams, 0, sp);
    }
    const shape = { tokens: nTokens, seqs: nSeqs };
    model.ops.writeStep(shape);
    const encoder = model.ops.gpu.device.createCommandEncoder();
    model.program.encode(encoder, shape);
    if (nSeqs > 0) encoder.copyBufferToBuffer(meta.sampled, 0, this.staging, 0, nSeqs * 4);
    queue.submit([encoder.finish()]);
    // Waiting even when nothing is read back lets HTTP events (a client hanging up)
    // run between the chunks of a long prompt.
    if (nSeqs === 0) {
      await workDone(queue);
      return [];
    }
    const ids = new Uint32Array(await mapRead(this.staging), 0, nSeqs);
    return Array.from(ids);
  }

  /**
   * The full logits rows of the last pass's sampling sequences. For tests and oracle
   * comparisons only: generation never reads logits back.
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
