// One assistant turn through the chat pipeline, for every chat API: prepareChat
// (template, tool_choice rules and instruction, kwargs, rolling reasoning checkpoint,
// thinking-budget and forced-call constraints), generateTexts (the shared generation path
// with stop strings, usage and logprobs), and ChatOutput (reasoning, content and tool
// calls split from the streamed text, reconciled with the final parse). Chat completions
// pass their body as the ChatTurnRequest; the Responses and Anthropic routes translate
// theirs into one. Each route renders the typed events below in its wire format
// (./openai/chat-response.ts, ./responses/output.ts, ./anthropic/output.ts).
import { ChatOutput, type OutputDelta } from '../chat/chat-output.js';
import type { ToolChoice } from '../chat/chat-request.js';
import { generateTexts, type GeneratedToken, type TextGenerationEvent, type TextGenerationResult } from '../chat/text-generation.js';
import { ThinkingBudget } from '../chat/thinking-budget.js';
import type { ToolDefinition } from '../chat/tool-calls/types.js';
import type { PromptImage, PromptProgress, TokenConstraint } from '../engine/types.js';
import { prepareChat, type ChatTurnRequest, type PreparedChat } from './chat-prepare.js';
import { choiceSampling } from './choices.js';
import { badRequest } from './errors.js';
import { contextExceeded, generationParams, tokenizeText } from './generation-params.js';
import type { ServerMetrics } from './metrics.js';
import type { ServedModel } from './model-state.js';
import type { RequestContext } from './request-context.js';
import type { SamplingDefaults } from './sampling-defaults.js';
import type { SamplingFields } from './schemas.js';
import { countMedia, expandImageMarkers, loadTurnImages, promptImages, sampleVideos, withImageMarkers } from './turn-images.js';

export type { ChatTurnRequest, ToolChoice, ToolDefinition };

export interface PreparedTurn {
  chat: PreparedChat;
  promptTokens: number[];
  /** The images' soft tokens, for a vision-language model (./turn-images.ts). */
  images?: PromptImage[];
}

export interface ToolCall {
  id: string;
  name: string;
  /** The arguments' JSON text. */
  arguments: string;
}

export type FinishKind = 'stop' | 'length' | 'tool_calls';

/**
 * A turn started with `logprobs` sets `token` on the first event each generated token
 * produced, and gives a token that produced none (held-back markup, part of a stop
 * string) a 'token' event of its own, so every token's logprobs are reported.
 */
export type OutputEvent =
  | { type: 'reasoning'; text: string; token?: GeneratedToken }
  | { type: 'content'; text: string; token?: GeneratedToken }
  /** A tool call starts; its arguments follow as 'tool_arguments' pieces. */
  | { type: 'tool_call'; index: number; id: string; name: string; token?: GeneratedToken }
  | { type: 'tool_arguments'; index: number; delta: string; token?: GeneratedToken }
  | { type: 'token'; token: GeneratedToken };

export type ChatEvent = OutputEvent | { type: 'done'; turn: TurnResult };

export interface TurnResult {
  finish: FinishKind;
  /** The generation's own result: usage, timings, stop string. */
  generation: TextGenerationResult;
  /** The final parse, which the streamed events were reconciled with. */
  reasoning: string;
  content: string;
  toolCalls: ToolCall[];
  /** Completion tokens spent inside the reasoning block. */
  reasoningTokens: number;
}

export interface TurnPrepareOptions {
  /** --chat-template-kwargs. */
  serverKwargs?: Record<string, unknown>;
  warn: (message: string) => void;
  /** The request's lifetime: stops the sampling of its videos. */
  signal?: AbortSignal;
}

/**
 * Renders a turn's prompt, each image (and each frame of a sampled video: sampleVideos;
 * a video not yet sampled as one frame) expanded into its placeholder tokens where every
 * image is the same number of tokens (the marker stays otherwise: loadTurnImages sizes them); 400 (or
 * 501, for media the model cannot take) for what the template, the rules or the model refuse.
 */
export function renderTurn(model: ServedModel, req: ChatTurnRequest, options: TurnPrepareOptions): PreparedChat {
  const { vision } = model.engine;
  if (countMedia(model, req.messages) === 0 || !vision) return prepareChat(model, req, options);
  const chat = prepareChat(model, { ...req, messages: withImageMarkers(req.messages, vision) }, options);
  return { ...chat, prompt: expandImageMarkers(chat.prompt, vision) };
}

/** Renders and tokenizes a turn that is to be generated: its prompt must fit the context. */
export async function prepareTurn(model: ServedModel, req: ChatTurnRequest, options: TurnPrepareOptions): Promise<PreparedTurn> {
  if (model.maxMessages !== undefined && req.messages.length > model.maxMessages) {
    const { contextSize } = model.engine.info;
    throw badRequest(
      `the conversation has ${req.messages.length} messages; at most ${model.maxMessages} fit the context size of ${contextSize} tokens`,
      'context_length_exceeded',
      { n_ctx: contextSize },
    );
  }
  const media = countMedia(model, req.messages);
  let chat = renderTurn(model, req, options);
  // The template owns BOS and the turn markers, so no specials are added.
  let promptTokens = await tokenizeText(model.engine, chat.prompt, false);
  if (media === 0) return { chat, promptTokens };
  const { contextSize } = model.engine.info;
  const fits = () => {
    if (promptTokens.length >= contextSize) throw contextExceeded(`${promptTokens.length}`, promptTokens.length, contextSize);
  };
  // Refused before any image or video is fetched, each video counted as one frame (an
  // image's marker is fewer tokens than the image).
  fits();
  const messages = await sampleVideos(model, req.messages, options.signal);
  if (messages !== req.messages) {
    chat = renderTurn(model, { ...req, messages }, options);
    promptTokens = await tokenizeText(model.engine, chat.prompt, false);
    fits();
  }
  const images = await loadTurnImages(model, messages);
  const vision = model.engine.vision!;
  if (vision.tokensPerImage === undefined) {
    chat = { ...chat, prompt: expandImageMarkers(chat.prompt, vision, images) };
    promptTokens = await tokenizeText(model.engine, chat.prompt, false);
    fits();
  }
  return { chat, promptTokens, images: await promptImages(model, images, promptTokens) };
}

export interface TurnOptions {
  maxTokens?: number | null;
  sampling: SamplingFields;
  context: RequestContext;
  defaults: SamplingDefaults;
  metrics: ServerMetrics;
  warn: (message: string) => void;
  /** Top logprobs per token besides the chosen one's (0-20); undefined = no logprobs. */
  logprobs?: number;
  /** The request's logit_bias (./logit-bias.ts), for the APIs that have one. */
  logitBias?: Map<number, number>;
  /** The logprobs are of the distribution each token was drawn from (llama-server's post_sampling_probs). */
  postSamplingProbs?: boolean;
  /** Called after each prefill chunk of choice `index`, before its first token (llama-server's return_progress). */
  onProgress?: (index: number, progress: PromptProgress) => void;
}

/**
 * Queues the generation now (so a full queue or an over-long prompt is refused before
 * the caller commits to a response) and returns its events. The iteration ends without
 * a 'done' when `context.signal` aborts.
 */
export function startTurn(model: ServedModel, turn: PreparedTurn, options: TurnOptions): AsyncGenerator<ChatEvent> {
  return startTurns(model, turn, options, 1)[0]!;
}

/**
 * `n` choices of one turn (chat completions' n), queued together: the prompt is prefilled
 * once, and each choice samples with its own seed (./choices.ts) and its own constraint.
 */
export function startTurns(model: ServedModel, turn: PreparedTurn, options: TurnOptions, n: number): AsyncGenerator<ChatEvent>[] {
  const { engine } = model;
  const { chat } = turn;
  const base = {
    ...generationParams(engine, turn.promptTokens, options.sampling, options.maxTokens, options.context, options.defaults, options.logitBias),
    keepSpecialIds: chat.keepSpecialIds,
    ...(turn.images ? { images: turn.images } : {}),
    ...(options.logprobs === undefined ? {} : { logprobs: options.logprobs }),
    ...(options.postSamplingProbs ? { postSamplingProbs: true } : {}),
  };
  const constraints = Array.from({ length: n }, (_, i) => (i === 0 ? chat.constraint : chat.newConstraint()));
  const { onProgress } = options;
  const choices = constraints.map((constraint, i) => ({
    ...base,
    sampling: choiceSampling(base.sampling, i),
    ...(constraint ? { constraint } : {}),
    ...(onProgress ? { onProgress: (progress: PromptProgress) => onProgress(i, progress) } : {}),
  }));
  const streams = options.metrics.trackChoices(generateTexts(engine, choices), true, n);
  return streams.map((events, i) => chatEvents(model, turn, constraints[i], events, options.warn));
}

async function* chatEvents(
  model: ServedModel,
  turn: PreparedTurn,
  constraint: TokenConstraint | undefined,
  events: AsyncIterable<TextGenerationEvent>,
  warn: (message: string) => void,
): AsyncGenerator<ChatEvent> {
  const output = new ChatOutput(turn.chat.output);
  for await (const event of events) {
    if (event.type === 'text') {
      yield* deltaEvents(output.push(event.text), event.token?.logprobs ? event.token : undefined);
      continue;
    }
    const generation = event.result;
    const { delta, reply } = output.finish(generation.finishReason === 'length');
    yield* deltaEvents(delta);
    const forced = turn.chat.forced;
    if (forced && reply.toolCalls.length === 0) warn(`tool_choice forced a call (${forced.kind}) but the reply has none`);
    yield {
      type: 'done',
      turn: {
        // A call cut off by the token limit makes the turn a 'length' one.
        finish: reply.cutOff ? 'length' : reply.toolCalls.length > 0 ? 'tool_calls' : generation.finishReason,
        generation,
        reasoning: reply.reasoning,
        content: reply.content,
        toolCalls: reply.toolCalls.map((call) => ({ id: call.id, name: call.function.name, arguments: call.function.arguments })),
        reasoningTokens: reasoningTokens(model, constraint, reply.reasoning),
      },
    };
  }
}

/** One token's worth of output, in the order chat completions sends it; `token` goes on the first event. */
export function deltaEvents(delta: OutputDelta, token?: GeneratedToken): OutputEvent[] {
  const events: OutputEvent[] = [];
  const add = (event: Exclude<OutputEvent, { type: 'token' }>) => events.push(token && events.length === 0 ? { ...event, token } : event);
  if (delta.reasoning) add({ type: 'reasoning', text: delta.reasoning });
  if (delta.content) add({ type: 'content', text: delta.content });
  for (const call of delta.toolCalls) {
    if (call.id !== undefined) add({ type: 'tool_call', index: call.index, id: call.id, name: call.function.name ?? '' });
    if (call.function.arguments) add({ type: 'tool_arguments', index: call.index, delta: call.function.arguments });
  }
  if (token && events.length === 0) events.push({ type: 'token', token });
  return events;
}

/** The budget constraint counted them as they were sampled; otherwise the text is re-encoded. */
function reasoningTokens(model: ServedModel, constraint: TokenConstraint | undefined, reasoning: string): number {
  if (constraint instanceof ThinkingBudget) return constraint.reasoningTokens;
  return reasoning ? model.engine.tokenizer.encode(reasoning, false).length : 0;
}

/** Drives a turn to its end; undefined when it was aborted first. */
export async function collectTurn(events: AsyncIterable<ChatEvent>): Promise<TurnResult | undefined> {
  for await (const event of events) if (event.type === 'done') return event.turn;
  return undefined;
}
