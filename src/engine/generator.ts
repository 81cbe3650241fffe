// The generation loop: requests wait in a FIFO queue and run one at a time: prefill in
// chunks of up to maxTokens, then one decode step per token, each step one submission.
import type { TextTokenizer } from '../models/tokenizer.js';
import type { Engine } from './engine.js';
import { Channel } from './channel.js';
import { ForwardRunner, type SampleInput } from './forward.js';
import { BlockAllocator } from './kv-cache.js';
import { randomSeed, Rng } from './rng.js';
import type { GenerationEvent, GenerationRequest, ModelInfo, Timings } from './types.js';

interface Job {
  req: GenerationRequest;
  events: Channel<GenerationEvent>;
  cancelled: boolean;
}

export class Generator implements Engine {
  private readonly queue: Job[] = [];
  private running = false;
  private readonly blocks: BlockAllocator;

  constructor(
    readonly info: ModelInfo,
    readonly tokenizer: TextTokenizer,
    readonly adapterDescription: string,
    private readonly runner: ForwardRunner,
  ) {
    const kv = runner.model.kv;
    this.blocks = new BlockAllocator(kv.blocks, kv.blockSize);
  }

  generate(req: GenerationRequest): AsyncIterable<GenerationEvent> {
    const job: Job = { req, cancelled: false, events: undefined as unknown as Channel<GenerationEvent> };
    job.events = new Channel(() => (job.cancelled = true));
    req.signal?.addEventListener('abort', () => (job.cancelled = true), { once: true });
    this.queue.push(job);
    void this.drain();
    return job.events;
  }

  async close(): Promise<void> {
    for (const job of this.queue.splice(0)) job.events.close();
  }

  private async drain(): Promise<void> {
    if (this.running) return;
    this.running = true;
    try {
      for (let job = this.queue.shift(); job; job = this.queue.shift()) {
        try {
          await this.run(job);
          job.events.close();
        } catch (e) {
          job.events.close(e);
        }
      }
    } finally {
      this.running = false;
    }
  }

  private async run(job: Job): Promise<void> {
    const { req } = job;
    const prompt = req.promptTokens;
    const ctx = this.info.contextSize;
    if (prompt.length === 0) throw new Error('empty prompt');
    if (prompt.length >= ctx) throw new Error(`prompt of ${prompt.length} tokens does not fit the context of ${ctx}`);
    const { temperature, topK, topP } = req.sampling;
    const rng = new Rng(req.sampling.seed ?? randomSeed());
    const sample = (): SampleInput => ({ temperature, topK, topP, u: rng.next() });
    const table: number[] = [];
    const chunk = this.runner.model.maxTokens;
    const eos = new Set(this.info.eosTokenIds);
    const t0 = performance.now();
    let tPrompt = 0;
    let generated = 0;
    let reason: 'stop' | 'length' = 'length';
    try {
      let next = -1;
      for (let start = 0; start < prompt.length && !job.cancelled; start += chunk) {
        const tokens = prompt.slice(start, start + chunk);
        const last = start + tokens.length === prompt.length;
        this.reserve(table, start + tokens.length);
        [next] = await this.runner.run([{ tokens, startPos: start, table, sample: last ? sample() : undefined }]);
      }
      tPrompt = performance.now();
      let pos = prompt.length;
      while (!job.cancelled) {
        if (eos.has(next)) { reason = 'stop'; break; }
        job.events.push({ type: 'token', id: next });
        generated++;
        if (generated >= req.maxTokens || pos + 1 >= ctx) break;
        this.reserve(table, pos + 1);
        [next] = await this.runner.run([{ tokens: [next], startPos: pos, table, sample: sample() }]);
        pos++;
      }
    } finally {
      this.blocks.release(table);
    }
    if (job.cancelled) return;
    const tEnd = performance.now();
    job.events.push({ type: 'done', reason, promptTokens: prompt.length, completionTokens: generated, timings: timings(prompt.length, tPrompt - t0, generated, tEnd - tPrompt) });
  }

  private reserve(table: number[], tokens: number): void {
    if (!this.blocks.ensure(table, tokens)) throw new Error('KV cache is full');
  }
}

function timings(promptN: number, promptMs: number, predictedN: number, predictedMs: number): Timings {
  return {
    prompt_n: promptN,
    prompt_ms: promptMs,
    prompt_per_token_ms: promptN ? promptMs / promptN : 0,
    prompt_per_second: promptMs ? (promptN * 1000) / promptMs : 0,
    predicted_n: predictedN,
    predicted_ms: predictedMs,
    predicted_per_token_ms: predictedN ? predictedMs / predictedN : 0,
    predicted_per_second: predictedMs ? (predictedN * 1000) / predictedMs : 0,
  };
}
