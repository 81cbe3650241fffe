// Image input on a Gemma-3-4B-shaped checkpoint (bench/bench-model.ts: random weights, the
// language model 4-bit, the SigLIP tower and projector bf16, as mlx-community publishes it):
// - image encode: engine.vision.encode of one picture (resize to 896 x 896, normalise, the
//   27-layer tower over 4096 patches, pooling and projection into 256 soft tokens); the
//   first call also compiles the tower's pipelines and is reported as cold;
// - time to first token: a chat completion with the picture as a data URI through the live
//   server (decode, encode, the prefill of the ~270-token prompt, one token), max_tokens 1,
//   cache_prompt off, each picture new (no encode or prompt cache hit).
// Each size is a fresh random picture. llama.cpp is not compared: node-llama-cpp has no
// vision tower (its multimodal projector path is not exposed by the binding).
// BENCH_LAYERS and BENCH_VISION_LAYERS take the first layers of the language model's 34 and
// the tower's 27 (every layer of each has the same shape) where the whole model does not fit
// the machine; BENCH_SKIP=encode leaves the encode timings out (TTFT only); BENCH_MODEL_DIR
// keeps the checkpoint there.
//   npx tsx bench/vision.ts [sizes, e.g. 896x896 1280x720]
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import sharp from 'sharp';
import { loadEngine } from '../src/engine/load.js';
import { startServer } from '../src/server/server.js';
import { makeRng } from '../test/helpers/random-checkpoint.js';
import { writeGemma3VisionBenchModel } from './bench-model.js';

const sizes = (process.argv.length > 2 ? process.argv.slice(2) : ['896x896', '1280x720']).map((s) => s.split('x').map(Number) as [number, number]);
const keep = process.env.BENCH_MODEL_DIR;
const dir = keep ?? mkdtempSync(join(tmpdir(), 'bench-gemma3-4b-'));
const rng = makeRng(11);
const picture = (width: number, height: number) => ({ width, height, pixels: Uint8Array.from({ length: width * height * 3 }, () => Math.floor(rng.uniform() * 256)) });
const load = () => `load average ${loadavg()[0]!.toFixed(1)}`;

try {
  let t0 = performance.now();
  const count = (name: string) => (process.env[name] ? Number(process.env[name]) : undefined);
  writeGemma3VisionBenchModel(dir, { layers: count('BENCH_LAYERS'), visionLayers: count('BENCH_VISION_LAYERS') });
  console.log(`checkpoint written in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  t0 = performance.now();
  const engine = await loadEngine({ modelDir: dir, parallel: 1, contextSize: 1024, backend: process.env.BENCH_BACKEND });
  console.log(`engine loaded in ${((performance.now() - t0) / 1000).toFixed(1)} s (${load()})`);
  const vision = engine.vision!;

  for (const [i, [width, height]] of (process.env.BENCH_SKIP === 'encode' ? [] : sizes).entries()) {
    t0 = performance.now();
    await vision.encode(picture(width, height));
    console.log(`encode ${width}x${height}${i === 0 ? ' (cold: pipelines compiled)' : ''}: ${((performance.now() - t0) / 1000).toFixed(2)} s (${load()})`);
  }

  const server = await startServer(engine, { host: '127.0.0.1', port: 0 });
  try {
    for (const [width, height] of sizes) {
      const { pixels } = picture(width, height);
      const png = await sharp(Buffer.from(pixels), { raw: { width, height, channels: 3 } }).png().toBuffer();
      const body = {
        model: 'gemma3', max_tokens: 1, temperature: 0, cache_prompt: false,
        messages: [{ role: 'user', content: [{ type: 'text', text: 'Describe the picture.' }, { type: 'image_url', image_url: { url: `data:image/png;base64,${png.toString('base64')}` } }] }],
      };
      t0 = performance.now();
      const res = await fetch(`${server.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
      const answer = (await res.json()) as { usage?: { prompt_tokens: number } };
      if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${JSON.stringify(answer)}`);
      console.log(`TTFT ${width}x${height} (${answer.usage!.prompt_tokens} prompt tokens): ${((performance.now() - t0) / 1000).toFixed(2)} s (${load()})`);
    }
  } finally {
    await server.close();
  }
  await engine.close();
} finally {
  if (!keep) rmSync(dir, { recursive: true, force: true });
}
