// An Engine without a GPU: emits scripted token ids over the real stories260k tokenizer,
// one request at a time (a single slot), honouring maxTokens, abort, early return and a
// bounded queue.
import { NO_MEMORY, QueueFullError, zeroCounters, type EngineStats, type GenerationEvent, type GenerationRequest, type ModelInfo } from '../../src/engine/types.js';
import { TextTokenizer } from '../../src/models/tokenizer.js';
import { EngineStub } from './engine-stub.js';

export const STORIES_DIR = new URL('../../models/stories260k', import.meta.url).pathname;

export interface FakeEngineOptions {
  /** Ids to emit; when they run out before maxTokens the request ends with 'stop' (an EOS). */
  script?: (req: GenerationRequest) => number[];
  contextSize?: number;
  /** Pause before each token, so a test can disconnect mid-generation. */
  tokenDelayMs?: number;
  /** Requests that may wait for the slot before generate throws QueueFullError. */
  maxQueue?: number;
  /** Fails the generation (as a broken GPU pass would) after this many tokens. */
  failAfter?: number;
  /** Another checkpoint's tokenizer (and chat template) instead of stories260k's. */
  tokenizerDir?: string;
}

/** The greedy continuation of "Once upon a time" (expected.json case 2). */
export const ONCE_UPON_A_TIME_IDS = [
  432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282,
  295, 433, 426, 385, 328, 432, 358, 394, 261, 370, 432, 352, 266, 268, 388, 426, 338, 391, 266, 267, 337, 335, 312, 432,
  398, 312, 286, 267, 414, 270, 333, 415, 426, 13, 438, 310, 439, 419, 357, 336,
];
export const ONCE_UPON_A_TIME_TEXT =
  ", there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.\nLily's mom said";

export class FakeEngine extends EngineStub {
  readonly info: ModelInfo;
  readonly adapterDescription = 'fake adapter (no GPU)';
  readonly requests: GenerationRequest[] = [];
  /** Requests that ended without a 'done' (aborted or returned early). */
  cancelled = 0;
  completed = 0;
  running = 0;
  maxRunning = 0;
  private waiting = 0;
  private queue: Promise<void> = Promise.resolve();

  private constructor(
    readonly tokenizer: TextTokenizer,
    private readonly options: FakeEngineOptions,
  ) {
    super();
    this.info = {
      id: 'stories260k',
      path: options.tokenizerDir ?? STORIES_DIR,
      architecture: 'llama',
      vocabSize: tokenizer.vocabSize,
      contextSize: options.contextSize ?? 512,
      eosTokenIds: [2, 1],
    };
  }

  static async create(options: FakeEngineOptions = {}): Promise<FakeEngine> {
    return new FakeEngine(await TextTokenizer.load(options.tokenizerDir ?? STORIES_DIR), options);
  }

  /** Like the real engine, refuses synchronously when the queue is full. */
  generate(req: GenerationRequest): AsyncIterable<GenerationEvent> {
    const free = 1 - this.running;
    if (this.waiting - free >= (this.options.maxQueue ?? Infinity)) throw new QueueFullError(this.waiting);
    this.requests.push(req);
    this.waiting++;
    return this.run(req);
  }

  stats(): EngineStats {
    return {
      slots: 1,
      activeSequences: this.running,
      queueDepth: this.waiting,
      slotStates: [this.running ? 'decoding' : 'idle', ...Array.from({ length: this.waiting }, () => 'queued' as const)],
      counters: { ...zeroCounters(), sequences_started: this.completed + this.cancelled + this.running, sequences_completed: this.completed },
      memory: NO_MEMORY,
    };
  }

  private async *run(req: GenerationRequest): AsyncGenerator<GenerationEvent> {
    const previous = this.queue;
    let release!: () => void;
    this.queue = new Promise((resolve) => (release = resolve));
    let started = false;
    let finished = false;
    try {
      await previous;
      this.waiting--;
      started = true;
      this.running++;
      this.maxRunning = Math.max(this.maxRunning, this.running);
      const ids = (this.options.script ?? (() => ONCE_UPON_A_TIME_IDS))(req);
      let n = 0;
      for (; n < Math.min(ids.length, req.maxTokens); n++) {
        if (this.options.tokenDelayMs) await new Promise((r) => setTimeout(r, this.options.tokenDelayMs));
        if (req.signal?.aborted) return;
        if (n === this.options.failAfter) throw new Error('engine step failed');
        const id = ids[n]!;
        // Logprobs when asked: the chosen token at -0.25, then ids above it, each lower.
        const logprobs = req.logprobs === undefined ? undefined : [{ token: id, logprob: -0.25 }, ...Array.from({ length: req.logprobs }, (_, k) => ({ token: (id + k + 1) % this.info.vocabSize, logprob: -1 - k }))];
        yield logprobs ? { type: 'token', id, logprobs } : { type: 'token', id };
      }
      finished = true;
      yield {
        type: 'done',
        reason: n < req.maxTokens ? 'stop' : 'length',
        promptTokens: req.promptTokens.length,
        completionTokens: n,
        cachedTokens: 0,
        timings: {
          prompt_n: req.promptTokens.length,
          prompt_ms: 1,
          prompt_per_token_ms: 1 / req.promptTokens.length,
          prompt_per_second: req.promptTokens.length * 1000,
          predicted_n: n,
          predicted_ms: n,
          predicted_per_token_ms: 1,
          predicted_per_second: 1000,
        },
      };
    } finally {
      if (finished) this.completed++;
      else this.cancelled++;
      if (started) this.running--;
      else this.waiting--;
      release();
    }
  }
}
