// Request memory admission: the memory a server may use, set at load, and what each request
// is estimated to take of it. The budget is the smallest of what the adapter can allocate (a
// CPU adapter's host memory; WebGPU reports none for a GPU), the process's own limit (its
// cgroup's memory.max) and MLXCEL_REQUEST_MEMORY_BUDGET, which can only lower it. The
// weights come off the top; each request reserves a conservative estimate of the KV blocks
// (or recurrent state) its prompt and max_tokens can fill, per choice, and of its prefill
// chunk's activations, until its last choice ends. A request whose estimate exceeds what is
// free is refused (MemoryBudgetError) before it is queued.
import { readFileSync } from 'node:fs';
import { totalmem } from 'node:os';

const UNITS: Record<string, number> = { '': 1, K: 2 ** 10, M: 2 ** 20, G: 2 ** 30, T: 2 ** 40 };

/**
 * A byte size: a whole number of bytes, or a number with a binary unit K, M, G or T (also
 * KB, KiB, ...; case-insensitive): "12G" is 12 GiB. Zero, "none" and anything else throw.
 */
export function parseByteSize(text: string, name: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$/i.exec(text);
  const bytes = m ? Math.floor(Number(m[1]) * UNITS[m[2]!.toUpperCase()]!) : NaN;
  if (!(bytes > 0) || !Number.isSafeInteger(bytes)) {
    throw new Error(`${name} must be a positive byte size such as 12G, 512M or 1073741824, got "${text}"`);
  }
  return bytes;
}

/** The process's cgroup memory limit (v2 memory.max, v1 memory.limit_in_bytes), if it has one. */
function cgroupLimit(): number | undefined {
  for (const path of ['/sys/fs/cgroup/memory.max', '/sys/fs/cgroup/memory/memory.limit_in_bytes']) {
    try {
      const v = Number(readFileSync(path, 'utf8').trim());
      // v1 writes a huge number for "no limit".
      if (Number.isSafeInteger(v) && v > 0 && v < 2 ** 60) return v;
    } catch {
      // Not this cgroup version, or no cgroup.
    }
  }
  return undefined;
}

/** The budget and where its value comes from (the smallest of the limits that apply). */
export function memoryBudget(isCpu: boolean, configured: number | undefined): { bytes: number; from: string } {
  const limits: Array<[number | undefined, string]> = [
    [isCpu ? totalmem() : undefined, 'host memory of the CPU adapter'],
    [cgroupLimit(), 'the process\'s cgroup memory limit'],
    [configured, 'MLXCEL_REQUEST_MEMORY_BUDGET'],
  ];
  const known = limits.filter((l): l is [number, string] => l[0] !== undefined);
  if (known.length === 0) return { bytes: Number.MAX_SAFE_INTEGER, from: 'no limit known' };
  const [bytes, from] = known.reduce((a, b) => (b[0] < a[0] ? b : a));
  return { bytes, from };
}

/** Thrown by Engine.generateChoices for a request whose estimate exceeds the free budget. */
export class MemoryBudgetError extends Error {
  constructor(readonly estimatedBytes: number, readonly budgetBytes: number, free: number) {
    super(`this request needs an estimated ${estimatedBytes} bytes of memory, more than the ${free} bytes free of the server's request memory budget of ${budgetBytes} bytes; lower max_tokens, n or the prompt, or retry later`);
  }
}

/** The per-request part of the sizes an estimate is made of, fixed at load. */
export interface RequestMemoryModel {
  /** KV bytes of one token over every attention layer. */
  kvBytesPerToken: number;
  /** A sequence's recurrent state over every recurrent layer (0 for a transformer). */
  stateBytes: number;
  /** Activation bytes one prefill token takes in a forward pass. */
  activationBytesPerToken: number;
  /** Tokens per forward pass (a prefill chunk's longest). */
  chunkTokens: number;
  /** A sequence's longest context. */
  contextSize: number;
}

/** The admission ledger: the budget, the weights taken off it, and the reservations of the requests in flight. */
export class RequestMemory {
  private reservedBytes = 0;

  constructor(readonly budgetBytes: number, readonly weightsBytes: number, private readonly model: RequestMemoryModel) {}

  /** A request's estimate: per choice the KV (or state) of its prompt and max_tokens, plus one prefill chunk's activations. */
  estimate(promptTokens: number, maxTokens: number, choices: number): number {
    const m = this.model;
    const tokens = Math.min(m.contextSize, promptTokens + maxTokens);
    const perChoice = tokens * m.kvBytesPerToken + m.stateBytes;
    return choices * perChoice + Math.min(promptTokens, m.chunkTokens) * m.activationBytesPerToken;
  }

  get freeBytes(): number {
    return this.budgetBytes - this.weightsBytes - this.reservedBytes;
  }

  get inUseBytes(): number {
    return this.weightsBytes + this.reservedBytes;
  }

  /** Reserves `bytes` or throws MemoryBudgetError; returns what to release. */
  reserve(bytes: number): () => void {
    if (bytes > this.freeBytes) throw new MemoryBudgetError(bytes, this.budgetBytes, this.freeBytes);
    this.reservedBytes += bytes;
    let held = true;
    return () => {
      if (held) this.reservedBytes -= bytes;
      held = false;
    };
  }
}
