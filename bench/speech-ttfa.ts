// Time to first audio of POST /v1/audio/speech with stream_format "audio": a live server over
// a random-weight Kokoro checkpoint of Kokoro-82M's shape (test/helpers/kokoro-checkpoint.ts,
// f32), a 200-character sentence (one piece), measured from the request to the first body
// chunk and to the end, after one warm-up request (the pipelines compiled). The text front
// end's cost is reported beside it.
//   npx tsx bench/speech-ttfa.ts [runs]
import { rmSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { EmbeddingOnlyEngine, SPEECH_ONLY } from '../src/engine/embedding-only-engine.js';
import { loadSpeaker } from '../src/engine/speaker.js';
import { startServer } from '../src/server/server.js';
import { KOKORO_82M, makeKokoroCheckpoint } from '../test/helpers/kokoro-checkpoint.js';

const runs = Number(process.argv[2] ?? 3);
const SENTENCE = 'The old lighthouse keeper climbed the narrow stairs each evening, lit the great lamp, and watched the ships pass safely by the rocks while the wind sang softly across the dark and restless sea all night.';
const dir = makeKokoroCheckpoint(KOKORO_82M, { seed: 1, voices: ['af_heart'] });
try {
  const loadStart = performance.now();
  const speaker = await loadSpeaker({ modelDir: dir, maxQueue: 1, timeoutMs: 24 * 3600_000, log: (line) => console.log(line) });
  console.log(`loaded in ${((performance.now() - loadStart) / 1000).toFixed(1)} s; ${cpus().length} cores, load average ${loadavg()[0]!.toFixed(2)}`);
  const g2pStart = performance.now();
  const pieces = speaker.pieces(SENTENCE, 'af_heart');
  console.log(`${SENTENCE.length} characters -> ${pieces.length} piece(s), ${pieces.reduce((n, p) => n + p.ids.length, 0)} phonemes; text front end ${(performance.now() - g2pStart).toFixed(0)} ms (lexicon read included)`);
  const server = await startServer(new EmbeddingOnlyEngine(speaker, SPEECH_ONLY, speaker.adapterDescription), { host: '127.0.0.1', port: 0, speaker, generationDisabledBy: SPEECH_ONLY });
  const once = async () => {
    const start = performance.now();
    const res = await fetch(`${server.url}/v1/audio/speech`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'kokoro', input: SENTENCE, voice: 'af_heart', response_format: 'pcm', stream_format: 'audio' }),
    });
    const reader = res.body!.getReader();
    let first: number | undefined;
    let bytes = 0;
    for (let r = await reader.read(); !r.done; r = await reader.read()) {
      first ??= performance.now() - start;
      bytes += r.value.length;
    }
    return { first: first!, total: performance.now() - start, seconds: bytes / 2 / speaker.info.sampleRate };
  };
  const warm = await once();
  console.log(`warm-up: first audio ${warm.first.toFixed(0)} ms, done ${warm.total.toFixed(0)} ms, ${warm.seconds.toFixed(2)} s of audio`);
  for (let i = 0; i < runs; i++) {
    const r = await once();
    console.log(`run ${i + 1}: first audio ${r.first.toFixed(0)} ms, done ${r.total.toFixed(0)} ms, ${r.seconds.toFixed(2)} s of audio (load average ${loadavg()[0]!.toFixed(2)})`);
  }
  await server.close();
  await speaker.close();
} finally {
  rmSync(dir, { recursive: true, force: true });
}
