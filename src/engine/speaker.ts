// Text to speech with a Kokoro checkpoint, on its own worker: requests queue (bounded,
// answered in order). A request's text is cut into sentences, each turned into phonemes by
// the English front end (./g2p: British for a voice whose name starts with "b", American
// otherwise) and into the model's input ids (characters outside its vocabulary dropped); a
// sentence past the model's phoneme ceiling is cut again at its last clause mark (, ; : — …)
// that fits, else at its last word boundary, else hard. Each piece is synthesised with the
// voice pack's style row for its length, and handed on as it is done (streaming).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { loadKokoro, type KokoroModel } from '../models/kokoro.js';
import { TextTokenizer } from '../models/tokenizer.js';
import { openGpu, type Backend, type Gpu } from '../runtime/gpu.js';
import { phonemize, sentences, type Dialect } from './g2p/english.js';
import { JobQueue, type AudioWorkerOptions, type Job } from './job-queue.js';
import { NO_MEMORY, type EngineMemory } from './types.js';

export interface SpeakerInfo {
  id: string;
  path: string;
  architecture: 'kokoro';
  /** Input ids (the phoneme alphabet's size). */
  vocabSize: number;
  /** The most phonemes one piece may have. */
  contextSize: number;
  sampleRate: number;
  /** The voice packs under voices/, by name. */
  voices: readonly string[];
}

/** One piece of the input, synthesised in one pass. */
export interface SpeechPiece {
  text: string;
  phonemes: string;
  ids: number[];
}

export interface SpeakRequest {
  pieces: SpeechPiece[];
  voice: string;
  /** 0.25 .. 4: durations are divided by it. */
  speed: number;
  /** Seeds the harmonic source's noise: the same request gives the same samples. */
  seed: number;
  /** Hears each piece's audio as it is done (streaming). */
  onAudio?: (audio: Float32Array) => void;
  /** Aborted when the client has gone: the request stops before its next piece. */
  signal?: AbortSignal;
}

export interface Speech {
  audio: Float32Array;
  /** Each piece's predicted frames per input id. */
  durations: Int32Array[];
}

/** Rejected when a request did not finish within the speaker's timeout. */
export class SpeakTimeoutError extends Error {
  constructor(readonly ms: number) {
    super(`the speech request timed out after ${ms / 1000} s`);
  }
}


/** Clause marks a long sentence is cut after, and word boundaries after them. */
const CLAUSE = /[,;:—…]/;
/** The model's refusal of a call whose audio passes model.maxFrames. */
const TOO_LONG = /synthesise shorter pieces/;

export async function loadSpeaker(options: AudioWorkerOptions): Promise<Speaker> {
  const dir = resolve(options.modelDir);
  const gpu = options.gpu ?? (await openGpu((options.backend ?? 'auto') as Backend, { quietDawn: options.quietDawn }));
  if (!options.gpu) options.log?.(`adapter ${gpu.description}`);
  const model = await loadKokoro(dir, gpu);
  let maxId = -1;
  for (const id of model.vocab.values()) maxId = Math.max(maxId, id);
  const info: SpeakerInfo = {
    id: options.alias ?? basename(dir), path: dir, architecture: 'kokoro', vocabSize: maxId + 1, contextSize: model.maxPhonemes,
    sampleRate: model.sampleRate, voices: [...model.voiceNames].sort(),
  };
  options.log?.(`text-to-speech model ${info.id} (kokoro, ${info.voices.length} voice${info.voices.length === 1 ? '' : 's'}, ${info.sampleRate} Hz, up to ${info.contextSize} phonemes a piece) from ${dir}`);
  return new Speaker(info, model, options, gpu, options.gpu ? () => {} : () => gpu.device.destroy());
}

export class Speaker {
  private readonly jobs: JobQueue<SpeakRequest, Speech>;
  private readonly packs = new Map<string, Promise<Float32Array>>();
  private phonemeTokenizer?: { tokenizer: TextTokenizer; dir: string };

  constructor(
    readonly info: SpeakerInfo,
    private readonly model: KokoroModel,
    limits: { maxQueue: number; timeoutMs: number },
    private readonly gpu: Gpu,
    private readonly release: () => void,
  ) {
    // One request runs while maxQueue more wait.
    this.jobs = new JobQueue({ capacity: limits.maxQueue + 1, timeoutMs: limits.timeoutMs, timeoutError: (ms) => new SpeakTimeoutError(ms), drain: () => this.next() });
  }

  /** The adapter, e.g. "llvmpipe (LLVM 15, 256 bits) via opengles". */
  get adapterDescription(): string {
    return this.gpu.description;
  }

  /**
   * The model's input alphabet as a tokenizer (one id per phoneme character): what /tokenize
   * answers with on an audio-only text-to-speech server, whose engine asks for it at start.
   * Its tokenizer.json is written to a temporary directory, removed on close.
   */
  get tokenizer(): TextTokenizer {
    if (!this.phonemeTokenizer) {
      const dir = mkdtempSync(join(tmpdir(), 'kokoro-phonemes-'));
      const file = join(dir, 'tokenizer.json');
      writeFileSync(file, JSON.stringify({
        version: '1.0', added_tokens: [], normalizer: null, post_processor: null, decoder: { type: 'Fuse' },
        pre_tokenizer: { type: 'Split', pattern: { Regex: '.' }, behavior: 'Isolated', invert: false },
        model: { type: 'WordLevel', vocab: Object.fromEntries(this.model.vocab), unk_token: '' },
      }));
      this.phonemeTokenizer = { tokenizer: TextTokenizer.fromFile(file), dir };
    }
    return this.phonemeTokenizer.tokenizer;
  }

  /** Requests waiting or running. */
  get pending(): number {
    return this.jobs.pending;
  }

  /** The device's GPU memory, all of it counted as other (the model's buffers). */
  memory(): EngineMemory {
    return { ...NO_MEMORY, other: this.gpu.memory.bytes() };
  }

  /** The input cut into pieces of at most info.contextSize ids, in the voice's dialect; none for text with nothing to say. */
  pieces(input: string, voice: string): SpeechPiece[] {
    const dialect: Dialect = voice.startsWith('b') ? 'gb' : 'us';
    const out: SpeechPiece[] = [];
    for (const sentence of sentences(input)) {
      const kept = [...phonemize(sentence, dialect)].filter((c) => this.model.vocab.has(c)).join('');
      for (const phonemes of this.cut(kept)) {
        const ids = [...phonemes].map((c) => this.model.vocab.get(c)!);
        if (/[^\s;:,.!?—…"()“”]/.test(phonemes)) out.push({ text: sentence, phonemes, ids });
      }
    }
    return out;
  }

  /** Phonemes cut into runs of at most contextSize characters, at clause marks, else spaces. */
  private cut(phonemes: string): string[] {
    const max = this.info.contextSize;
    const chars = [...phonemes];
    const out: string[] = [];
    let from = 0;
    while (chars.length - from > max) {
      const window = chars.slice(from, from + max);
      let end = -1;
      for (let i = window.length - 1; i > 0 && end < 0; i--) if (CLAUSE.test(window[i]!)) end = i + 1;
      if (end < 0) end = window.lastIndexOf(' ') + 1;
      if (end <= 0) end = max;
      out.push(chars.slice(from, from + end).join('').trim());
      from += end;
    }
    out.push(chars.slice(from).join('').trim());
    return out.filter((p) => p !== '');
  }

  /**
   * The request's audio. Throws QueueFullError synchronously when one request runs and
   * maxQueue more already wait; rejects with SpeakTimeoutError after the timeout. The voice
   * must be one of info.voices.
   */
  speak(request: SpeakRequest): Promise<Speech> {
    if (!this.info.voices.includes(request.voice)) throw new Error(`voice ${request.voice} is not one of this model's`);
    return this.jobs.push(request);
  }

  async close(): Promise<void> {
    await this.jobs.close();
    if (this.phonemeTokenizer) {
      await this.phonemeTokenizer.tokenizer.close();
      rmSync(this.phonemeTokenizer.dir, { recursive: true, force: true });
    }
    this.model.close();
    this.release();
  }

  private pack(voice: string): Promise<Float32Array> {
    let pack = this.packs.get(voice);
    if (!pack) {
      pack = this.model.voicePack(voice);
      this.packs.set(voice, pack);
      pack.catch(() => this.packs.delete(voice));
    }
    return pack;
  }

  /** Runs the next job, piece by piece; stops early once it is finished (timed out). */
  private async next(): Promise<void> {
    const job = this.jobs.take()!;
    try {
      this.jobs.finish(job, undefined, await this.run(job));
    } catch (e) {
      this.jobs.finish(job, e instanceof Error ? e : new Error(String(e)));
    }
  }

  private async run(job: Job<SpeakRequest, Speech>): Promise<Speech> {
    const { pieces, voice, speed, seed, onAudio, signal } = job.request;
    const pack = await this.pack(voice);
    const width = pack.length / this.info.contextSize;
    const audio: Float32Array[] = [];
    const durations: Int32Array[] = [];
    const pass = async (ids: number[]): Promise<void> => {
      if (signal?.aborted) throw new Error('the client closed the connection');
      if (!this.jobs.live(job)) throw this.jobs.timeoutError;
      const row = ids.length - 1;
      let out: { audio: Float32Array; durations: Int32Array };
      try {
        out = await this.model.synthesize(ids, pack.subarray(row * width, (row + 1) * width), speed, seed);
      } catch (e) {
        // Audio past what one call holds on this device (model.maxFrames): the piece in halves.
        if (!(e instanceof Error && TOO_LONG.test(e.message)) || ids.length < 2) throw e;
        const cut = this.middle(ids);
        await pass(ids.slice(0, cut));
        await pass(ids.slice(cut));
        return;
      }
      if (!this.jobs.live(job)) throw this.jobs.timeoutError;
      audio.push(out.audio);
      durations.push(out.durations);
      onAudio?.(out.audio);
    };
    for (const piece of pieces) await pass(piece.ids);
    const all = new Float32Array(audio.reduce((n, a) => n + a.length, 0));
    let at = 0;
    for (const a of audio) {
      all.set(a, at);
      at += a.length;
    }
    return { audio: all, durations };
  }

  /** Where to halve ids (both halves non-empty): after the word boundary nearest the middle, else the middle. */
  private middle(ids: number[]): number {
    const half = ids.length >> 1;
    const space = this.model.vocab.get(' ');
    let best: number | undefined;
    for (let i = 0; i + 2 < ids.length; i++) if (ids[i] === space && (best === undefined || Math.abs(i + 1 - half) < Math.abs(best - half))) best = i + 1;
    return best ?? half;
  }
}
