// Image input on a Qwen2.5-VL-3B-shaped checkpoint (random weights: bench/bench-model.ts's
// 4-bit language model, and Qwen2.5-VL-3B's vision tower in bf16: 32 blocks of width 1280, 16
// heads, SwiGLU 3420, windows of 112 pixels, full attention in blocks 7, 15, 23 and 31, the
// merger into 2048): for each image size, the encode time (preprocessing, the tower and the
// merger, through the engine's encoder, its pipelines run once before) and the time to first
// token of a chat turn with that image through the server (a picture not seen before, so it is
// encoded; streamed, max_tokens 1, until the chunk carrying the token's logprobs). No llama.cpp
// counterpart: node-llama-cpp runs no vision tower (mtmd is not in its bindings), so these are
// ours alone.
//   npx tsx bench/vision.ts [WIDTHxHEIGHT ...]        (default 896x896 1280x720)
// Settings (environment): BENCH_LAYERS (the language model's layers, default 36) and
// BENCH_VISION_DEPTH (the tower's blocks, default 32; full attention in every eighth from the
// eighth, or in the last where there are fewer than eight): fewer run the model's per-layer
// shapes in less time and disk (the full model's checkpoint is about 3 GB); BENCH_MODEL_DIR
// (default /tmp/mlxcel-bench/qwen2.5-vl-3b-<layers>l-<depth>v, written on first use, delete
// it after); BENCH_BACKEND (auto).
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import sharp from 'sharp';
import { loadEngine } from '../src/engine/load.js';
import { f32ToBf16 } from '../src/models/half.js';
import { readSafetensorsHeader, writeSafetensors, type SafetensorsWriteTensor } from '../src/models/safetensors.js';
import { startServer } from '../src/server/server.js';
import { makeRng } from '../test/helpers/random-checkpoint.js';
import { QWEN25_VL_3B, writeBenchModel } from './bench-model.js';

const layers = Number(process.env.BENCH_LAYERS ?? QWEN25_VL_3B.layers);
const depth = Number(process.env.BENCH_VISION_DEPTH ?? 32);
const fullAttention = Array.from({ length: depth }, (_, i) => i).filter((i) => i % 8 === 7);
const VISION = {
  depth, hidden_size: 1280, hidden_act: 'silu', intermediate_size: 3420, num_heads: 16, in_chans: 3, out_hidden_size: 2048, patch_size: 14,
  spatial_merge_size: 2, spatial_patch_size: 14, temporal_patch_size: 2, window_size: 112, fullatt_block_indexes: fullAttention.length > 0 ? fullAttention : [depth - 1], tokens_per_second: 2,
};

/** The tower beside the language model: its bf16 tensors in visual.safetensors, both files in the index, the configs. */
function writeVisionTower(dir: string): void {
  if (existsSync(join(dir, 'preprocessor_config.json'))) return;
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

function picture(width: number, height: number, seed: number) {
  const rng = makeRng(seed);
  return { width, height, pixels: Uint8Array.from({ length: width * height * 3 }, () => Math.floor(256 * rng.uniform())) };
}

const sizes = (process.argv.slice(2).length > 0 ? process.argv.slice(2) : ['896x896', '1280x720']).map((s) => s.split('x').map(Number) as [number, number]);
const dir = process.env.BENCH_MODEL_DIR ?? `/tmp/mlxcel-bench/qwen2.5-vl-3b-${layers}l-${depth}v`;
writeBenchModel(dir, { ...QWEN25_VL_3B, layers });
writeVisionTower(dir);
const engine = await loadEngine({ modelDir: dir, batchSize: 1280, contextSize: 4096, parallel: 1, backend: process.env.BENCH_BACKEND, log: (line) => console.log(line) });
const vision = engine.vision!;
const server = await startServer(engine, { host: '127.0.0.1', port: 0 });
console.log(`${layers} of 36 language-model layers, ${depth} of 32 vision blocks (full attention in ${VISION.fullatt_block_indexes.join(', ')}); ${cpus().length} cores, load average ${loadavg()[0]!.toFixed(2)}`);
// A small picture first runs every pipeline once (their first dispatch compiles them).
await vision.encode(picture(56, 56, 0));
let seed = 1;
for (const [width, height] of sizes) {
  const tokens = vision.tokens({ width, height });
  const start = performance.now();
  await vision.encode(picture(width, height, seed++));
  const encodeMs = performance.now() - start;
  const png = await sharp(Buffer.from(picture(width, height, seed++).pixels), { raw: { width, height, channels: 3 } }).png().toBuffer();
  const sent = performance.now();
  const res = await fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ stream: true, max_tokens: 1, temperature: 0, logprobs: true, messages: [{ role: 'user', content: [{ type: 'text', text: 'Describe the picture.' }, { type: 'image_url', image_url: { url: `data:image/png;base64,${png.toString('base64')}` } }] }] }),
  });
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
  console.log(`${width}x${height}: ${tokens} image tokens; encode ${(encodeMs / 1000).toFixed(2)} s, time to first token ${(ttftMs / 1000).toFixed(2)} s (load average ${loadavg()[0]!.toFixed(2)})`);
}
await server.close();
await engine.close();
