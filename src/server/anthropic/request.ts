// Anthropic Messages request bodies: their schema, and their translation into the chat
// pipeline's turn (../chat-turn.ts): system prompt, content blocks, tools and tool_choice,
// thinking, structured output (output_config.format, or the beta's output_format, as
// chat's response_format json_schema), sampling and stop sequences.
import { Ajv } from 'ajv';
import type { ChatMessage, ContentPart } from '../../chat/template.js';
import type { ChatTurnRequest, ToolChoice, ToolDefinition } from '../chat-turn.js';
import { badRequest } from '../errors.js';
import { isObject } from '../responses/items.js';
import { stopStrings, validateBody, type SamplingFields } from '../schemas.js';

type Opt<T> = T | null | undefined;
type Block = Record<string, unknown> & { type: string };

export interface MessagesBody {
  model?: Opt<string>;
  max_tokens?: number;
  messages: Array<{ role: 'user' | 'assistant'; content: string | Block[] }>;
  system?: Opt<string | Array<{ type: 'text'; text: string }>>;
  stop_sequences?: Opt<string[]>;
  temperature?: Opt<number>;
  top_p?: Opt<number>;
  top_k?: Opt<number>;
  stream?: Opt<boolean>;
  tools?: Opt<Array<Record<string, unknown>>>;
  tool_choice?: Opt<{ type: 'auto' | 'any' | 'tool' | 'none'; name?: string; disable_parallel_tool_use?: boolean }>;
  thinking?: Opt<{ type: 'enabled' | 'disabled' | 'adaptive'; budget_tokens?: number }>;
  /** `effort` is accepted and has no effect here. */
  output_config?: Opt<{ format?: Opt<OutputFormat>; effort?: Opt<string> }>;
  /** The structured-outputs beta's spelling of output_config.format. */
  output_format?: Opt<OutputFormat>;
}

interface OutputFormat {
  type: 'json_schema';
  schema: Record<string, unknown>;
}

const nullable = (...types: string[]) => ({ type: [...types, 'null'] });

const outputFormat = {
  ...nullable('object'),
  required: ['type', 'schema'],
  properties: { type: { enum: ['json_schema'] }, schema: { type: 'object' } },
};

const block = { type: 'object', required: ['type'], properties: { type: { type: 'string' } } };

const messagesProperties = {
  model: nullable('string'),
  messages: {
    type: 'array',
    minItems: 1,
    items: {
      type: 'object',
      required: ['role', 'content'],
      properties: { role: { enum: ['user', 'assistant'] }, content: { type: ['string', 'array'], items: block } },
    },
  },
  system: {
    ...nullable('string', 'array'),
    items: { type: 'object', required: ['type', 'text'], properties: { type: { const: 'text' }, text: { type: 'string' } } },
  },
  tools: { ...nullable('array'), items: { type: 'object' } },
  tool_choice: {
    ...nullable('object'),
    required: ['type'],
    properties: { type: { enum: ['auto', 'any', 'tool', 'none'] }, name: { type: 'string' }, disable_parallel_tool_use: { type: 'boolean' } },
  },
  thinking: {
    ...nullable('object'),
    required: ['type'],
    properties: { type: { enum: ['enabled', 'disabled', 'adaptive'] }, budget_tokens: { type: 'integer', minimum: 0 } },
  },
  output_config: {
    ...nullable('object'),
    properties: { format: outputFormat, effort: { ...nullable('string'), enum: ['low', 'medium', 'high', 'xhigh', 'max', null] } },
  },
  output_format: outputFormat,
};

const ajv = new Ajv({ allowUnionTypes: true });

const validateMessages = ajv.compile<MessagesBody>({
  type: 'object',
  required: ['messages', 'max_tokens'],
  properties: {
    ...messagesProperties,
    max_tokens: { type: 'integer', minimum: 1 },
    stop_sequences: stopStrings('array'),
    temperature: { ...nullable('number'), minimum: 0, maximum: 1 },
    top_p: { ...nullable('number'), minimum: 0, maximum: 1 },
    top_k: { ...nullable('integer'), minimum: 0 },
    stream: nullable('boolean'),
  },
});

const validateCountTokens = ajv.compile<MessagesBody>({ type: 'object', required: ['messages'], properties: messagesProperties });

export const parseMessagesBody = (body: unknown) => validateBody(validateMessages, body);
export const parseCountTokensBody = (body: unknown) => validateBody(validateCountTokens, body);

/** The request as a chat turn (everything but the sampling and the token budget). */
export function chatTurn(body: MessagesBody): ChatTurnRequest {
  const messages: ChatMessage[] = [];
  const system = systemText(body.system);
  if (system) messages.push({ role: 'system', content: system });
  // tool_result blocks carry only the call id; templates that label tool messages want the name.
  const toolNames = new Map<string, string>();
  body.messages.forEach((message, i) => messages.push(...toChatMessages(message, `messages[${i}]`, toolNames)));
  // A final assistant message is a prefilled response, continued; the API refuses one
  // ending in whitespace.
  const final = messages.at(-1);
  if (final?.role === 'assistant' && typeof final.content === 'string' && /\s$/.test(final.content)) {
    throw badRequest('messages: final assistant content cannot end with trailing whitespace');
  }
  const thinking = body.thinking;
  return {
    messages,
    tools: chatTools(body.tools),
    tool_choice: chatToolChoice(body.tool_choice),
    // enable_thinking is the switch templates with optional reasoning read; a budget of 0
    // also closes a block that a template opens regardless.
    chat_template_kwargs: thinking ? { enable_thinking: thinking.type !== 'disabled' } : undefined,
    thinking_budget_tokens: thinking?.type === 'disabled' ? 0 : thinking?.type === 'enabled' ? thinking.budget_tokens : undefined,
    parallel_tool_calls: body.tool_choice?.disable_parallel_tool_use === true ? false : undefined,
    response_format: responseFormat(body),
  };
}

/** The JSON schema the reply must match, as chat's response_format; 400 when set twice. */
function responseFormat(body: MessagesBody): ChatTurnRequest['response_format'] {
  const format = body.output_config?.format;
  if (format && body.output_format) throw badRequest('output_config.format and output_format cannot be combined; set output_config.format');
  const schema = (format ?? body.output_format)?.schema;
  return schema ? { type: 'json_schema', json_schema: { name: 'output', schema } } : undefined;
}

export function samplingFields(body: MessagesBody): SamplingFields {
  return { temperature: body.temperature, top_p: body.top_p, top_k: body.top_k, stop: body.stop_sequences };
}

function systemText(system: MessagesBody['system']): string {
  if (system == null) return '';
  return typeof system === 'string' ? system : system.map((b) => b.text).join('\n');
}

/**
 * One Anthropic message as chat messages. A user message's tool_result blocks become
 * tool messages, ahead of its other content (the API puts them first anyway); an
 * assistant message's tool_use blocks become its tool_calls and its thinking its
 * reasoning_content.
 */
function toChatMessages(message: MessagesBody['messages'][number], path: string, toolNames: Map<string, string>): ChatMessage[] {
  const blocks: Block[] = typeof message.content === 'string' ? [{ type: 'text', text: message.content }] : message.content;
  if (message.role === 'assistant') return [assistantMessage(blocks, path, toolNames)];
  const out: ChatMessage[] = [];
  const parts: ContentPart[] = [];
  blocks.forEach((b, i) => {
    const at = `${path}.content[${i}]`;
    if (b.type === 'tool_result') {
      if (typeof b.tool_use_id !== 'string') throw badRequest(`${at}.tool_use_id must be a string`);
      out.push({ role: 'tool', tool_call_id: b.tool_use_id, name: toolNames.get(b.tool_use_id), content: toolResultContent(b.content, at) });
      return;
    }
    parts.push(userPart(b, at));
  });
  if (parts.length > 0) {
    const text = parts.every((p) => p.type === 'text') ? parts.map((p) => (p as { text: string }).text).join('\n') : undefined;
    out.push({ role: 'user', content: text ?? parts });
  }
  return out;
}

function assistantMessage(blocks: Block[], path: string, toolNames: Map<string, string>): ChatMessage {
  let text = '';
  let reasoning = '';
  const toolCalls: unknown[] = [];
  blocks.forEach((b, i) => {
    const at = `${path}.content[${i}]`;
    switch (b.type) {
      case 'text':
        text += requireString(b, 'text', at);
        return;
      case 'thinking':
        reasoning += requireString(b, 'thinking', at);
        return;
      case 'tool_use':
        if (!isObject(b.input)) throw badRequest(`${at}.input must be an object`);
        const id = requireString(b, 'id', at);
        const name = requireString(b, 'name', at);
        toolNames.set(id, name);
        toolCalls.push({ id, type: 'function', function: { name, arguments: b.input } });
        return;
      // Reasoning the model cannot read back, and server-tool traffic whose tools are
      // dropped (see chatTools): nothing a template could render.
      case 'redacted_thinking':
      case 'server_tool_use':
      case 'web_search_tool_result':
      case 'web_fetch_tool_result':
      case 'code_execution_tool_result':
        return;
      default:
        throw badRequest(`${at}.type "${b.type}" is not supported in an assistant message`);
    }
  });
  const message: ChatMessage = { role: 'assistant', content: text };
  if (reasoning) message.reasoning_content = reasoning;
  if (toolCalls.length > 0) message.tool_calls = toolCalls;
  return message;
}

function userPart(b: Block, at: string): ContentPart {
  if (b.type === 'text') return { type: 'text', text: requireString(b, 'text', at) };
  if (b.type === 'image') return imagePart(b, at);
  throw badRequest(`${at}.type "${b.type}" is not supported in a user message`);
}

/** A tool result's content: text stays text; images (e.g. a screenshot tool) are parts. */
function toolResultContent(content: unknown, at: string): string | ContentPart[] {
  if (content == null) return '';
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) throw badRequest(`${at}.content must be a string or an array of blocks`);
  const parts = content.map((b: unknown, i): ContentPart => {
    if (!isObject(b)) throw badRequest(`${at}.content[${i}] must be an object`);
    const block = b as Block;
    if (block.type === 'text') return { type: 'text', text: requireString(block, 'text', `${at}.content[${i}]`) };
    if (block.type === 'image') return imagePart(block, `${at}.content[${i}]`);
    throw badRequest(`${at}.content[${i}].type "${String(block.type)}" is not supported in a tool result`);
  });
  return parts.every((p) => p.type === 'text') ? parts.map((p) => (p as { text: string }).text).join('\n') : parts;
}

/** Base64 and URL image sources as the chat-completions image_url part. */
function imagePart(b: Block, at: string): ContentPart {
  const source = b.source;
  if (!isObject(source)) throw badRequest(`${at}.source must be an object`);
  if (source.type === 'base64') {
    const mediaType = requireString(source, 'media_type', `${at}.source`);
    const data = requireString(source, 'data', `${at}.source`);
    return { type: 'image_url', image_url: { url: `data:${mediaType};base64,${data}` } };
  }
  if (source.type === 'url') return { type: 'image_url', image_url: { url: requireString(source, 'url', `${at}.source`) } };
  throw badRequest(`${at}.source.type "${String(source.type)}" is not supported; use "base64" or "url"`);
}

/**
 * Client tools (those with an input_schema) as chat tools. Server tools (web_search,
 * code_execution, …) have no input_schema: a local server cannot run them, so they are
 * dropped rather than refused, and the model never sees them.
 */
function chatTools(tools: MessagesBody['tools']): ToolDefinition[] {
  const out: ToolDefinition[] = [];
  (tools ?? []).forEach((tool, i) => {
    if (tool.input_schema === undefined) return;
    if (!isObject(tool.input_schema)) throw badRequest(`tools[${i}].input_schema must be an object`);
    if (typeof tool.name !== 'string' || !tool.name) throw badRequest(`tools[${i}].name must be a non-empty string`);
    // Key order matters: templates serialize the tool with tojson, in insertion order.
    const fn: ToolDefinition['function'] = { name: tool.name };
    if (typeof tool.description === 'string') fn.description = tool.description;
    fn.parameters = tool.input_schema;
    out.push({ type: 'function', function: fn });
  });
  return out;
}

function chatToolChoice(choice: MessagesBody['tool_choice']): ToolChoice | undefined {
  switch (choice?.type) {
    case undefined:
    case 'auto':
      return 'auto';
    case 'none':
      return 'none';
    case 'any':
      return 'required';
    case 'tool':
      if (!choice.name) throw badRequest('tool_choice.name is required when tool_choice.type is "tool"');
      return { type: 'function', function: { name: choice.name } };
  }
}

function requireString(obj: Record<string, unknown>, key: string, at: string): string {
  const value = obj[key];
  if (typeof value !== 'string') throw badRequest(`${at}.${key} must be a string`);
  return value;
}
