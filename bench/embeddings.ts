// Embedding throughput: 256 inputs of 64 tokens ([CLS] 62 ids [SEP]) through a
// bge-small-shaped BERT encoder (hidden 384, 12 layers, 12 heads, intermediate 1536, f32,
// random weights, test/helpers/encoder-checkpoint.ts's small WordPiece vocabulary: the
// embedding gather is a sliver of the work either way), ours and llama.cpp's in one run on
// the same weights (the GGUF written by the test helper). Ours: the embedder (one request
// of all inputs, batched and packed into passes of --batch-size 512 tokens); llama.cpp:
// node-llama-cpp's embedding context, which takes one input per call, 2 threads. Each side
// warms up on the first 16 inputs (every pass of ours has the same shape), then is timed
// over the whole set; the vectors are checked to agree (cosine), so both did the same work.
//   npx tsx bench/embeddings.ts [inputs] [tokens]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { getLlama, LlamaLogLevel, type Token } from 'node-llama-cpp';
import { loadEmbedder } from '../src/engine/embedder.js';
import { openGpu } from '../src/runtime/gpu.js';
import { makeEncoderCheckpoint, SPECIAL } from '../test/helpers/encoder-checkpoint.js';
import { writeGgufFromHf } from '../test/helpers/gguf-writer.js';
import { makeRng } from '../test/helpers/random-checkpoint.js';

const INPUTS = Number(process.argv[2] ?? 256);
const TOKENS = Number(process.argv[3] ?? 64);
const THREADS = 2;
const WARMUP = 16;

const dir = mkdtempSync(join(tmpdir(), 'bench-embed-'));
try {
  const { vocabSize } = makeEncoderCheckpoint({ arch: 'bert', hidden: 384, layers: 12, heads: 12, intermediate: 1536, seed: 1, pooling: 'cls', maxPositions: 512 }, join(dir, 'bge-small'));
  const gguf = join(dir, 'bge-small.gguf');
  writeGgufFromHf(join(dir, 'bge-small'), gguf, { pooling: 'cls' });
  const rng = makeRng(7);
  const firstOrdinary = 5;
  const inputs = Array.from({ length: INPUTS }, () => [
    SPECIAL.cls, ...Array.from({ length: TOKENS - 2 }, () => firstOrdinary + Math.floor(rng.uniform() * (vocabSize - firstOrdinary))), SPECIAL.sep,
  ]);

  const gpu = await openGpu('auto');
  const embedder = await loadEmbedder({ modelDir: join(dir, 'bge-small'), gpu, batchSize: 512, timeoutMs: 3_600_000 });
  const ourInputs = inputs.map((tokens) => ({ tokens, dims: 384, normalize: -1 }));
  await embedder.embed(ourInputs.slice(0, WARMUP));
  let t0 = performance.now();
  const ours = await embedder.embed(ourInputs);
  const oursSecs = (performance.now() - t0) / 1000;
  await embedder.close();

  const llama = await getLlama({ gpu: false, build: 'never', usePrebuiltBinaries: true, logLevel: LlamaLogLevel.error, progressLogs: false });
  const model = await llama.loadModel({ modelPath: gguf, gpuLayers: 0 });
  const context = await model.createEmbeddingContext({ contextSize: 512, threads: THREADS });
  const runLlama = async (set: number[][]) => {
    const out: Float32Array[] = [];
    for (const tokens of set) out.push(Float32Array.from((await context.getEmbeddingFor(tokens as Token[])).vector));
    return out;
  };
  await runLlama(inputs.slice(0, WARMUP));
  t0 = performance.now();
  const theirs = await runLlama(inputs);
  const llamaSecs = (performance.now() - t0) / 1000;
  await context.dispose();
  await model.dispose();
  await llama.dispose();

  let worst = 1;
  for (let i = 0; i < INPUTS; i++) {
    let ab = 0, aa = 0, bb = 0;
    for (let d = 0; d < 384; d++) {
      ab += ours[i]![d]! * theirs[i]![d]!;
      aa += ours[i]![d]! ** 2;
      bb += theirs[i]![d]! ** 2;
    }
    worst = Math.min(worst, ab / Math.sqrt(aa * bb));
  }
  console.log(`adapter: ${gpu.description}`);
  console.log(`${INPUTS} inputs x ${TOKENS} tokens, bge-small shape (f32)`);
  console.log(`ours:      ${(INPUTS / oursSecs).toFixed(1)} embeddings/s (${(INPUTS * TOKENS / oursSecs).toFixed(0)} tok/s, ${oursSecs.toFixed(2)} s)`);
  console.log(`llama.cpp: ${(INPUTS / llamaSecs).toFixed(1)} embeddings/s (${(INPUTS * TOKENS / llamaSecs).toFixed(0)} tok/s, ${llamaSecs.toFixed(2)} s, ${THREADS} threads)`);
  console.log(`ratio:     ${(llamaSecs / oursSecs).toFixed(3)}x; worst cosine between the two: ${worst.toFixed(6)}`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
