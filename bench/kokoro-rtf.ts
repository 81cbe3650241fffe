// Real-time factor of text to speech (seconds of compute per second of audio) for
// Kokoro-82M's shape with random weights (test/helpers/kokoro-checkpoint.ts, f32), on a
// fixed phoneme sequence as long as a 200-character English sentence gives (190 ids; the
// grapheme-to-phoneme front end is not part of the model), one voice, speed 1. The random
// duration projection is set to give about 3.5 frames (87 ms) per phoneme, as speech has.
// Prints the load time, a warm-up call (pipeline compiles), then the timed calls' total and
// each stage's time (stages run one by one and are waited for: KokoroGpu.profile), and the
// LSTM recurrence of the longest sequence (the shared LSTM, one step per frame) run on the
// CPU in f32 for comparison with its GPU stage. There is no llama.cpp counterpart.
//   npx tsx bench/kokoro-rtf.ts [phonemes] [runs]
import { rmSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { openGpu } from '../src/runtime/gpu.js';
import { loadKokoro, type KokoroGpu } from '../src/models/kokoro.js';
import { KOKORO_82M, makeKokoroCheckpoint } from '../test/helpers/kokoro-checkpoint.js';
import { rng } from '../test/helpers/rng.js';

const phonemeCount = Number(process.argv[2] ?? 190);
const runs = Number(process.argv[3] ?? 2);
const seconds = (ms: number) => (ms / 1000).toFixed(2);

/** One direction of an LSTM's recurrence over `frames` steps on the CPU (f32), with the input projection given. */
function cpuRecurrence(frames: number, hidden: number, rand: () => number): number {
  const w = Float32Array.from({ length: 4 * hidden * hidden }, () => (rand() - 0.5) * 0.1);
  const pre = Float32Array.from({ length: 4 * hidden }, () => rand() - 0.5);
  const h = new Float32Array(hidden);
  const c = new Float32Array(hidden);
  const g = new Float32Array(4 * hidden);
  const sigmoid = (x: number) => 1 / (1 + Math.exp(-x));
  const start = performance.now();
  for (let t = 0; t < frames; t++) {
    for (let r = 0; r < 4 * hidden; r++) {
      let s = pre[r]!;
      for (let k = 0; k < hidden; k++) s += w[r * hidden + k]! * h[k]!;
      g[r] = s;
    }
    for (let j = 0; j < hidden; j++) {
      c[j] = sigmoid(g[hidden + j]!) * c[j]! + sigmoid(g[j]!) * Math.tanh(g[2 * hidden + j]!);
      h[j] = sigmoid(g[3 * hidden + j]!) * Math.tanh(c[j]!);
    }
  }
  return performance.now() - start;
}

const madeAt = performance.now();
const dir = makeKokoroCheckpoint(KOKORO_82M, { voices: ['af_bench'] });
console.log(`random Kokoro-82M checkpoint written in ${seconds(performance.now() - madeAt)} s; ${cpus().length} cores, load average ${loadavg()[0]!.toFixed(2)}`);
try {
  const gpu = await openGpu('auto', { quietDawn: true });
  const loadStart = performance.now();
  const model = (await loadKokoro(dir, gpu)) as KokoroGpu;
  console.log(`loaded in ${seconds(performance.now() - loadStart)} s on ${gpu.description}`);
  const rand = rng(5);
  const ids = Array.from({ length: phonemeCount }, () => 1 + Math.floor(rand() * (KOKORO_82M.tokens - 1)));
  const width = 2 * KOKORO_82M.style;
  const style = (await model.voicePack('af_bench')).slice((phonemeCount - 1) * width, phonemeCount * width);
  const warmStart = performance.now();
  await model.synthesize(ids, style, 1, 1);
  console.log(`warm-up call (compiles): ${seconds(performance.now() - warmStart)} s`);
  let total = 0;
  let audioSeconds = 0;
  let frames = 0;
  for (let i = 0; i < runs; i++) {
    const start = performance.now();
    const out = await model.synthesize(ids, style, 1, 1);
    total += performance.now() - start;
    audioSeconds += out.audio.length / model.sampleRate;
    frames = out.durations.reduce((a, b) => a + b, 0);
  }
  console.log(`${phonemeCount} phonemes, ${frames} frames, ${(audioSeconds / runs).toFixed(2)} s of audio: ${seconds(total / runs)} s per call, real-time factor ${(total / 1000 / audioSeconds).toFixed(3)} (load average ${loadavg()[0]!.toFixed(2)})`);
  model.profile = new Map();
  await model.synthesize(ids, style, 1, 1);
  let staged = 0;
  for (const [stage, ms] of model.profile) {
    staged += ms;
    console.log(`  ${stage.padEnd(40)} ${seconds(ms)} s`);
  }
  console.log(`  ${'stages, each waited for'.padEnd(40)} ${seconds(staged)} s`);
  const cpu = 2 * cpuRecurrence(frames, KOKORO_82M.hidden / 2, rand);
  console.log(`shared LSTM recurrence on the CPU (f32, both directions, ${frames} steps): ${seconds(cpu)} s; on the GPU its stage (with the alignment gather and input projection): ${seconds(model.profile.get('alignment and shared LSTM')!)} s`);
  model.close();
} finally {
  rmSync(dir, { recursive: true, force: true });
}
