// Image input on a vision-language checkpoint of a real model's shape (random weights, the
// language model 4-bit from bench/bench-model.ts), BENCH_VISION_SHAPE picking it:
// - gemma3-4b (default): Gemma-3-4B as mlx-community publishes it, the SigLIP tower and
//   projector bf16: each picture resized to 896 x 896, the 27-layer tower over 4096 patches,
//   pooled and projected into 256 soft tokens;
// - qwen2.5-vl-3b: Qwen2.5-VL-3B's language model and vision tower in bf16: 32 blocks of width
//   1280, 16 heads, SwiGLU 3420, windows of 112 pixels, full attention in blocks 7, 15, 23 and
//   31, the merger into 2048; the image's tokens follow its size.
// For each image size: the encode time (preprocessing, the tower and the projection, through
// the engine's encoder, its pipelines run once before on a small picture) and the time to
// first token of a chat turn with that image through the live server (a picture not seen
// before, so it is encoded; cache_prompt off; streamed, max_tokens 1, until the chunk carrying
// the token's logprobs). No llama.cpp counterpart: node-llama-cpp runs no vision tower (mtmd
// is not in its bindings), so these are ours alone.
//   npx tsx bench/vision.ts [WIDTHxHEIGHT ...]        (default 896x896 1280x720)
// Settings (environment): BENCH_LAYERS and BENCH_VISION_LAYERS take the first layers of the
// language model (Gemma 34, Qwen 36) and of the tower (Gemma 27, Qwen 32; Qwen's full
// attention in every eighth from the eighth, or in the last where there are fewer than eight):
// fewer run the model's per-layer shapes in less time, memory and disk; BENCH_SKIP=encode
// leaves the encode timings and the warm-up out (TTFT only, the first compiling the
// pipelines); BENCH_MODEL_DIR (default /tmp/mlxcel-bench/<shape>-<layers>l-<tower layers>v,
// written on first use, delete it after); BENCH_BACKEND (auto).
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import sharp from 'sharp';
import { loadEngine } from '../src/engine/load.js';
import { f32ToBf16 } from '../src/models/half.js';
import { readSafetensorsHeader, writeSafetensors, type SafetensorsWriteTensor } from '../src/models/safetensors.js';
import { startServer } from '../src/server/server.js';
import { makeRng } from '../test/helpers/random-checkpoint.js';
import { GEMMA3_4B, QWEN25_VL_3B, writeBenchModel, writeGemma3VisionBenchModel } from './bench-model.js';

/** Qwen2.5-VL-3B's vision_config with `depth` blocks. */
function qwenVisionConfig(depth: number) {
  const fullAttention = Array.from({ length: depth }, (_, i) => i).filter((i) => i % 8 === 7);
  return {
    depth, hidden_size: 1280, hidden_act: 'silu', intermediate_size: 3420, num_heads: 16, in_chans: 3, out_hidden_size: 2048, patch_size: 14,
    spatial_merge_size: 2, spatial_patch_size: 14, temporal_patch_size: 2, window_size: 112, fullatt_block_indexes: fullAttention.length > 0 ? fullAttention : [depth - 1], tokens_per_second: 2,
  };
}

/** Qwen2.5-VL-3B: the language model, the tower beside it (its bf16 tensors in visual.safetensors, both files in the index), the configs. */
function writeQwenVisionBenchModel(dir: string, layers: number, depth: number): void {
  writeBenchModel(dir, { ...QWEN25_VL_3B, layers });
  if (existsSync(join(dir, 'preprocessor_config.json'))) return;
  const VISION = qwenVisionConfig(depth);
  const rng = makeRng(7);
  const { hidden_size: V, intermediate_size: I, out_hidden_size: out } = VISION;
  const tensor = (name: string, shape: number[], std: number, mean = 0): SafetensorsWriteTensor => {
    const n = shape.reduce((a, b) => a * b, 1);
    const values = new Float32Array(n);
    for (let i = 0; i < n; i++) values[i] = mean + std * (2 * rng.uniform() - 1);
    return { name, dtype: 'BF16', shape, data: f32ToBf16(values) };
  };
  const linear = (name: string, rows: number, cols: number) => [tensor(`${name}.weight`, [rows, cols], Math.sqrt(3 / cols)), tensor(`${name}.bias`, [rows], 0.01)];
  const tensors: SafetensorsWriteTensor[] = [tensor('visual.patch_embed.proj.weight', [V, 3, 2, 14, 14], Math.sqrt(3 / 1176))];
  for (let i = 0; i < depth; i++) {
    const b = `visual.blocks.${i}`;
    tensors.push(
      tensor(`${b}.norm1.weight`, [V], 0.1, 1), tensor(`${b}.norm2.weight`, [V], 0.1, 1),
      ...linear(`${b}.attn.qkv`, 3 * V, V), ...linear(`${b}.attn.proj`, V, V),
      ...linear(`${b}.mlp.gate_proj`, I, V), ...linear(`${b}.mlp.up_proj`, I, V), ...linear(`${b}.mlp.down_proj`, V, I),
    );
  }
  tensors.push(tensor('visual.merger.ln_q.weight', [V], 0.1, 1), ...linear('visual.merger.mlp.0', 4 * V, 4 * V), ...linear('visual.merger.mlp.2', out, 4 * V));
  writeSafetensors(join(dir, 'visual.safetensors'), tensors, { format: 'pt' });
  const weightMap: Record<string, string> = {};
  for (const file of ['model.safetensors', 'visual.safetensors']) for (const name of Object.keys(readSafetensorsHeader(join(dir, file)).tensors)) weightMap[name] = file;
  writeFileSync(join(dir, 'model.safetensors.index.json'), JSON.stringify({ metadata: {}, weight_map: weightMap }));
  const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
  writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...config, vision_config: VISION }, null, 2));
  writeFileSync(join(dir, 'preprocessor_config.json'), JSON.stringify({
    min_pixels: 3136, max_pixels: 12845056, patch_size: 14, temporal_patch_size: 2, merge_size: 2,
    image_mean: [0.48145466, 0.4578275, 0.40821073], image_std: [0.26862954, 0.26130258, 0.27577711],
    image_processor_type: 'Qwen2VLImageProcessor', processor_class: 'Qwen2_5_VLProcessor',
  }, null, 2));
}

/** The benched shapes: the language model's layers and the tower's, and how the checkpoint is written. */
const SHAPES = {
  'gemma3-4b': { lm: GEMMA3_4B, towerLayers: 27, write: (dir: string, layers: number, visionLayers: number) => void writeGemma3VisionBenchModel(dir, { layers, visionLayers }) },
  'qwen2.5-vl-3b': { lm: QWEN25_VL_3B, towerLayers: 32, write: writeQwenVisionBenchModel },
};

function picture(width: number, height: number, seed: number) {
  const rng = makeRng(seed);
  return { width, height, pixels: Uint8Array.from({ length: width * height * 3 }, () => Math.floor(256 * rng.uniform())) };
}

const shapeName = process.env.BENCH_VISION_SHAPE ?? 'gemma3-4b';
const shape = SHAPES[shapeName as keyof typeof SHAPES];
if (!shape) throw new Error(`BENCH_VISION_SHAPE: one of ${Object.keys(SHAPES).join(', ')}`);
const layers = Number(process.env.BENCH_LAYERS ?? shape.lm.layers);
const visionLayers = Number(process.env.BENCH_VISION_LAYERS ?? shape.towerLayers);
const skipEncode = process.env.BENCH_SKIP === 'encode';
const sizes = (process.argv.slice(2).length > 0 ? process.argv.slice(2) : ['896x896', '1280x720']).map((s) => s.split('x').map(Number) as [number, number]);
const dir = process.env.BENCH_MODEL_DIR ?? `/tmp/mlxcel-bench/${shapeName}-${layers}l-${visionLayers}v`;
shape.write(dir, layers, visionLayers);
const engine = await loadEngine({ modelDir: dir, batchSize: 1280, contextSize: 4096, parallel: 1, backend: process.env.BENCH_BACKEND, log: (line) => console.log(line) });
const vision = engine.vision!;
const server = await startServer(engine, { host: '127.0.0.1', port: 0 });
console.log(`${shape.lm.label}: ${layers} of ${shape.lm.layers} language-model layers, ${visionLayers} of ${shape.towerLayers} vision layers; ${cpus().length} cores, load average ${loadavg()[0]!.toFixed(2)}`);
// A small picture first runs every pipeline once (their first dispatch compiles them).
if (!skipEncode) await vision.encode(picture(56, 56, 0));
let seed = 1;
for (const [width, height] of sizes) {
  const tokens = vision.tokens({ width, height });
  let encoding = '';
  if (!skipEncode) {
    const start = performance.now();
    await vision.encode(picture(width, height, seed++));
    encoding = `encode ${((performance.now() - start) / 1000).toFixed(2)} s, `;
  }
  const png = await sharp(Buffer.from(picture(width, height, seed++).pixels), { raw: { width, height, channels: 3 } }).png().toBuffer();
  const sent = performance.now();
  const res = await fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ stream: true, max_tokens: 1, temperature: 0, logprobs: true, cache_prompt: false, messages: [{ role: 'user', content: [{ type: 'text', text: 'Describe the picture.' }, { type: 'image_url', image_url: { url: `data:image/png;base64,${png.toString('base64')}` } }] }] }),
  });
  if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const reader = res.body!.getReader();
  let text = '';
  let ttftMs = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    text += new TextDecoder().decode(value);
    // The first chunk carrying a token carries its logprobs.
    if (!ttftMs && text.includes('"logprobs":{')) ttftMs = performance.now() - sent;
  }
  console.log(`${width}x${height}: ${tokens} image tokens; ${encoding}time to first token ${(ttftMs / 1000).toFixed(2)} s (load average ${loadavg()[0]!.toFixed(2)})`);
}
await server.close();
await engine.close();
