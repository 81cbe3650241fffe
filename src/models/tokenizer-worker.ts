// Tokenizing long texts off the event loop. A worker thread holds its own copy of the
// checkpoint's tokenizer (same tokenizer.json, same library, so the same ids) and encodes
// one text at a time; the server's loop only posts the text and receives an Int32Array.
//
// The worker is started on the first long text and unref'd, so it never keeps the
// process alive; if it dies, the texts it held are rejected and the next text starts a
// new one.
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';

/** Texts at least this long (UTF-16 units) go to the worker: ~5-30 ms of tokenizing inline. */
export const WORKER_MIN_CHARS = 32 * 1024;

// Plain CommonJS (the worker starts without the parent's flags, so no --input-type or
// loader changes that), the same under the compiled build and the test runner.
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const { readFileSync } = require('node:fs');
const { Tokenizer } = require(workerData.lib);
const tok = new Tokenizer(JSON.parse(readFileSync(workerData.tokenizerJson, 'utf8')), workerData.config);
parentPort.on('message', ({ id, text, addSpecial }) => {
  let ids;
  try {
    ids = Int32Array.from(tok.encode(text, { add_special_tokens: addSpecial }).ids);
  } catch (err) {
    parentPort.postMessage({ id, error: String((err && err.message) || err) });
    return;
  }
  parentPort.postMessage({ id, ids }, [ids.buffer]);
});
`;

type Reply = { id: number; ids: Int32Array; error?: undefined } | { id: number; error: string };

interface Pending {
  resolve: (ids: number[]) => void;
  reject: (err: Error) => void;
}

export class TokenizerWorker {
  private worker: Worker | undefined;
  private readonly pending = new Map<number, Pending>();
  private nextId = 0;

  constructor(
    private readonly tokenizerJson: string,
    private readonly config: unknown,
  ) {}

  encode(text: string, addSpecial: boolean): Promise<number[]> {
    const worker = this.worker ?? this.start();
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      if (this.pending.size === 1) worker.ref();
      worker.postMessage({ id, text, addSpecial });
    });
  }

  async close(): Promise<void> {
    const worker = this.worker;
    this.worker = undefined;
    this.rejectAll(new Error('tokenizer closed'));
    if (worker) await worker.terminate();
  }

  private rejectAll(err: Error): void {
    for (const waiter of this.pending.values()) waiter.reject(err);
    this.pending.clear();
  }

  private start(): Worker {
    const lib = createRequire(import.meta.url).resolve('@huggingface/tokenizers');
    const worker = new Worker(WORKER_SOURCE, {
      eval: true,
      execArgv: [],
      workerData: { lib, tokenizerJson: this.tokenizerJson, config: this.config },
    });
    worker.unref();
    worker.on('message', (reply: Reply) => {
      const waiter = this.pending.get(reply.id);
      if (!waiter) return;
      this.pending.delete(reply.id);
      if (this.pending.size === 0) worker.unref();
      if (reply.error !== undefined) waiter.reject(new Error(`tokenizer: ${reply.error}`));
      else waiter.resolve(Array.from(reply.ids));
    });
    const fail = (err: Error): void => {
      if (this.worker !== worker) return;
      this.worker = undefined;
      this.rejectAll(err);
    };
    worker.on('error', fail);
    worker.on('exit', (code) => fail(new Error(`tokenizer worker exited with code ${code}`)));
    this.worker = worker;
    return worker;
  }
}
