// Kokoro on the GPU (src/models/kokoro.ts) against an independent float64 CPU reference of
// the published architecture (helpers/kokoro-reference.ts), on a tiny random-weight
// checkpoint with the real tensor names and config block (helpers/kokoro-checkpoint.ts),
// for two voices and two speeds: the durations equal; the text encoder's and duration
// encoder's features, F0 and N, the harmonic source and its STFT, the generator's last
// convolution and the waveform within tolerance. Tolerances, as max |error| over the
// feature's largest magnitude: the GPU computes in f32 (rounding 6e-8 per operation)
// through some sixty normalisations, LSTM recurrences and convolutions, and with random
// weights each stage's error grows by a few times its predecessor's: 1e-3 leaves an order
// of magnitude over the ~5e-5 seen, while a wrong tap, stride, gate order or norm axis
// moves a feature by its own size. The source's phase runs to hundreds of turns, where
// f32 keeps ~1e-5 of a turn (~2e-4 of the source seen). An STFT phase is the error of its
// bin over the bin's magnitude: bins under a thousandth of the largest have phases of
// rounding noise in any float implementation, and a phase at +-pi falls on either side of
// the cut by rounding, so the reference takes those from the GPU (KokoroReference.forward's
// phaseOf); the weakest phases compared carry ~3e-3: their tolerance is 1e-2. The same
// inputs and seed give byte-identical audio; the same weights in mlx-audio's layout and in
// torch.save files (.pth, .pt) give the same audio.
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openGpu } from '../src/runtime/gpu.js';
import { isKokoroCheckpoint, kokoroConfig, loadKokoro, KokoroGpu, type KokoroTrace } from '../src/models/kokoro.js';
import { makeKokoroCheckpoint, TINY_KOKORO } from './helpers/kokoro-checkpoint.js';
import { KokoroReference } from './helpers/kokoro-reference.js';
import { TEST_BACKEND } from './helpers/model-harness.js';

const TOLERANCE = 1e-3;
const PHASE_TOLERANCE = 1e-2;

/** max |a - b| over max |b|. */
function relativeError(a: ArrayLike<number>, b: ArrayLike<number>): number {
  expect(a.length).toBe(b.length);
  let err = 0;
  let scale = 0;
  for (let i = 0; i < b.length; i++) {
    err = Math.max(err, Math.abs(a[i]! - b[i]!));
    scale = Math.max(scale, Math.abs(b[i]!));
  }
  return err / scale;
}

describe('kokoro', () => {
  let dir: string;
  let model: KokoroGpu;
  let reference: KokoroReference;

  beforeAll(async () => {
    dir = makeKokoroCheckpoint(TINY_KOKORO, { voices: ['af_test', 'bm_test'] });
    model = (await loadKokoro(dir, await openGpu(TEST_BACKEND))) as KokoroGpu;
    reference = new KokoroReference(model.cfg, join(dir, 'kokoro-v1_0.safetensors'));
  });
  afterAll(() => {
    model?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('reads the interface from the checkpoint', () => {
    expect(isKokoroCheckpoint(dir)).toBe(true);
    expect(model.sampleRate).toBe(24000);
    expect(model.maxPhonemes).toBe(TINY_KOKORO.bert.positions - 2);
    expect(model.voiceNames).toEqual(['af_test', 'bm_test']);
    expect(model.vocab.get('a')).toBeGreaterThan(0);
  });

  const phonemes = [3, 9, 14, 7, 21, 2, 16, 11, 5];
  for (const voice of ['af_test', 'bm_test']) {
    for (const speed of [1, 1.6]) {
      it(`matches the float64 reference: ${voice} at speed ${speed}`, async () => {
        const pack = await model.voicePack(voice);
        const width = 2 * TINY_KOKORO.style;
        const style = pack.slice((phonemes.length - 1) * width, phonemes.length * width);
        model.trace = {} as KokoroTrace;
        const gpu = await model.synthesize(phonemes, style, speed, 7);
        const trace = model.trace;
        const ref = reference.forward(phonemes, style, speed, 7, trace.har);
        expect([...gpu.durations]).toEqual(ref.durations);
        const frames = ref.durations.reduce((a, b) => a + b, 0);
        expect(gpu.audio.length).toBe(frames * model.samplesPerFrame);
        const errors = {
          textEncoder: relativeError(trace.textEncoder, ref.textEncoder),
          durationEncoder: relativeError(trace.durationEncoder, ref.durationEncoder),
          f0: relativeError(trace.f0, ref.f0),
          n: relativeError(trace.n, ref.n),
          source: relativeError(trace.source, ref.source),
          har: relativeError(trace.har, ref.har),
          spectrum: relativeError(trace.spectrum, ref.spectrum),
          audio: relativeError(gpu.audio, ref.audio),
        };
        for (const [name, e] of Object.entries(errors)) expect(e, name).toBeLessThan(name === 'har' ? PHASE_TOLERANCE : TOLERANCE);
      });
    }
  }

  it('gives byte-identical audio for the same inputs and seed, other audio for another seed', async () => {
    const style = (await model.voicePack('af_test')).slice(0, 2 * TINY_KOKORO.style);
    const a = await model.synthesize([4, 8, 15], style, 1, 123);
    const b = await model.synthesize([4, 8, 15], style, 1, 123);
    const c = await model.synthesize([4, 8, 15], style, 1, 124);
    expect(Buffer.from(a.audio.buffer).equals(Buffer.from(b.audio.buffer))).toBe(true);
    expect(Buffer.from(a.audio.buffer).equals(Buffer.from(c.audio.buffer))).toBe(false);
  });

  for (const format of ['mlx', 'pth'] as const) {
    it(`reads the same weights ${format === 'mlx' ? "in mlx-audio's layout (LSTM names, [out, taps, in] convolutions)" : 'from torch.save files (kokoro-v1_0.pth, voices/*.pt)'} to the same audio`, async () => {
      const other = makeKokoroCheckpoint(TINY_KOKORO, { voices: ['af_test'], format });
      const loaded = await loadKokoro(other, model['ops'].gpu);
      try {
        const style = (await model.voicePack('af_test')).slice(0, 2 * TINY_KOKORO.style);
        expect(await loaded.voicePack('af_test')).toEqual(await model.voicePack('af_test'));
        const [a, b] = [await model.synthesize([6, 2, 19], style, 1, 5), await loaded.synthesize([6, 2, 19], style, 1, 5)];
        expect([...b.durations]).toEqual([...a.durations]);
        expect(relativeError(b.audio, a.audio)).toBeLessThan(1e-5);
      } finally {
        loaded.close();
        rmSync(other, { recursive: true, force: true });
      }
    });
  }

  it('refuses bad input and unsupported checkpoints, naming the problem', async () => {
    const style = (await model.voicePack('af_test')).slice(0, 2 * TINY_KOKORO.style);
    await expect(model.synthesize([], style, 1, 0)).rejects.toThrow(/phonemes/);
    await expect(model.synthesize([TINY_KOKORO.tokens], style, 1, 0)).rejects.toThrow(/phoneme id/);
    await expect(model.synthesize([1], style.slice(1), 1, 0)).rejects.toThrow(/style vector/);
    await expect(model.voicePack('nobody')).rejects.toThrow(/af_test, bm_test/);
    const json = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, Record<string, unknown>>;
    expect(() => kokoroConfig({ ...json, istftnet: { ...json.istftnet, gen_istft_window: 'hamming' } })).toThrow(/istftnet\.gen_istft_window is not supported/);
    expect(() => kokoroConfig({ ...json, plbert: { ...json.plbert, hidden_act: 'relu' } })).toThrow(/plbert\.hidden_act/);
  });
});
