// Real-time factor of speech to text (seconds of compute per second of audio) on a
// random-weight Whisper checkpoint of a published shape, through the transcriber as the
// server runs it (mel front end, encoder and greedy decoding with timestamps off, window by
// window). Random weights decode random tokens, so each 30 s window decodes its full sample
// length (224 tokens) unless the end token comes first: an upper bound on a real model's
// decoding work.
//   npx tsx bench/whisper-rtf.ts [base|large-v3-turbo] [seconds ...]
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadTranscriber } from '../src/engine/transcriber.js';
import { testSignal } from '../test/helpers/audio-fixtures.js';
import { makeWhisperCheckpoint, type WhisperShape } from '../test/helpers/whisper-checkpoint.js';

const SHAPES: Record<string, WhisperShape> = {
  base: { dModel: 512, encoderLayers: 6, decoderLayers: 6, heads: 8, ffn: 2048, melBins: 80, targetPositions: 448, textVocab: 50257 },
  'large-v3-turbo': { dModel: 1280, encoderLayers: 32, decoderLayers: 4, heads: 20, ffn: 5120, melBins: 128, targetPositions: 448, textVocab: 50257 },
};

const [name = 'base', ...lengths] = process.argv.slice(2);
const shape = SHAPES[name];
if (!shape) throw new Error(`shape ${name}: one of ${Object.keys(SHAPES).join(', ')}`);
const dir = mkdtempSync(join(tmpdir(), `whisper-${name}-`));
try {
  makeWhisperCheckpoint(dir, 1, shape);
  const loadStart = performance.now();
  const transcriber = await loadTranscriber({ modelDir: dir, maxQueue: 1, timeoutMs: 24 * 3600_000, log: (line) => console.log(line) });
  console.log(`loaded in ${((performance.now() - loadStart) / 1000).toFixed(1)} s; ${cpus().length} cores, load average ${loadavg()[0]!.toFixed(2)}`);
  for (const seconds of (lengths.length > 0 ? lengths : ['30']).map(Number)) {
    const audio = testSignal(seconds);
    const start = performance.now();
    const t = await transcriber.transcribe({ audio, task: 'transcribe', language: 'en', temperatures: [0], timestamps: false });
    const elapsed = (performance.now() - start) / 1000;
    const tokens = t.segments.reduce((n, s) => n + s.tokens.length, 0);
    console.log(`${name} ${seconds} s of audio: ${elapsed.toFixed(1)} s, real-time factor ${(elapsed / seconds).toFixed(3)} (${t.segments.length} windows, ${tokens} tokens; load average ${loadavg()[0]!.toFixed(2)})`);
  }
  await transcriber.close();
} finally {
  rmSync(dir, { recursive: true, force: true });
}
