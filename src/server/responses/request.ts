// Request bodies of the Responses routes: their JSON schemas, the refusals the REST reference
// lists (built-in tools, truncation, background), and the translation of tools,
// tool_choice and text.format into the chat pipeline's terms (../chat-turn.ts).
import { Ajv } from 'ajv';
import type { ChatTurnRequest, ToolChoice, ToolDefinition } from '../chat-turn.js';
import { badRequest } from '../errors.js';
import { isObject } from './items.js';
import { MAX_TOP_LOGPROBS } from '../../engine/types.js';
import { extendedSamplingProperties, stopStrings, validateBody, type SamplingFields } from '../schemas.js';
import { MAX_SUMMARY_TOKENS } from './compaction.js';

type Opt<T> = T | null | undefined;

export interface ResponsesBody extends SamplingFields {
  model?: Opt<string>;
  input?: Opt<string | unknown[]>;
  instructions?: Opt<string>;
  max_output_tokens?: Opt<number>;
  store?: Opt<boolean>;
  previous_response_id?: Opt<string>;
  conversation?: Opt<string | { id: string }>;
  tools?: Opt<Array<Record<string, unknown>>>;
  tool_choice?: Opt<string | Record<string, unknown>>;
  text?: Opt<{ format?: Opt<Record<string, unknown>>; verbosity?: Opt<string> }>;
  reasoning?: Opt<{ effort?: Opt<string>; summary?: Opt<string> }>;
  truncation?: Opt<string>;
  background?: Opt<boolean>;
  context_management?: Opt<Array<{ type: 'compaction'; compact_threshold: number }>>;
  thinking_budget_tokens?: Opt<number>;
  metadata?: Opt<Record<string, unknown>>;
  include?: Opt<string[]>;
  top_logprobs?: Opt<number>;
  parallel_tool_calls?: Opt<boolean>;
  chat_template_kwargs?: Opt<Record<string, unknown>>;
}

export interface CompactBody {
  model?: Opt<string>;
  input: string | unknown[];
  instructions?: Opt<string>;
  keep_tokens?: Opt<number>;
  max_output_tokens?: Opt<number>;
  tools?: Opt<Array<Record<string, unknown>>>;
  stream?: unknown;
  previous_response_id?: unknown;
  conversation?: unknown;
}

const nullable = (...types: string[]) => ({ type: [...types, 'null'] });

const commonProperties = {
  model: nullable('string'),
  input: nullable('string', 'array'),
  instructions: nullable('string'),
  previous_response_id: nullable('string'),
  conversation: {
    anyOf: [{ type: 'string', minLength: 1 }, { type: 'object', required: ['id'], properties: { id: { type: 'string', minLength: 1 } } }, { type: 'null' }],
  },
  tools: { ...nullable('array'), items: { type: 'object', required: ['type'], properties: { type: { type: 'string' } } } },
  tool_choice: nullable('string', 'object'),
  text: { ...nullable('object'), properties: { format: { ...nullable('object'), required: ['type'], properties: { type: { type: 'string' } } } } },
  reasoning: { ...nullable('object'), properties: { effort: nullable('string'), summary: nullable('string') } },
  truncation: nullable('string'),
  thinking_budget_tokens: { ...nullable('integer'), minimum: -1 },
  chat_template_kwargs: nullable('object'),
};

/** OpenAI's `include` values; only message.output_text.logprobs adds anything here (the
 *  others name hosted tools, images or encrypted reasoning, which this server has not). */
const INCLUDABLE = [
  'message.output_text.logprobs',
  'file_search_call.results',
  'web_search_call.results',
  'web_search_call.action.sources',
  'message.input_image.image_url',
  'computer_call_output.output.image_url',
  'code_interpreter_call.outputs',
  'reasoning.encrypted_content',
];

/** The top-logprob count when the request includes output_text logprobs, else undefined. */
export function responsesLogprobCount(body: ResponsesBody): number | undefined {
  return body.include?.includes('message.output_text.logprobs') ? (body.top_logprobs ?? 0) : undefined;
}

const ajv = new Ajv({ allowUnionTypes: true });

const validateResponses = ajv.compile<ResponsesBody>({
  type: 'object',
  properties: {
    ...commonProperties,
    // The mlxcel/vLLM sampler extensions (min_p, penalties, DRY, XTC, loop detection,
    // cache_prompt), as on chat completions: the body is the turn's sampling fields.
    ...extendedSamplingProperties,
    temperature: { ...nullable('number'), minimum: 0, maximum: 2 },
    top_p: { ...nullable('number'), minimum: 0, maximum: 1 },
    top_k: nullable('integer'),
    seed: nullable('integer'),
    stop: stopStrings('string', 'array'),
    stream: nullable('boolean'),
    store: nullable('boolean'),
    include: { ...nullable('array'), items: { enum: INCLUDABLE } },
    top_logprobs: { ...nullable('integer'), minimum: 0, maximum: MAX_TOP_LOGPROBS },
    background: nullable('boolean'),
    max_output_tokens: { ...nullable('integer'), minimum: 1 },
    metadata: nullable('object'),
    parallel_tool_calls: nullable('boolean'),
    context_management: {
      ...nullable('array'),
      items: {
        type: 'object',
        required: ['type', 'compact_threshold'],
        properties: { type: { enum: ['compaction'] }, compact_threshold: { type: 'integer', minimum: 1, maximum: 100_000_000 } },
      },
    },
  },
});

const validateCompact = ajv.compile<CompactBody>({
  type: 'object',
  required: ['input'],
  properties: {
    model: nullable('string'),
    input: { type: ['string', 'array'] },
    instructions: nullable('string'),
    tools: commonProperties.tools,
    keep_tokens: { ...nullable('integer'), minimum: 1 },
    max_output_tokens: { ...nullable('integer'), minimum: 1, maximum: MAX_SUMMARY_TOKENS },
  },
});

/** POST /v1/responses and /v1/responses/input_tokens (which ignores the output fields). */
export function parseResponsesBody(body: unknown): ResponsesBody {
  const parsed = validateBody(validateResponses, body);
  if (parsed.background === true) throw badRequest('background responses are not supported; send background: false or omit it');
  if (parsed.truncation != null && parsed.truncation !== 'disabled') {
    throw badRequest(`truncation "${parsed.truncation}" is not supported; only "disabled" is`);
  }
  if (parsed.previous_response_id != null && parsed.conversation != null) {
    throw badRequest('previous_response_id and conversation cannot be used together');
  }
  return parsed;
}

/** POST /v1/responses/compact: the history comes in full, and nothing is stored or streamed. */
export function parseCompactBody(body: unknown): CompactBody {
  const parsed = validateBody(validateCompact, body);
  if (parsed.stream != null && parsed.stream !== false) throw badRequest('compaction does not stream; omit stream');
  if (parsed.previous_response_id != null) throw badRequest('compaction takes the full history in input; previous_response_id is not accepted');
  if (parsed.conversation != null) throw badRequest('compaction takes the full history in input; conversation is not accepted');
  return parsed;
}

/** OpenAI's hosted tools: a local server cannot run them. */
const BUILT_IN_TOOLS = [
  'web_search',
  'web_search_preview',
  'file_search',
  'computer_use_preview',
  'computer_use',
  'code_interpreter',
  'image_generation',
  'mcp',
  'custom',
  'apply_patch',
  'function_shell',
  'shell',
  'local_shell',
];

function isBuiltIn(type: string): boolean {
  // Dated variants such as web_search_preview_2025_03_11 or web_search_2025_08_26.
  return BUILT_IN_TOOLS.some((name) => type === name || type.startsWith(`${name}_20`));
}

/** Responses function tools (flat) as chat-completions tools (nested under `function`). */
export function chatTools(tools: ResponsesBody['tools']): ToolDefinition[] {
  return (tools ?? []).map((tool, i) => {
    const type = tool.type as string;
    if (type !== 'function') {
      if (isBuiltIn(type)) throw badRequest(`tools[${i}]: built-in tool type "${type}" is not supported; only function tools are`);
      throw badRequest(`tools[${i}].type "${type}" is not supported; only function tools are`);
    }
    if (typeof tool.name !== 'string' || !tool.name) throw badRequest(`tools[${i}].name must be a non-empty string`);
    if (tool.parameters != null && !isObject(tool.parameters)) throw badRequest(`tools[${i}].parameters must be an object`);
    // Key order matters: templates serialize the tool with tojson, in insertion order.
    // `strict` is an API flag about schema adherence, not text for the model, so it is
    // not rendered (the OpenAI SDK always sends it).
    const fn: ToolDefinition['function'] = { name: tool.name };
    if (typeof tool.description === 'string') fn.description = tool.description;
    if (isObject(tool.parameters)) fn.parameters = tool.parameters;
    return { type: 'function', function: fn };
  });
}

export function chatToolChoice(choice: ResponsesBody['tool_choice']): ToolChoice | undefined {
  if (choice == null) return undefined;
  if (typeof choice === 'string') {
    if (choice === 'auto' || choice === 'none' || choice === 'required') return choice;
    throw badRequest('tool_choice must be "auto", "none", "required" or {"type": "function", "name": ...}');
  }
  if (choice.type === 'function') {
    if (typeof choice.name !== 'string') throw badRequest('tool_choice.name must be a string');
    return { type: 'function', function: { name: choice.name } };
  }
  const type = String(choice.type);
  if (isBuiltIn(type)) throw badRequest(`tool_choice: built-in tool type "${type}" is not supported`);
  throw badRequest(`tool_choice.type "${type}" is not supported; use "function"`);
}

/** text.format as a chat-completions response_format, if the request asks for a JSON schema. */
export function responseFormat(text: ResponsesBody['text']): ChatTurnRequest['response_format'] {
  const format = text?.format;
  if (!format || format.type === 'text') return undefined;
  if (format.type === 'json_object') throw badRequest('text.format type "json_object" is not supported; use "json_schema"');
  if (format.type !== 'json_schema') throw badRequest(`text.format.type "${String(format.type)}" is not supported`);
  if (!isObject(format.schema)) throw badRequest('text.format.schema must be an object');
  return { type: 'json_schema', json_schema: { name: 'output', schema: format.schema } };
}

/**
 * The reasoning budget: thinking_budget_tokens (-1: no cap, as on chat completions), or 0
 * for reasoning.effort "none", OpenAI's spelling of "do not think".
 */
export function thinkingBudget(body: ResponsesBody): number | undefined {
  if (body.thinking_budget_tokens != null) return body.thinking_budget_tokens === -1 ? undefined : body.thinking_budget_tokens;
  return body.reasoning?.effort === 'none' ? 0 : undefined;
}

/** Request template kwargs; reasoning.effort "none" also turns off templates' thinking switch. */
export function templateKwargs(body: ResponsesBody): Record<string, unknown> | undefined {
  const kwargs = body.chat_template_kwargs ?? undefined;
  return body.reasoning?.effort === 'none' ? { enable_thinking: false, ...kwargs } : kwargs;
}
