// One assistant turn through the chat pipeline the chat-completions route uses:
// prepareChat (template, tool_choice rules and instruction, kwargs, rolling reasoning
// checkpoint, thinking-budget and forced-call constraints), generateText (the shared
// generation path with stop strings and usage), and ChatOutput (reasoning, content and
// tool calls split from the streamed text, reconciled with the final parse). The
// Responses and Anthropic routes translate their requests into a ChatTurnRequest and the
// typed events below into their wire formats, so all three API families agree.
import { ChatOutput, type OutputDelta } from '../chat/chat-output.js';
import type { ToolChoice } from '../chat/chat-request.js';
import type { ChatMessage } from '../chat/template.js';
import { generateText, type TextGenerationEvent, type TextGenerationResult } from '../chat/text-generation.js';
import { ThinkingBudget } from '../chat/thinking-budget.js';
import type { ToolDefinition } from '../chat/tools/types.js';
import { prepareChat, type PreparedChat } from './chat-prepare.js';
import { badRequest } from './errors.js';
import { generationParams } from './generation-params.js';
import type { ServerMetrics } from './metrics.js';
import type { ServedModel } from './model-state.js';
import type { RequestContext } from './request-context.js';
import type { SamplingDefaults } from './sampling-defaults.js';
import type { ChatCompletionBody, SamplingFields } from './schemas.js';

export type { ToolChoice, ToolDefinition };

export interface ChatTurnRequest {
  messages: ChatMessage[];
  /** Chat-completions tools ({type: "function", function: {...}}). */
  tools?: ToolDefinition[];
  toolChoice?: ToolChoice;
  /** Request-level chat_template_kwargs (merged over the server's --chat-template-kwargs). */
  kwargs?: Record<string, unknown>;
  /** Reasoning tokens allowed (0: the block is closed at once); undefined = no cap. */
  thinkingBudget?: number;
  /** false allows at most one tool call. */
  parallelToolCalls?: boolean;
  /** JSON Schema the answer must match (Responses text.format json_schema). */
  outputSchema?: Record<string, unknown>;
}

export interface PreparedTurn {
  chat: PreparedChat;
  promptTokens: number[];
  outputSchema?: Record<string, unknown>;
}

export interface ToolCall {
  id: string;
  name: string;
  /** The arguments' JSON text. */
  arguments: string;
}

export type FinishKind = 'stop' | 'length' | 'tool_calls';

export type ChatEvent =
  | { type: 'reasoning'; text: string }
  | { type: 'content'; text: string }
  /** A tool call starts; its arguments follow as 'tool_arguments' pieces. */
  | { type: 'tool_call'; index: number; id: string; name: string }
  | { type: 'tool_arguments'; index: number; delta: string }
  | { type: 'done'; turn: TurnResult };

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
}

/** Renders and tokenizes a turn; 400 for what the template, the rules or the model refuse. */
export function prepareTurn(model: ServedModel, req: ChatTurnRequest, options: TurnPrepareOptions): PreparedTurn {
  rejectNonTextContent(req.messages);
  const body: ChatCompletionBody & { response_format?: unknown } = {
    messages: req.messages,
    tools: req.tools && req.tools.length > 0 ? req.tools : undefined,
    tool_choice: req.toolChoice,
    chat_template_kwargs: req.kwargs,
    thinking_budget_tokens: req.thinkingBudget,
    parallel_tool_calls: req.parallelToolCalls,
    // In chat-completions terms, so the pipeline applies its rules (and, once wired, the
    // grammar) to it as it does to response_format.
    ...(req.outputSchema ? { response_format: { type: 'json_schema', json_schema: { name: 'output', schema: req.outputSchema } } } : {}),
  };
  const chat = prepareChat(model, body, options);
  return {
    chat,
    // The template owns BOS and the turn markers, so no specials are added.
    promptTokens: model.engine.tokenizer.encode(chat.prompt, false),
    outputSchema: req.outputSchema,
  };
}

export interface TurnOptions {
  maxTokens?: number | null;
  sampling: SamplingFields;
  context: RequestContext;
  defaults: SamplingDefaults;
  metrics: ServerMetrics;
  warn: (message: string) => void;
}

/**
 * Queues the generation now (so a full queue or an over-long prompt is refused before
 * the caller commits to a response) and returns its events. The iteration ends without
 * a 'done' when `context.signal` aborts.
 */
export function startTurn(model: ServedModel, turn: PreparedTurn, options: TurnOptions): AsyncGenerator<ChatEvent> {
  const { engine } = model;
  const { chat } = turn;
  const params = {
    ...generationParams(engine, turn.promptTokens, options.sampling, options.maxTokens, options.context, options.defaults),
    keepSpecialIds: chat.keepSpecialIds,
    ...(chat.constraint ? { constraint: chat.constraint } : {}),
  };
  const events = options.metrics.track(generateText(engine, params), true);
  return chatEvents(model, turn, events, options.warn);
}

async function* chatEvents(
  model: ServedModel,
  turn: PreparedTurn,
  events: AsyncIterable<TextGenerationEvent>,
  warn: (message: string) => void,
): AsyncGenerator<ChatEvent> {
  const output = new ChatOutput(turn.chat.output);
  for await (const event of events) {
    if (event.type === 'text') {
      yield* deltaEvents(output.push(event.text));
      continue;
    }
    const { delta, reply } = output.finish();
    yield* deltaEvents(delta);
    const forced = turn.chat.forced;
    if (forced && reply.toolCalls.length === 0) warn(`tool_choice forced a call (${forced.kind}) but the reply has none`);
    const generation = event.result;
    yield {
      type: 'done',
      turn: {
        finish: reply.toolCalls.length > 0 ? 'tool_calls' : generation.finishReason,
        generation,
        reasoning: reply.reasoning,
        content: reply.content,
        toolCalls: reply.toolCalls.map((call) => ({ id: call.id, name: call.function.name, arguments: call.function.arguments })),
        reasoningTokens: reasoningTokens(model, turn, reply.reasoning),
      },
    };
  }
}

/** One token's worth of output, in the order chat completions sends it. */
function* deltaEvents(delta: OutputDelta): Generator<ChatEvent> {
  if (delta.reasoning) yield { type: 'reasoning', text: delta.reasoning };
  if (delta.content) yield { type: 'content', text: delta.content };
  for (const call of delta.toolCalls) {
    if (call.id !== undefined) yield { type: 'tool_call', index: call.index, id: call.id, name: call.function.name ?? '' };
    if (call.function.arguments) yield { type: 'tool_arguments', index: call.index, delta: call.function.arguments };
  }
}

/** The budget constraint counted them as they were sampled; otherwise the text is re-encoded. */
function reasoningTokens(model: ServedModel, turn: PreparedTurn, reasoning: string): number {
  const { constraint } = turn.chat;
  if (constraint instanceof ThinkingBudget) return constraint.reasoningTokens;
  return reasoning ? model.engine.tokenizer.encode(reasoning, false).length : 0;
}

/** Drives a turn to its end; undefined when it was aborted first. */
export async function collectTurn(events: AsyncIterable<ChatEvent>): Promise<TurnResult | undefined> {
  for await (const event of events) if (event.type === 'done') return event.turn;
  return undefined;
}

/**
 * This engine runs text-only checkpoints: an image (or any other non-text part) cannot
 * reach the model, and dropping it silently would answer a different question.
 */
function rejectNonTextContent(messages: ChatMessage[]): void {
  for (const message of messages) {
    if (!Array.isArray(message.content)) continue;
    const part = message.content.find((p) => p.type !== 'text');
    if (part) {
      const kind = part.type === 'image_url' ? 'image' : `"${part.type}"`;
      throw badRequest(`the loaded model takes text only; ${kind} input is not supported`);
    }
  }
}
