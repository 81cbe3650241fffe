// Turns a chat request into its prompt and everything its reply needs: tool_choice
// applied (400s for the cases the REST reference lists), template kwargs resolved, earlier
// reasoning dropped or kept, the reply's parser configured, and the token constraint (a
// forced call's grammar, the structured-output fields', or the thinking budget).
import { chatOutputConfig, type ChatOutputConfig } from '../chat/chat-output.js';
import {
  applyRollingCheckpoint,
  ChatRequestError,
  forcedInstruction,
  placeInstruction,
  planTools,
  resolveTemplateKwargs,
  thinkingBudget,
  withObjectArguments,
  type ForcedChoice,
  type THINKING_BUDGET_FIELDS,
} from '../chat/chat-request.js';
import { promptOpensReasoning } from '../chat/reasoning.js';
import { ChatTemplateError, hasToolCalls, type ChatMessage } from '../chat/template.js';
import { forcedCallDocument } from '../chat/tool-constraint.js';
import { HARMONY_TOKENS } from '../chat/tool-calls/harmony.js';
import type { ChatFormat } from '../chat/tool-calls/registry.js';
import type { ToolDefinition } from '../chat/tool-calls/types.js';
import type { TokenConstraint } from '../engine/types.js';
import type { TextTokenizer } from '../models/tokenizer.js';
import { badRequest } from './errors.js';
import type { ServedModel } from './model-state.js';
import type { ChatCompletionBody } from './schemas.js';
import { compileForcedCall } from './forced-call.js';
import { reasoningBudgetConstraint } from './reasoning-budget.js';
import { constrainsOutput, structuredOutputConstraint } from './response-format.js';

/**
 * What the chat pipeline reads from a request, in chat-completions terms:
 * /v1/chat/completions passes its body; the Responses and Anthropic routes translate theirs.
 */
export type ChatTurnRequest = Pick<
  ChatCompletionBody,
  | 'messages'
  | 'add_generation_prompt'
  | 'tools'
  | 'tool_choice'
  | 'chat_template_kwargs'
  | 'extra_body'
  | 'parallel_tool_calls'
  | 'response_format'
  | 'json_schema'
  | 'grammar'
  | 'reasoning_budget_message'
  | (typeof THINKING_BUDGET_FIELDS)[number]
>;

export interface PreparedChat {
  prompt: string;
  output: ChatOutputConfig;
  /** Special tokens whose text the reply's parser needs. */
  keepSpecialIds: Set<number>;
  constraint?: TokenConstraint;
  /** The same constraint afresh (it is stateful), for each further choice of an n > 1 request. */
  newConstraint: () => TokenConstraint | undefined;
  forced?: ForcedChoice;
  /** The request declared tools (a reply may then end in tool calls). */
  tools: readonly ToolDefinition[];
}

export interface ChatPrepareOptions {
  /** --chat-template-kwargs / LLAMA_ARG_CHAT_TEMPLATE_KWARGS. */
  serverKwargs?: Record<string, unknown>;
  warn: (message: string) => void;
}

/** Ids of those texts that are single special tokens (others decode as ordinary text anyway). */
export function specialIds(tokenizer: TextTokenizer, texts: readonly string[]): Set<number> {
  const ids = new Set<number>();
  for (const text of texts) {
    const encoded = tokenizer.encode(text, false);
    if (encoded.length === 1 && tokenizer.isSpecial(encoded[0]!)) ids.add(encoded[0]!);
  }
  return ids;
}

export function prepareChat(model: ServedModel, body: ChatTurnRequest, options: ChatPrepareOptions): PreparedChat {
  try {
    return prepare(model, body, options);
  } catch (err) {
    if (err instanceof ChatRequestError || err instanceof ChatTemplateError) throw badRequest(err.message);
    throw err;
  }
}

function prepare(model: ServedModel, body: ChatTurnRequest, options: ChatPrepareOptions): PreparedChat {
  const { engine, chatFormat: format } = model;
  const { tokenizer } = engine;
  const plan = planTools(body.tools ?? undefined, body.tool_choice);
  if (plan.forced && constrainsOutput(body)) {
    throw new ChatRequestError('a forced tool_choice ("required" or a named function) cannot be combined with a constraining response_format, json_schema or grammar');
  }
  const budget = thinkingBudget(body);
  const template = plan.rendered.length > 0 && model.toolUseTemplate ? model.toolUseTemplate : model.chatTemplate;
  const prefill = prefillMessage(body.messages, plan.forced !== undefined);
  const kwargs = thinkingKwargs(resolveTemplateKwargs(body, options.serverKwargs), template.readsEnableThinking || format.reasoning !== undefined, prefill !== undefined);

  let messages = prefill ? body.messages.slice(0, -1) : body.messages;
  if (format.reasoning && kwargs.preserve_thinking !== true) messages = applyRollingCheckpoint(messages, format.reasoning);
  if (format.objectArguments) messages = withObjectArguments(messages);
  if (plan.forced) messages = placeInstruction(messages, forcedInstruction(plan.forced));
  // A continued message needs the assistant's turn opened, whatever add_generation_prompt says.
  let prompt = template.render(messages, { tools: plan.rendered, kwargs, addGenerationPrompt: prefill !== undefined || body.add_generation_prompt !== false });
  // Thinking off on a template whose generation prompt opens the block anyway (QwQ,
  // DeepSeek-R1): llama-server closes it, so the reply starts with the answer.
  if (kwargs.enable_thinking === false && format.reasoning && promptOpensReasoning(prompt, format.reasoning)) prompt += format.reasoning.close;
  if (prefill) prompt += prefillText(prefill);

  const maxCalls = body.parallel_tool_calls === false ? 1 : undefined;
  const output = chatOutputConfig(format, prompt, plan.parsed, { maxCalls, forced: plan.forced !== undefined, warn: options.warn });

  const keepSpecialIds = specialIds(tokenizer, markupTokens(format, output.tools !== undefined));

  let document = forcedCallDocument(format.toolFormat, plan.rendered, plan.forced);
  // A prompt that leaves the reasoning block open: the call comes after closing it.
  if (document && output.reasoning?.startsInside) document = { ...document, prefix: `${output.reasoning.tags.close}\n\n${document.prefix}` };
  // Compiled grammars are cached, so a further choice's constraint costs only its state.
  const newConstraint = (warn: (message: string) => void) => {
    let constraint: TokenConstraint | undefined;
    if (document) constraint = compileForcedCall(document, engine, warn);
    // response_format json_schema, json_schema or grammar: the reply is the document (after
    // closing a reasoning block the prompt left open).
    else if (constrainsOutput(body)) {
      constraint = structuredOutputConstraint(engine, body, output.reasoning?.startsInside ? `${output.reasoning.tags.close}\n\n` : undefined);
    }
    if (!constraint && budget !== undefined) constraint = reasoningBudgetConstraint(model, prompt, budget, body.reasoning_budget_message ?? '');
    return constraint;
  };
  const constraint = newConstraint(options.warn);
  return {
    prompt,
    output,
    keepSpecialIds,
    ...(constraint ? { constraint } : {}),
    // Whatever the first compile had to say was said once.
    newConstraint: () => newConstraint(() => {}),
    ...(plan.forced ? { forced: plan.forced } : {}),
    tools: plan.parsed,
  };
}

/**
 * The final assistant message a chat continues (llama-server's assistant prefill, Anthropic's
 * prefilled response): the prompt ends with its text and the reply is what follows.
 */
function prefillMessage(messages: readonly ChatMessage[], forced: boolean): ChatMessage | undefined {
  const last = messages.at(-1);
  if (last?.role !== 'assistant') return undefined;
  if (messages.at(-2)?.role === 'assistant') throw new ChatRequestError('Cannot have 2 or more assistant messages at the end of the list.');
  if (hasToolCalls(last)) {
    throw new ChatRequestError('the final assistant message has tool_calls: send their results (role "tool") after it, or leave tool_calls out to continue its text');
  }
  if (forced) throw new ChatRequestError('a forced tool_choice ("required" or a named function) cannot be combined with continuing the final assistant message');
  return last;
}

/** A continued message's text: its text parts one after the other, as llama-server appends them. */
function prefillText(message: ChatMessage): string {
  const { content } = message;
  if (typeof content === 'string') return content;
  return (content ?? []).map((part) => (part.type === 'text' ? String(part.text) : '')).join('');
}

/**
 * enable_thinking as llama-server's `--reasoning auto` resolves it: a template with a
 * thinking switch renders with thinking on unless the request or the server
 * (--reasoning, --chat-template-kwargs) set it. A continued assistant message is the
 * answer, so it renders with thinking off, and one asked to think is refused as
 * llama-server refuses it.
 */
function thinkingKwargs(kwargs: Record<string, unknown>, switchable: boolean, prefill: boolean): Record<string, unknown> {
  if (prefill) {
    if (kwargs.enable_thinking === true) throw new ChatRequestError('Assistant response prefill is incompatible with enable_thinking.');
    return switchable ? { ...kwargs, enable_thinking: false } : kwargs;
  }
  return switchable && kwargs.enable_thinking === undefined ? { ...kwargs, enable_thinking: true } : kwargs;
}

/** The markup a reply's parser reads: tool-call tokens only when calls are parsed. */
export function markupTokens(format: ChatFormat, parsesTools: boolean): string[] {
  return [
    ...(parsesTools && format.toolFormat ? format.toolFormat.preservedTokens : []),
    ...(format.reasoning ? [format.reasoning.open, format.reasoning.close] : []),
    ...(format.harmony ? HARMONY_TOKENS : []),
  ];
}
