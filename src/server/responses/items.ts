// Responses API input items: checking what a client sent, and turning a resolved item
// list (no compaction items left, see ./compaction.ts) into the chat messages the
// template renders. Items are kept as the client spelled them (plus an explicit `type`
// on role-only messages), so that stored histories and compaction capsules replay them
// unchanged.
import type { ChatMessage, ContentPart } from '../../chat/template.js';
import { badRequest } from '../errors.js';

export type Item = { type: string; [key: string]: unknown };

/** Marks the message a compaction capsule's summary replays as (see ./compaction.ts). */
export const SUMMARY_MARK = 'mlxcel_compaction_summary';

const ROLES = ['user', 'assistant', 'system', 'developer'];

/** Built-in tool-call items: produced by OpenAI's hosted tools, which this server has none of. */
const HOSTED_CALL_ITEMS = new Set([
  'file_search_call',
  'web_search_call',
  'computer_call',
  'computer_call_output',
  'code_interpreter_call',
  'image_generation_call',
  'local_shell_call',
  'local_shell_call_output',
  'shell_call',
  'shell_call_output',
  'apply_patch_call',
  'apply_patch_call_output',
  'mcp_call',
  'mcp_list_tools',
  'mcp_approval_request',
  'mcp_approval_response',
  'custom_tool_call',
  'custom_tool_call_output',
]);

/** `input` as items: a string is one user message; each item is checked. */
export function normalizeInput(input: unknown, path = 'input'): Item[] {
  if (typeof input === 'string') return [{ type: 'message', role: 'user', content: input }];
  if (!Array.isArray(input)) throw badRequest(`${path} must be a string or an array of items`);
  return input.map((item, i) => normalizeItem(item, `${path}[${i}]`));
}

function normalizeItem(raw: unknown, path: string): Item {
  if (!isObject(raw)) throw badRequest(`${path} must be an object`);
  // An item without a type that carries a role is a message (the SDK's EasyInputMessage).
  const type = raw.type ?? (raw.role !== undefined ? 'message' : undefined);
  if (typeof type !== 'string') throw badRequest(`${path}.type is required`);
  const item: Item = { ...raw, type };
  switch (type) {
    case 'message':
      checkMessage(item, path);
      break;
    case 'function_call':
      requireString(item, 'call_id', path);
      requireString(item, 'name', path);
      requireString(item, 'arguments', path);
      break;
    case 'function_call_output':
      requireString(item, 'call_id', path);
      if (typeof item.output !== 'string') {
        if (!Array.isArray(item.output)) throw badRequest(`${path}.output must be a string or an array of content parts`);
        item.output.forEach((part, i) => checkPart(part, `${path}.output[${i}]`, 'user'));
      }
      break;
    case 'reasoning':
      if (item.content !== undefined && item.content !== null && !Array.isArray(item.content)) {
        throw badRequest(`${path}.content must be an array`);
      }
      break;
    case 'compaction':
      requireString(item, 'encrypted_content', path);
      break;
    case 'item_reference':
      throw badRequest(`${path}: item_reference items are not supported; send the item itself`);
    default:
      if (HOSTED_CALL_ITEMS.has(type)) throw badRequest(`${path}: "${type}" items belong to built-in tools, which this server does not provide`);
      throw badRequest(`${path}.type "${type}" is not a supported input item type`);
  }
  return item;
}

function checkMessage(item: Item, path: string): void {
  const role = item.role;
  if (typeof role !== 'string' || !ROLES.includes(role)) throw badRequest(`${path}.role must be one of: ${ROLES.join(', ')}`);
  const { content } = item;
  if (typeof content === 'string') return;
  if (!Array.isArray(content)) throw badRequest(`${path}.content must be a string or an array of content parts`);
  content.forEach((part, i) => checkPart(part, `${path}.content[${i}]`, role));
}

function checkPart(part: unknown, path: string, role: string): void {
  if (!isObject(part)) throw badRequest(`${path} must be an object`);
  switch (part.type) {
    // Chat-completions parts ("text", "image_url") are accepted too: clients moving from
    // /v1/chat/completions send them, and the REST reference reuses that schema.
    case 'input_text':
    case 'output_text':
    case 'text':
      requireString(part, 'text', path);
      return;
    case 'refusal':
      requireString(part, 'refusal', path);
      return;
    case 'input_image':
      if (role === 'assistant') break;
      if (typeof part.image_url !== 'string') {
        throw badRequest(`${path}: input_image needs an image_url; file_id references need the Files API, which this server does not provide`);
      }
      return;
    case 'image_url': {
      if (role === 'assistant') break;
      const url = isObject(part.image_url) ? part.image_url.url : part.image_url;
      if (typeof url !== 'string') throw badRequest(`${path}.image_url must be a URL string or {"url": ...}`);
      return;
    }
    case 'input_file':
      throw badRequest(`${path}: input_file content parts are not supported`);
    default:
      throw badRequest(`${path}.type "${String(part.type)}" is not a supported content part type`);
  }
  throw badRequest(`${path}.type "${String(part.type)}" is not allowed in an assistant message`);
}

export function isInstruction(item: Item): boolean {
  return item.type === 'message' && (item.role === 'system' || item.role === 'developer');
}

export function isUserMessage(item: Item): boolean {
  return item.type === 'message' && item.role === 'user';
}

/**
 * Resolved items (no compaction items) as chat messages: developer becomes system (chat
 * templates know no developer role), function calls join the assistant message they
 * follow as tool_calls, outputs become tool messages, and a reasoning item becomes the
 * next assistant message's reasoning_content.
 */
export function itemsToMessages(items: Item[]): ChatMessage[] {
  const messages: ChatMessage[] = [];
  const callNames = new Map<string, string>();
  let reasoning: string | undefined;
  // The assistant message function calls attach to: the previous item's, if it was one.
  let assistant: ChatMessage | undefined;
  // A replayed summary merges into the user message right after it, so templates that
  // insist on alternating roles still accept the history.
  let summary: ChatMessage | undefined;
  for (const item of items) {
    const follows = { assistant, summary };
    assistant = undefined;
    summary = undefined;
    switch (item.type) {
      case 'message': {
        const role = item.role === 'developer' ? 'system' : (item.role as string);
        if (role === 'assistant') {
          assistant = { role, content: assistantText(item.content) };
          if (reasoning !== undefined) assistant.reasoning_content = reasoning;
          reasoning = undefined;
          messages.push(assistant);
          break;
        }
        const content = userContent(item.content);
        if (role === 'user' && follows.summary) {
          follows.summary.content = [...toParts(follows.summary.content), ...toParts(content)];
          break;
        }
        const message: ChatMessage = { role, content };
        messages.push(message);
        if (item[SUMMARY_MARK] === true) summary = message;
        break;
      }
      case 'function_call': {
        const name = item.name as string;
        callNames.set(item.call_id as string, name);
        // Arguments stay the JSON text the client sent, as on chat completions; the chat
        // pipeline parses them for templates that serialize arguments themselves.
        const call = { id: item.call_id, type: 'function', function: { name, arguments: item.arguments } };
        assistant = follows.assistant;
        if (!assistant) {
          assistant = { role: 'assistant', content: '' };
          if (reasoning !== undefined) assistant.reasoning_content = reasoning;
          reasoning = undefined;
          messages.push(assistant);
        }
        assistant.tool_calls = [...((assistant.tool_calls as unknown[] | undefined) ?? []), call];
        break;
      }
      case 'function_call_output': {
        const callId = item.call_id as string;
        const output = typeof item.output === 'string' ? item.output : userContent(item.output);
        messages.push({ role: 'tool', tool_call_id: callId, name: callNames.get(callId), content: output });
        break;
      }
      case 'reasoning':
        reasoning = reasoningText(item);
        break;
      default:
        // Compaction items are expanded before this point; anything else was refused.
        throw new Error(`unexpected ${item.type} item after input resolution`);
    }
  }
  return messages;
}

function userContent(content: unknown): string | ContentPart[] {
  if (typeof content === 'string') return content;
  return (content as Array<Record<string, unknown>>).map((part): ContentPart => {
    if (part.type === 'input_image') {
      const imageUrl: Record<string, unknown> = { url: part.image_url };
      if (part.detail !== undefined) imageUrl.detail = part.detail;
      return { type: 'image_url', image_url: imageUrl };
    }
    if (part.type === 'image_url') return { type: 'image_url', image_url: isObject(part.image_url) ? part.image_url : { url: part.image_url } };
    return { type: 'text', text: String(part.text ?? part.refusal) };
  });
}

/** An assistant turn's text: its output_text and refusal parts, in order. */
function assistantText(content: unknown): string {
  if (typeof content === 'string') return content;
  return (content as Array<Record<string, unknown>>).map((part) => String(part.text ?? part.refusal ?? '')).join('');
}

function toParts(content: ChatMessage['content']): ContentPart[] {
  if (Array.isArray(content)) return content;
  return content ? [{ type: 'text', text: content }] : [];
}

function reasoningText(item: Item): string {
  const content = (item.content as Array<Record<string, unknown>> | null | undefined) ?? [];
  return content.map((part) => (typeof part.text === 'string' ? part.text : '')).join('');
}

function requireString(obj: Record<string, unknown>, key: string, path: string): void {
  if (typeof obj[key] !== 'string') throw badRequest(`${path}.${key} must be a string`);
}

export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
