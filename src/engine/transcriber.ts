// Speech to text with a Whisper checkpoint, on its own worker: requests queue (bounded,
// answered in order), each runs window by window over its audio. A window's prompt is
// [<|startofprev|> previous text] <|startoftranscript|> <|lang|> <|task|> [<|notimestamps|>]
// with ids from generation_config.json; the language, when not given, is the likeliest
// language token after <|startoftranscript|> in the first window. Decoding is greedy (or
// sampled at a temperature) under openai-whisper's logit rules: no blank or end at the
// start, no special tokens but the end and timestamps, and with timestamps their pairing,
// order and first-timestamp limit. Given several temperatures, a window whose text
// compresses too well (repetition) or whose mean log-probability is too low is decoded
// again at the next one. With timestamps the next window starts at the last complete
// segment's end, as openai-whisper seeks; without, 30 s later.
import { readFileSync, existsSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { deflateSync } from 'node:zlib';
import { openGpu, type Backend } from '../runtime/gpu.js';
import { HOP, LogMel, SAMPLE_RATE } from '../models/mel.js';
import { TextTokenizer } from '../models/tokenizer.js';
import { whisperConfig, WhisperModel, WINDOW_FRAMES } from '../models/whisper.js';
import { JobQueue, type AudioWorkerOptions, type Job as QueuedJob } from './job-queue.js';
import { NO_MEMORY, type EngineMemory } from './types.js';

type Job = QueuedJob<TranscribeRequest, Transcript>;

/** openai-whisper's language codes and names, in its token order. */
export const WHISPER_LANGUAGES: Readonly<Record<string, string>> = {
  en: 'english', zh: 'chinese', de: 'german', es: 'spanish', ru: 'russian', ko: 'korean', fr: 'french', ja: 'japanese', pt: 'portuguese', tr: 'turkish', pl: 'polish', ca: 'catalan', nl: 'dutch', ar: 'arabic', sv: 'swedish', it: 'italian', id: 'indonesian', hi: 'hindi', fi: 'finnish', vi: 'vietnamese', he: 'hebrew', uk: 'ukrainian', el: 'greek', ms: 'malay', cs: 'czech', ro: 'romanian', da: 'danish', hu: 'hungarian', ta: 'tamil', no: 'norwegian', th: 'thai', ur: 'urdu', hr: 'croatian', bg: 'bulgarian', lt: 'lithuanian', la: 'latin', mi: 'maori', ml: 'malayalam', cy: 'welsh', sk: 'slovak', te: 'telugu', fa: 'persian', lv: 'latvian', bn: 'bengali', sr: 'serbian', az: 'azerbaijani', sl: 'slovenian', kn: 'kannada', et: 'estonian', mk: 'macedonian', br: 'breton', eu: 'basque', is: 'icelandic', hy: 'armenian', ne: 'nepali', mn: 'mongolian', bs: 'bosnian', kk: 'kazakh', sq: 'albanian', sw: 'swahili', gl: 'galician', mr: 'marathi', pa: 'punjabi', si: 'sinhala', km: 'khmer', sn: 'shona', yo: 'yoruba', so: 'somali', af: 'afrikaans', oc: 'occitan', ka: 'georgian', be: 'belarusian', tg: 'tajik', sd: 'sindhi', gu: 'gujarati', am: 'amharic', yi: 'yiddish', lo: 'lao', uz: 'uzbek', fo: 'faroese', ht: 'haitian creole', ps: 'pashto', tk: 'turkmen', nn: 'nynorsk', mt: 'maltese', sa: 'sanskrit', lb: 'luxembourgish', my: 'myanmar', bo: 'tibetan', tl: 'tagalog', mg: 'malagasy', as: 'assamese', tt: 'tatar', haw: 'hawaiian', ln: 'lingala', ha: 'hausa', ba: 'bashkir', jw: 'javanese', su: 'sundanese', yue: 'cantonese',
};

/** Seconds per timestamp token. */
const TIME_PRECISION = 0.02;
/** openai-whisper's thresholds for the temperature fallback. */
const COMPRESSION_RATIO_THRESHOLD = 2.4;
const LOGPROB_THRESHOLD = -1;
/** The first timestamp may be at most 1 s (openai-whisper's max_initial_timestamp). */
const MAX_INITIAL_TIMESTAMP_INDEX = 50;

export interface TranscriberInfo {
  id: string;
  path: string;
  architecture: string;
  vocabSize: number;
  /** Decoder positions: the prompt and a window's tokens together. */
  contextSize: number;
  multilingual: boolean;
  /** Language codes the checkpoint has tokens for. */
  languages: string[];
}

/** The checkpoint's special-token ids (tokenizer and generation_config.json). */
interface SpecialTokens {
  eot: number;
  sot: number;
  sotPrev?: number;
  noSpeech?: number;
  noTimestamps: number;
  /** The first timestamp token, <|0.00|>. */
  timestampBegin: number;
  transcribe?: number;
  translate?: number;
  /** Language code -> token id. */
  languages: Map<string, number>;
  suppress: number[];
  beginSuppress: number[];
}

export interface TranscribeRequest {
  /** 16 kHz mono samples. */
  audio: Float32Array;
  task: 'transcribe' | 'translate';
  /** A language code of TranscriberInfo.languages; detected when absent. */
  language?: string;
  /** Text that conditions the first window, as if it preceded the audio. */
  prompt?: string;
  /** One temperature, or several increasing ones to fall back through. */
  temperatures: number[];
  timestamps: boolean;
  /** Hears each piece of text as it is decoded (streaming). */
  onText?: (delta: string) => void;
}

export interface Segment {
  id: number;
  /** The window's first mel frame. */
  seek: number;
  start: number;
  end: number;
  text: string;
  tokens: number[];
  temperature: number;
  avgLogprob: number;
  compressionRatio: number;
  noSpeechProb: number;
}

export interface Transcript {
  text: string;
  /** The language code used (given or detected). */
  language: string;
  /** Seconds of audio. */
  duration: number;
  segments: Segment[];
}

/** Rejected when a request did not finish within the transcriber's timeout. */
export class TranscribeTimeoutError extends Error {
  constructor(readonly ms: number) {
    super(`the transcription request timed out after ${ms / 1000} s`);
  }
}


/** Whether `dir` holds a Whisper checkpoint (config.json model_type "whisper"). */
export function isWhisperCheckpoint(dir: string): boolean {
  const file = join(dir, 'config.json');
  if (!existsSync(file)) return false;
  return (JSON.parse(readFileSync(file, 'utf8')) as { model_type?: unknown }).model_type === 'whisper';
}

export async function loadTranscriber(options: AudioWorkerOptions): Promise<Transcriber> {
  const dir = resolve(options.modelDir);
  const json = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
  const cfg = whisperConfig(json, join(dir, 'config.json'));
  const generationFile = join(dir, 'generation_config.json');
  const generation = existsSync(generationFile) ? (JSON.parse(readFileSync(generationFile, 'utf8')) as Record<string, unknown>) : {};
  const gpu = options.gpu ?? (await openGpu((options.backend ?? 'auto') as Backend, { quietDawn: options.quietDawn }));
  if (!options.gpu) options.log?.(`adapter ${gpu.description}`);
  const tokenizer = await TextTokenizer.load(dir);
  const special = specialTokens(tokenizer, generation, dir);
  const model = await WhisperModel.load(gpu, dir, cfg);
  const info: TranscriberInfo = {
    id: options.alias ?? basename(dir), path: dir, architecture: 'whisper', vocabSize: cfg.vocab, contextSize: cfg.targetPositions,
    multilingual: special.languages.size > 1, languages: [...special.languages.keys()],
  };
  options.log?.(`speech-to-text model ${info.id} (whisper, ${model.weightFormat}, ${cfg.encoderLayers}+${cfg.decoderLayers} layers, ${cfg.melBins} mel bins, ${info.multilingual ? `${info.languages.length} languages` : 'English only'}) from ${dir}`);
  return new Transcriber(info, tokenizer, model, special, options, gpu.description, options.gpu ? () => {} : () => gpu.device.destroy());
}

/** The special tokens, from generation_config.json where it names them, else by their text in the tokenizer. */
function specialTokens(tokenizer: TextTokenizer, g: Record<string, unknown>, dir: string): SpecialTokens {
  const id = (text: string) => tokenizer.tokenId(text);
  const required = (value: unknown, text: string) => {
    const v = typeof value === 'number' ? value : id(text);
    if (v === undefined) throw new Error(`${dir}: the tokenizer has no ${text} token`);
    return v;
  };
  const eot = required(Array.isArray(g.eos_token_id) ? g.eos_token_id[0] : g.eos_token_id, '<|endoftext|>');
  const noTimestamps = required(g.no_timestamps_token_id, '<|notimestamps|>');
  const languages = new Map<string, number>();
  const langToId = (g.lang_to_id ?? {}) as Record<string, number>;
  for (const code of Object.keys(WHISPER_LANGUAGES)) {
    const v = langToId[`<|${code}|>`] ?? id(`<|${code}|>`);
    if (v !== undefined) languages.set(code, v);
  }
  // An English-only checkpoint has no language tokens: its prompt names none.
  const taskToId = (g.task_to_id ?? {}) as Record<string, number>;
  const ids = (v: unknown) => (Array.isArray(v) ? v.filter((x): x is number => typeof x === 'number') : []);
  return {
    eot,
    sot: required(g.decoder_start_token_id, '<|startoftranscript|>'),
    sotPrev: typeof g.prev_sot_token_id === 'number' ? g.prev_sot_token_id : id('<|startofprev|>'),
    noSpeech: id('<|nospeech|>') ?? id('<|nocaptions|>'),
    noTimestamps,
    timestampBegin: noTimestamps + 1,
    transcribe: taskToId.transcribe ?? id('<|transcribe|>'),
    translate: taskToId.translate ?? id('<|translate|>'),
    languages,
    suppress: ids(g.suppress_tokens),
    beginSuppress: ids(g.begin_suppress_tokens),
  };
}

/** One window's decode. */
interface WindowResult {
  tokens: number[];
  temperature: number;
  avgLogprob: number;
  compressionRatio: number;
  noSpeechProb: number;
}

export class Transcriber {
  private readonly jobs: JobQueue<TranscribeRequest, Transcript>;
  private readonly mel: LogMel;
  private random = 0x2545f491;

  constructor(
    readonly info: TranscriberInfo,
    readonly tokenizer: TextTokenizer,
    private readonly model: WhisperModel,
    private readonly special: SpecialTokens,
    limits: { maxQueue: number; timeoutMs: number },
    /** The adapter, e.g. "llvmpipe (LLVM 15, 256 bits) via opengles". */
    readonly adapterDescription: string,
    private readonly release: () => void,
  ) {
    this.mel = new LogMel(model.cfg.melBins);
    // One request runs while maxQueue more wait.
    this.jobs = new JobQueue({ capacity: limits.maxQueue + 1, timeoutMs: limits.timeoutMs, timeoutError: (ms) => new TranscribeTimeoutError(ms), drain: () => this.next() });
  }

  /** Requests waiting or running. */
  get pending(): number {
    return this.jobs.pending;
  }

  /** The device's GPU memory: the model's weights, and the rest (its buffers and caches) as other. */
  memory(): EngineMemory {
    const { weightBytes } = this.model;
    return { ...NO_MEMORY, weights: weightBytes, other: this.model.ops.gpu.memory.bytes() - weightBytes };
  }

  /**
   * The request's transcript. Throws QueueFullError synchronously when one request runs and
   * maxQueue more already wait; rejects with TranscribeTimeoutError after the timeout.
   */
  transcribe(request: TranscribeRequest): Promise<Transcript> {
    if (request.language !== undefined && !this.special.languages.has(request.language)) throw new Error(`language ${request.language} is not one of this model's`);
    return this.jobs.push(request);
  }

  async close(): Promise<void> {
    await this.jobs.close();
    await this.tokenizer.close();
    this.release();
  }

  /** Runs the next job. */
  private async next(): Promise<void> {
    const job = this.jobs.take()!;
    try {
      const transcript = await this.run(job);
      this.jobs.finish(job, performance.now() > job.deadline ? this.jobs.timeoutError : undefined, transcript);
    } catch (e) {
      this.jobs.finish(job, e instanceof Error ? e : new Error(String(e)));
    }
  }

  /** The whole request, window by window; stops early once the job is finished (timed out). */
  private async run(job: Job): Promise<Transcript> {
    const { audio, task, timestamps, temperatures } = job.request;
    const { special, tokenizer } = this;
    const contentFrames = Math.ceil(audio.length / HOP);
    const segments: Segment[] = [];
    let language = job.request.language ?? (this.info.multilingual ? undefined : 'en');
    // Previous text, as tokens: a window's prompt holds at most half the decoder's positions.
    let previous: number[] = job.request.prompt ? tokenizer.encode(` ${job.request.prompt.trim()}`, false) : [];
    const sampleLength = Math.floor(this.model.cfg.targetPositions / 2);
    let emitted = '';
    const allText: number[] = [];
    let seek = 0;
    while (seek < contentFrames && this.jobs.live(job)) {
      const segmentFrames = Math.min(WINDOW_FRAMES, contentFrames - seek);
      const offset = (seek * HOP) / SAMPLE_RATE;
      await this.model.encode(this.mel.window30s(audio, seek * HOP));
      if (language === undefined) language = await this.detectLanguage();
      const prefix = special.sotPrev !== undefined && previous.length > 0 ? [special.sotPrev, ...previous.slice(-(sampleLength - 1))] : [];
      let result: WindowResult | undefined;
      for (const temperature of temperatures) {
        result = await this.decodeWindow(job, prefix, this.sotSequence(language, task, timestamps), temperature, timestamps, sampleLength);
        const last = temperature === temperatures[temperatures.length - 1];
        if (last || (result.compressionRatio <= COMPRESSION_RATIO_THRESHOLD && result.avgLogprob >= LOGPROB_THRESHOLD)) break;
      }
      const { tokens } = result!;
      const windowSegments: Array<{ start: number; end: number; tokens: number[] }> = [];
      const isTs = (t: number) => t >= special.timestampBegin;
      let advance = segmentFrames;
      if (timestamps) {
        const singleEnding = tokens.length >= 2 && !isTs(tokens[tokens.length - 2]!) && isTs(tokens[tokens.length - 1]!);
        const cuts: number[] = [];
        for (let i = 1; i < tokens.length; i++) if (isTs(tokens[i - 1]!) && isTs(tokens[i]!)) cuts.push(i);
        if (cuts.length > 0) {
          if (singleEnding) cuts.push(tokens.length);
          let from = 0;
          for (const cut of cuts) {
            const slice = tokens.slice(from, cut);
            windowSegments.push({ start: offset + (slice[0]! - special.timestampBegin) * TIME_PRECISION, end: offset + (slice[slice.length - 1]! - special.timestampBegin) * TIME_PRECISION, tokens: slice });
            from = cut;
          }
          if (!singleEnding) advance = (tokens[from - 1]! - special.timestampBegin) * 2;
        } else {
          let duration = (segmentFrames * HOP) / SAMPLE_RATE;
          const stamps = tokens.filter(isTs);
          if (stamps.length > 0 && stamps[stamps.length - 1] !== special.timestampBegin) duration = (stamps[stamps.length - 1]! - special.timestampBegin) * TIME_PRECISION;
          windowSegments.push({ start: offset, end: offset + duration, tokens });
        }
      } else {
        windowSegments.push({ start: offset, end: offset + (segmentFrames * HOP) / SAMPLE_RATE, tokens });
      }
      for (const s of windowSegments) {
        const text = tokenizer.decode(s.tokens.filter((t) => t < special.eot));
        if (text.trim() === '' && s.tokens.every((t) => t >= special.eot)) continue;
        segments.push({
          id: segments.length, seek, start: round(s.start), end: round(s.end), text, tokens: s.tokens,
          temperature: result!.temperature, avgLogprob: result!.avgLogprob, compressionRatio: result!.compressionRatio, noSpeechProb: result!.noSpeechProb,
        });
      }
      allText.push(...tokens.filter((t) => t < special.eot));
      // openai-whisper stops conditioning on previous text after a high-temperature window.
      previous = result!.temperature > 0.5 ? [] : [...previous, ...tokens];
      seek += Math.max(1, advance);
      emitted = this.emitText(job, allText, emitted, seek >= contentFrames);
    }
    if (!this.jobs.live(job)) throw this.jobs.timeoutError;
    return { text: tokenizer.decode(allText).trim(), language: language ?? 'en', duration: round(audio.length / SAMPLE_RATE), segments };
  }

  /**
   * Streams the text of `tokens` past what was `emitted`; returns what is now emitted. Until
   * `final`, up to three trailing replacement characters (the bytes of a character the next
   * window may complete: at most three of its four) are held back, so emitted text never changes.
   */
  private emitText(job: Job, tokens: number[], emitted: string, final: boolean): string {
    if (!job.request.onText) return emitted;
    let text = this.tokenizer.decode(tokens).trimStart();
    if (!final) text = text.replace(/\uFFFD{1,3}$/, '');
    if (text.length > emitted.length && text.startsWith(emitted)) job.request.onText(text.slice(emitted.length));
    return text.startsWith(emitted) ? text : emitted;
  }

  /** The likeliest language token after <|startoftranscript|> over the encoded window. */
  private async detectLanguage(): Promise<string> {
    const logits = await this.model.decode([this.special.sot], 0);
    let best: string | undefined;
    for (const [code, id] of this.special.languages) if (best === undefined || logits[id]! > logits[this.special.languages.get(best)!]!) best = code;
    return best ?? 'en';
  }

  private sotSequence(language: string, task: 'transcribe' | 'translate', timestamps: boolean): number[] {
    const s = this.special;
    const seq = [s.sot];
    if (s.languages.size > 1) seq.push(s.languages.get(language)!);
    const taskId = task === 'translate' ? s.translate : s.transcribe;
    if (s.languages.size > 1 && taskId !== undefined) seq.push(taskId);
    if (!timestamps) seq.push(s.noTimestamps);
    return seq;
  }

  /** One window's tokens (the end token excluded) at `temperature` (0: greedy). */
  private async decodeWindow(job: Job, prefix: number[], sot: number[], temperature: number, timestamps: boolean, sampleLength: number): Promise<WindowResult> {
    const s = this.special;
    const first = await this.model.decode([...prefix, s.sot], 0);
    const noSpeechProb = s.noSpeech === undefined ? 0 : Math.exp(logSoftmax(first)[s.noSpeech]!);
    let pos = prefix.length + 1;
    let logits = sot.length > 1 ? await this.model.decode(sot.slice(1), pos) : first;
    pos += sot.length - 1;
    const tokens: number[] = [];
    let sumLogprob = 0;
    while (tokens.length < sampleLength && pos < this.model.cfg.targetPositions && this.jobs.live(job)) {
      this.applyRules(logits, tokens, timestamps);
      const next = temperature > 0 ? this.sample(logits, temperature) : argmax(logits);
      sumLogprob += logSoftmax(logits)[next]!;
      if (next === s.eot) break;
      tokens.push(next);
      logits = await this.model.decode([next], pos++);
    }
    const text = this.tokenizer.decode(tokens.filter((t) => t < s.eot));
    return { tokens, temperature, avgLogprob: sumLogprob / (tokens.length + 1), compressionRatio: compressionRatio(text), noSpeechProb };
  }

  /** openai-whisper's logit filters, in place. */
  private applyRules(logits: Float32Array, tokens: number[], timestamps: boolean): void {
    const s = this.special;
    const ban = (from: number, to = from + 1) => logits.fill(-Infinity, Math.max(0, from), Math.min(logits.length, to));
    const tsBegin = s.timestampBegin;
    if (tokens.length === 0) for (const t of s.beginSuppress) ban(t);
    for (const t of s.suppress) ban(t);
    // Special tokens other than the end and the timestamps.
    ban(s.eot + 1, tsBegin);
    if (!timestamps) {
      ban(tsBegin, logits.length);
      return;
    }
    const n = tokens.length;
    const lastTs = n >= 1 && tokens[n - 1]! >= tsBegin;
    const penultTs = n < 2 || tokens[n - 2]! >= tsBegin;
    if (lastTs) {
      if (penultTs) ban(tsBegin, logits.length);
      else ban(0, s.eot);
    }
    const stamps = tokens.filter((t) => t >= tsBegin);
    if (stamps.length > 0) ban(tsBegin, lastTs && !penultTs ? stamps[stamps.length - 1]! : stamps[stamps.length - 1]! + 1);
    if (n === 0) {
      ban(0, tsBegin);
      ban(tsBegin + MAX_INITIAL_TIMESTAMP_INDEX + 1, logits.length);
    }
    const lp = logSoftmax(logits);
    let tsMass = -Infinity;
    for (let i = tsBegin; i < lp.length; i++) tsMass = logAddExp(tsMass, lp[i]!);
    let maxText = -Infinity;
    for (let i = 0; i < tsBegin; i++) maxText = Math.max(maxText, lp[i]!);
    if (tsMass > maxText) ban(0, tsBegin);
  }

  /** A token drawn from softmax(logits / temperature) (xorshift32). */
  private sample(logits: Float32Array, temperature: number): number {
    let max = -Infinity;
    for (const v of logits) max = Math.max(max, v);
    let total = 0;
    const p = new Float64Array(logits.length);
    for (let i = 0; i < logits.length; i++) total += p[i] = Math.exp((logits[i]! - max) / temperature);
    this.random ^= this.random << 13;
    this.random ^= this.random >>> 17;
    this.random ^= this.random << 5;
    let r = ((this.random >>> 0) / 2 ** 32) * total;
    for (let i = 0; i < p.length; i++) if ((r -= p[i]!) <= 0) return i;
    return argmax(logits);
  }
}

const round = (x: number) => Math.round(x * 100) / 100;

function argmax(v: Float32Array): number {
  let best = 0;
  for (let i = 1; i < v.length; i++) if (v[i]! > v[best]!) best = i;
  return best;
}

function logAddExp(a: number, b: number): number {
  if (a === -Infinity) return b;
  if (b === -Infinity) return a;
  const m = Math.max(a, b);
  return m + Math.log(Math.exp(a - m) + Math.exp(b - m));
}

function logSoftmax(v: Float32Array): Float64Array {
  let max = -Infinity;
  for (const x of v) max = Math.max(max, x);
  let sum = 0;
  for (const x of v) sum += Math.exp(x - max);
  const lse = max + Math.log(sum);
  return Float64Array.from(v, (x) => x - lse);
}

/** openai-whisper's: the text's bytes over its zlib-compressed bytes. */
function compressionRatio(text: string): number {
  const bytes = Buffer.from(text, 'utf8');
  return bytes.length === 0 ? 0 : bytes.length / deflateSync(bytes).length;
}
