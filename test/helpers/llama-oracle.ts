// llama.cpp (through node-llama-cpp's prebuilt CPU binaries) as a reference implementation:
// greedy continuations, per-step top-1/top-2 margins and the next-token log-probabilities.
//
// node-llama-cpp exposes no raw logits. What it does expose is the full next-token
// probability vector (sampleToken(..., probabilities=true) softmaxes every vocabulary entry
// after the sampler chain; with temperature 0 the chain is only the greedy sampler, which
// leaves the logits untouched). So we recover the logits exactly up to one additive constant,
// and return them as log-softmax values: compare your engine's logits after logSoftmax().
// The probabilities are float32: log-probs above about -87 carry ~1e-7 relative error, below
// that the probabilities are float32 subnormals and lose precision (~1e-3 at -97), and below
// about -103 they are 0 (-Infinity). Compare with maxLogProbDiff(), which skips that tail.
//
// Defaults chosen for an oracle rather than for speed:
//  * f32 K/V cache: llama.cpp's default f16 cache alone moves stories260K's logits by ~6e-3;
//    with f32 they match an f32 reference to ~1e-5;
//  * flash attention off, one thread (the default thread count busy-waits on small machines).
import { getLlama, LlamaLogLevel, type Llama, type LlamaModel, type Token } from 'node-llama-cpp';

export interface OracleOptions {
  /** Context size; default prompt + steps rounded up to a multiple of 256. */
  contextSize?: number;
  /** Default 1. */
  threads?: number;
  /** Use llama.cpp's default f16 K/V cache instead of f32. */
  f16KvCache?: boolean;
  /** Also return the top-1/top-2 log-probability gap (= logit gap) of every step. Costs a probability vector per step. */
  margins?: boolean;
}

export interface OracleResult {
  /** The `steps` greedily generated ids (EOS/EOG tokens included; generation does not stop). */
  tokens: number[];
  /** log-softmax of the logits at the last prompt position (full vocabulary). */
  firstLogProbs: Float32Array;
  /** Per generated token: logit(top1) - logit(top2). Only with `margins`. */
  margins?: number[];
}

let llamaPromise: Promise<Llama> | undefined;
const models = new Map<string, Promise<LlamaModel>>();

function llama(): Promise<Llama> {
  llamaPromise ??= getLlama({ gpu: false, build: 'never', usePrebuiltBinaries: true, logLevel: LlamaLogLevel.error, progressLogs: false });
  return llamaPromise;
}

async function loadModel(path: string): Promise<LlamaModel> {
  let m = models.get(path);
  if (!m) {
    m = llama().then((l) => l.loadModel({ modelPath: path, gpuLayers: 0 }));
    models.set(path, m);
  }
  return m;
}

export async function oracleGreedy(ggufPath: string, promptTokens: number[], steps: number, opts: OracleOptions = {}): Promise<OracleResult> {
  if (promptTokens.length === 0 || steps < 1) throw new Error('oracleGreedy: needs a prompt and at least one step');
  const model = await loadModel(ggufPath);
  const kvType = opts.f16KvCache ? 'F16' : 'F32';
  const context = await model.createContext({
    contextSize: opts.contextSize ?? Math.ceil((promptTokens.length + steps) / 256) * 256,
    threads: opts.threads ?? 1,
    flashAttention: false,
    experimentalKvCacheKeyType: kvType,
    experimentalKvCacheValueType: kvType,
  });
  try {
    const sequence = context.getSequence();
    const tokens: number[] = [];
    const margins: number[] = [];
    let firstLogProbs: Float32Array | undefined;
    let input: number[] = promptTokens;
    for (let step = 0; step < steps; step++) {
      const wantProbs = step === 0 || opts.margins === true;
      const last = input.length - 1;
      const items = input.map((t, i) =>
        i === last
          ? ([t as Token, { generateNext: { token: true, probabilities: wantProbs, options: { temperature: 0 } } }] as const)
          : (t as Token));
      const out = await sequence.controlledEvaluate(items as Parameters<typeof sequence.controlledEvaluate>[0]);
      const next = out[last]?.next;
      if (next?.token == null) throw new Error(`llama.cpp produced no token at step ${step}`);
      tokens.push(next.token);
      if (wantProbs) {
        const probs = next.probabilities!;
        if (step === 0) firstLogProbs = logProbsFrom(probs);
        if (opts.margins) margins.push(topGap(probs));
      }
      input = [next.token];
    }
    return { tokens, firstLogProbs: firstLogProbs!, ...(opts.margins ? { margins } : {}) };
  } finally {
    await context.dispose();
  }
}

/** The map holds every vocabulary entry (nothing in a greedy chain truncates it). */
function logProbsFrom(probs: Map<Token, number>): Float32Array {
  const out = new Float32Array(probs.size).fill(-Infinity);
  for (const [t, p] of probs) out[t] = Math.log(p);
  return out;
}

/** The map is sorted by probability, highest first. */
function topGap(probs: Map<Token, number>): number {
  const it = probs.values();
  const p1 = it.next().value as number;
  const p2 = it.next().value as number;
  return Math.log(p1) - Math.log(p2);
}

export interface OracleEmbedding {
  /** The tokens llama.cpp evaluated: the input with the BOS/EOS (or CLS/SEP) its vocabulary adds. */
  tokens: number[];
  /** The pooled embedding (by the GGUF's pooling_type), not normalised. */
  vector: Float32Array;
}

/** Embeddings by llama.cpp's embedding context (createEmbeddingContext), one per input. */
export async function oracleEmbeddings(ggufPath: string, inputs: number[][], opts: { contextSize?: number; threads?: number } = {}): Promise<OracleEmbedding[]> {
  const model = await loadModel(ggufPath);
  const context = await model.createEmbeddingContext({ contextSize: opts.contextSize ?? 256, threads: opts.threads ?? 1 });
  // getEmbeddingFor adds the tokens the vocabulary wants (its _prepareInput): reported back
  // so the engine under test evaluates the same sequence.
  const prepare = (context as unknown as { _prepareInput(tokens: Token[]): void })._prepareInput.bind(context);
  try {
    const out: OracleEmbedding[] = [];
    for (const input of inputs) {
      const tokens = input.slice() as Token[];
      prepare(tokens);
      const e = await context.getEmbeddingFor(input as Token[]);
      out.push({ tokens: tokens.map(Number), vector: Float32Array.from(e.vector) });
    }
    return out;
  } finally {
    await context.dispose();
  }
}

/**
 * Relevance scores by llama.cpp's ranking context (createRankingContext): sigmoid of the
 * classifier's logit, for the query and each document given as token ids (llama.cpp joins
 * them: BOS query EOS SEP document EOS, leaving out the ids its vocabulary lacks).
 */
export async function oracleRank(ggufPath: string, query: number[], documents: number[][], opts: { contextSize?: number; threads?: number } = {}): Promise<number[]> {
  const model = await loadModel(ggufPath);
  const context = await model.createRankingContext({ contextSize: opts.contextSize ?? 256, threads: opts.threads ?? 1 });
  try {
    return await context.rankAll(query as Token[], documents as Token[][]);
  } finally {
    await context.dispose();
  }
}

/** Tokenizes with llama.cpp's tokenizer (no BOS added; special tokens parsed when asked). */
export async function oracleTokenize(ggufPath: string, text: string, specialTokens = false): Promise<number[]> {
  const model = await loadModel(ggufPath);
  return model.tokenize(text, specialTokens).map(Number);
}

/** Frees the models and the llama.cpp backend (call from afterAll). */
export async function disposeOracle(): Promise<void> {
  for (const m of models.values()) await (await m).dispose();
  models.clear();
  if (llamaPromise) await (await llamaPromise).dispose();
  llamaPromise = undefined;
}

/** log-softmax in float64, to compare an engine's logits with firstLogProbs. */
export function logSoftmax(logits: ArrayLike<number>): Float64Array {
  let max = -Infinity;
  for (let i = 0; i < logits.length; i++) max = Math.max(max, logits[i]!);
  let sum = 0;
  for (let i = 0; i < logits.length; i++) sum += Math.exp(logits[i]! - max);
  const lse = max + Math.log(sum);
  const out = new Float64Array(logits.length);
  for (let i = 0; i < logits.length; i++) out[i] = logits[i]! - lse;
  return out;
}

/**
 * max |logSoftmax(logits) - oracleLogProbs| over the tokens whose oracle log-prob is at least
 * `floor` (default -80: float32 probabilities below ~e^-87 are subnormal and imprecise).
 */
export function maxLogProbDiff(logits: ArrayLike<number>, oracleLogProbs: Float32Array, floor = -80): number {
  if (logits.length !== oracleLogProbs.length) throw new Error(`vocab sizes differ: ${logits.length} vs ${oracleLogProbs.length}`);
  const lp = logSoftmax(logits);
  let max = 0;
  for (let i = 0; i < lp.length; i++) if (oracleLogProbs[i]! >= floor) max = Math.max(max, Math.abs(lp[i]! - oracleLogProbs[i]!));
  return max;
}

/** The largest difference between the log-probs two sets of logits give (both ours, or ours and a CPU reference's). */
export function maxLogitsLogProbDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  const la = logSoftmax(a);
  const lb = logSoftmax(b);
  let max = 0;
  for (let i = 0; i < la.length; i++) max = Math.max(max, Math.abs(la[i]! - lb[i]!));
  return max;
}
