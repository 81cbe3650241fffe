// What a chat request asks of the prompt, beyond its messages: the chat_template_kwargs it
// resolves to, the reasoning it keeps from earlier turns, and the tool_choice rules
// (which tools are rendered, the instruction a forced choice adds). Pure functions over
// the request; the request object itself is never modified.
import type { ChatMessage, ContentPart } from './template.js';
import type { ThinkTags } from './tool-calls/registry.js';
import type { ToolDefinition } from './tool-calls/types.js';

/** A request the rules refuse; the server answers 400 with its message. */
export class ChatRequestError extends Error {}

type Kwargs = Record<string, unknown>;

const isObject = (v: unknown): v is Kwargs => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * chat_template_kwargs from the first of: the top-level field (llama.cpp), then
 * extra_body.chat_template_kwargs (vLLM / OpenAI SDK), then extra_body.preserve_thinking
 * (DashScope); merged over the server's default, request keys winning.
 */
export function resolveTemplateKwargs(body: { chat_template_kwargs?: unknown; extra_body?: unknown }, serverDefault: Kwargs = {}): Kwargs {
  const extra = isObject(body.extra_body) ? body.extra_body : {};
  let request: Kwargs = {};
  if (isObject(body.chat_template_kwargs)) request = body.chat_template_kwargs;
  else if (isObject(extra.chat_template_kwargs)) request = extra.chat_template_kwargs;
  else if (typeof extra.preserve_thinking === 'boolean') request = { preserve_thinking: extra.preserve_thinking };
  return { ...serverDefault, ...request };
}

function contentText(content: ChatMessage['content']): string {
  if (typeof content === 'string') return content;
  return (content ?? []).map((p) => (p.type === 'text' ? String((p as { text?: unknown }).text ?? '') : '')).join('\n');
}

/** Qwen's templates pass tool results back as user turns wrapped in <tool_response>. */
function isToolResponse(message: ChatMessage): boolean {
  const text = contentText(message.content).trim();
  return text.startsWith('<tool_response>') && text.endsWith('</tool_response>');
}

function withoutReasoning(text: string, tags: ThinkTags): string {
  const open = escapeRegExp(tags.open);
  const close = escapeRegExp(tags.close);
  let out = text.replace(new RegExp(`${open}[\\s\\S]*?${close}\\s*`, 'g'), '');
  // A reply whose opening tag came from the prompt holds only the closing one.
  const lone = out.lastIndexOf(tags.close);
  if (lone >= 0) out = out.slice(lone + tags.close.length).replace(/^\s+/, '');
  return out;
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/**
 * The Qwen3/Qwen3.5 rolling checkpoint: walking back to the latest user turn that is not a
 * tool result, every assistant reply before it loses its reasoning. Later replies (the
 * current tool-calling round) keep theirs.
 */
export function applyRollingCheckpoint(messages: readonly ChatMessage[], tags: ThinkTags): ChatMessage[] {
  let lastQuery = -1;
  for (let i = messages.length - 1; i >= 0; i--) {
    if (messages[i]!.role === 'user' && !isToolResponse(messages[i]!)) {
      lastQuery = i;
      break;
    }
  }
  return messages.map((message, i) => {
    if (i >= lastQuery || message.role !== 'assistant') return message;
    const { reasoning_content: _dropped, ...rest } = message;
    const content = message.content;
    if (typeof content === 'string') return { ...rest, content: withoutReasoning(content, tags) };
    if (Array.isArray(content)) {
      return { ...rest, content: content.map((p) => (p.type === 'text' ? { ...p, text: withoutReasoning(String((p as { text: string }).text), tags) } : p)) };
    }
    return rest;
  });
}

export type ToolChoice = 'auto' | 'none' | 'required' | { type: 'function'; function: { name: string } };

export type ForcedChoice = { kind: 'required' } | { kind: 'named'; name: string };

export interface ToolPlan {
  /** Tools the template renders: none for "none", only the named one for a named choice. */
  rendered: ToolDefinition[];
  /** Tools whose calls are parsed from the reply. */
  parsed: ToolDefinition[];
  forced?: ForcedChoice;
}

/**
 * Applies tool_choice. Refuses "required" without tools, a named choice whose type is not
 * "function", whose name is empty or not declared, and any malformed value.
 */
export function planTools(tools: readonly ToolDefinition[] | undefined, choice: unknown): ToolPlan {
  const declared = tools ?? [];
  if (choice === undefined || choice === null || choice === 'auto') return { rendered: [...declared], parsed: [...declared] };
  if (choice === 'none') return { rendered: [], parsed: [] };
  if (choice === 'required') {
    if (declared.length === 0) throw new ChatRequestError('tool_choice "required" needs at least one tool in tools');
    return { rendered: [...declared], parsed: [...declared], forced: { kind: 'required' } };
  }
  if (typeof choice === 'string') throw new ChatRequestError(`tool_choice must be "none", "auto", "required" or a function object, got "${choice}"`);
  if (!isObject(choice)) throw new ChatRequestError('tool_choice must be a string or an object');
  if (choice.type !== 'function') throw new ChatRequestError(`tool_choice.type must be "function", got ${JSON.stringify(choice.type ?? null)}`);
  const fn = choice.function;
  const name = isObject(fn) ? fn.name : undefined;
  if (typeof name !== 'string' || name === '') throw new ChatRequestError('tool_choice.function.name must be a non-empty string');
  const tool = declared.find((t) => t.function.name === name);
  if (!tool) throw new ChatRequestError(`tool_choice names function "${name}", which is not declared in tools`);
  return { rendered: [tool], parsed: [tool], forced: { kind: 'named', name } };
}

export function forcedInstruction(forced: ForcedChoice): string {
  return forced.kind === 'required'
    ? 'You must respond by calling one or more of the provided functions, not with a plain-text answer.'
    : `You must respond by calling the function "${forced.name}", not with a plain-text answer.`;
}

function appendText(content: ChatMessage['content'], text: string): string | ContentPart[] {
  if (Array.isArray(content)) return [...content, { type: 'text', text }];
  const base = content ?? '';
  return base ? `${base}\n\n${text}` : text;
}

/**
 * Adds `instruction` to the first system message, else to the last user message, else as
 * a new leading system message. Returns new message objects; the input is untouched.
 */
export function placeInstruction(messages: readonly ChatMessage[], instruction: string): ChatMessage[] {
  let target = messages.findIndex((m) => m.role === 'system');
  if (target < 0) {
    for (let i = messages.length - 1; i >= 0 && target < 0; i--) if (messages[i]!.role === 'user') target = i;
  }
  if (target < 0) return [{ role: 'system', content: instruction }, ...messages];
  return messages.map((m, i) => (i === target ? { ...m, content: appendText(m.content, instruction) } : m));
}

/** The thinking-budget aliases, first set wins: ours, then llama-server's two spellings. */
export const THINKING_BUDGET_FIELDS = ['thinking_budget_tokens', 'reasoning_budget_tokens', 'reasoning_budget'] as const;

/** The requested cap on reasoning tokens; undefined (or -1 in the request) for none. */
export function thinkingBudget(body: Partial<Record<(typeof THINKING_BUDGET_FIELDS)[number], unknown>>): number | undefined {
  for (const field of THINKING_BUDGET_FIELDS) {
    const value = body[field];
    if (value === undefined || value === null) continue;
    if (typeof value !== 'number' || !Number.isInteger(value) || value < -1) {
      throw new ChatRequestError(`${field} must be an integer >= -1 (-1 = no limit)`);
    }
    return value === -1 ? undefined : value;
  }
  return undefined;
}

/**
 * History tool calls with their arguments parsed into objects, for templates that
 * serialise them themselves; arguments that are not JSON stay as they are.
 */
export function withObjectArguments(messages: readonly ChatMessage[]): ChatMessage[] {
  return messages.map((message) => {
    if (!Array.isArray(message.tool_calls)) return message;
    const toolCalls = message.tool_calls.map((call: unknown) => {
      if (!isObject(call) || !isObject(call.function) || typeof call.function.arguments !== 'string') return call;
      try {
        return { ...call, function: { ...call.function, arguments: JSON.parse(call.function.arguments) } };
      } catch {
        return call;
      }
    });
    return { ...message, tool_calls: toolCalls };
  });
}
