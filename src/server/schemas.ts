// Request body schemas, compiled once at startup. A body that passes is trusted as its
// TypeScript type from then on. Unknown fields are allowed: OpenAI and llama.cpp clients
// send many options this server does not act on.
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import type { ChatMessage } from '../chat/template.js';
import type { ToolDefinition } from '../chat/tools/types.js';
import { badRequest } from './errors.js';

type Opt<T> = T | null | undefined;

export interface SamplingFields {
  temperature?: Opt<number>;
  top_p?: Opt<number>;
  top_k?: Opt<number>;
  seed?: Opt<number>;
  stop?: Opt<string | string[]>;
  stream?: Opt<boolean>;
  /** Structured output; checked by ./response-format.ts. */
  response_format?: unknown;
}

export interface OpenAIStreamFields {
  stream_options?: Opt<{ include_usage?: Opt<boolean> }>;
  max_tokens?: Opt<number>;
  max_completion_tokens?: Opt<number>;
  n?: Opt<number>;
}

export interface ChatCompletionBody extends SamplingFields, OpenAIStreamFields {
  messages: ChatMessage[];
  chat_template_kwargs?: Opt<Record<string, unknown>>;
  tools?: Opt<ToolDefinition[]>;
  /** Checked by src/chat/chat-request.ts, which words the 400s the reference lists. */
  tool_choice?: unknown;
  parallel_tool_calls?: Opt<boolean>;
  /** Raw-JSON clients imitating the OpenAI SDK's extra_body (chat_template_kwargs shapes). */
  extra_body?: Opt<Record<string, unknown>>;
  /** Thinking-budget aliases (src/chat/chat-request.ts): -1 = no limit. */
  thinking_budget_tokens?: Opt<number>;
  reasoning_budget_tokens?: Opt<number>;
  reasoning_budget?: Opt<number>;
  /** Forced before the closing reasoning tag when the budget is spent (llama-server's field). */
  reasoning_budget_message?: Opt<string>;
}

export interface CompletionBody extends SamplingFields, OpenAIStreamFields {
  /** One prompt: a string, an array holding one string, or token ids. */
  prompt: string | Array<string | number>;
}

export interface NativeCompletionBody extends SamplingFields {
  prompt: string | number[];
  /** -1 = until the context is full. */
  n_predict?: Opt<number>;
}

export interface TokenizeBody {
  content: string;
  add_special?: Opt<boolean>;
}

export interface DetokenizeBody {
  tokens: number[];
}

const nullable = (...types: string[]) => ({ type: [...types, 'null'] });

const samplingProperties = {
  temperature: { ...nullable('number'), minimum: 0 },
  top_p: { ...nullable('number'), minimum: 0, maximum: 1 },
  top_k: nullable('integer'),
  seed: nullable('integer'),
  stop: { ...nullable('string', 'array'), items: { type: 'string' } },
  stream: nullable('boolean'),
};

const openAIProperties = {
  ...samplingProperties,
  stream_options: { ...nullable('object'), properties: { include_usage: nullable('boolean') } },
  max_tokens: { ...nullable('integer'), minimum: 1 },
  max_completion_tokens: { ...nullable('integer'), minimum: 1 },
  n: { ...nullable('integer'), minimum: 1, maximum: 1 },
};

const textPart = {
  type: 'object',
  required: ['type'],
  properties: { type: { enum: ['text'] }, text: { type: 'string' } },
  // Conditional so that an image part is reported for its type, not for a missing text.
  if: { properties: { type: { const: 'text' } } },
  then: { required: ['text'] },
};

const ajv = new Ajv({ allowUnionTypes: true });

export const validateChatCompletion = ajv.compile<ChatCompletionBody>({
  type: 'object',
  required: ['messages'],
  properties: {
    ...openAIProperties,
    messages: {
      type: 'array',
      minItems: 1,
      items: {
        type: 'object',
        required: ['role'],
        properties: {
          role: { type: 'string' },
          content: { ...nullable('string', 'array'), items: textPart },
          name: { type: 'string' },
        },
      },
    },
    chat_template_kwargs: nullable('object'),
    tools: {
      ...nullable('array'),
      items: {
        type: 'object',
        required: ['type', 'function'],
        properties: {
          type: { enum: ['function'] },
          function: {
            type: 'object',
            required: ['name'],
            properties: { name: { type: 'string', minLength: 1 }, description: { type: 'string' }, parameters: { type: 'object' } },
          },
        },
      },
    },
    parallel_tool_calls: nullable('boolean'),
    extra_body: nullable('object'),
    thinking_budget_tokens: nullable('integer'),
    reasoning_budget_tokens: nullable('integer'),
    reasoning_budget: nullable('integer'),
    reasoning_budget_message: nullable('string'),
  },
});

export const validateCompletion = ajv.compile<CompletionBody>({
  type: 'object',
  required: ['prompt'],
  properties: {
    ...openAIProperties,
    prompt: { type: ['string', 'array'], minItems: 1, items: { type: ['string', 'integer'] } },
  },
});

export const validateNativeCompletion = ajv.compile<NativeCompletionBody>({
  type: 'object',
  required: ['prompt'],
  properties: {
    ...samplingProperties,
    prompt: { type: ['string', 'array'], items: { type: 'integer' } },
    n_predict: { ...nullable('integer'), minimum: -1 },
  },
});

export const validateTokenize = ajv.compile<TokenizeBody>({
  type: 'object',
  required: ['content'],
  properties: { content: { type: 'string' }, add_special: nullable('boolean') },
});

export const validateDetokenize = ajv.compile<DetokenizeBody>({
  type: 'object',
  required: ['tokens'],
  properties: { tokens: { type: 'array', items: { type: 'integer' } } },
});

/** Returns the body typed, or throws a 400 whose message names the offending field. */
export function validateBody<T>(validate: ValidateFunction<T>, body: unknown): T {
  if (validate(body)) return body;
  throw badRequest(describeError(validate.errors![0]!));
}

function describeError(error: ErrorObject): string {
  const field = fieldPath(error.instancePath);
  const params = error.params as Record<string, unknown>;
  switch (error.keyword) {
    case 'required': {
      const missing = String(params.missingProperty);
      return `${field ? `${field}.${missing}` : missing} is required`;
    }
    case 'type': {
      // "temperature must be number": null is accepted too but is not worth advertising.
      const types = [params.type].flat().filter((t) => t !== 'null');
      return `${field || 'request body'} must be ${types.join(' or ')}`;
    }
    case 'enum':
      return `${field} must be one of: ${(params.allowedValues as unknown[]).join(', ')}`;
    default:
      return `${field || 'request body'} ${error.message}`;
  }
}

/** "/messages/0/content" -> "messages[0].content" */
function fieldPath(instancePath: string): string {
  return instancePath
    .split('/')
    .slice(1)
    .map((part) => part.replace(/~1/g, '/').replace(/~0/g, '~'))
    .reduce((path, part) => (/^\d+$/.test(part) ? `${path}[${part}]` : path ? `${path}.${part}` : part), '');
}
