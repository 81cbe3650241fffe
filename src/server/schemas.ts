// Request body schemas, compiled once at startup. A body that passes is trusted as its
// TypeScript type from then on. Unknown fields are allowed: OpenAI and llama.cpp clients
// send many options this server does not act on.
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import type { ChatMessage } from '../chat/template.js';
import type { ToolDefinition } from '../chat/tool-calls/types.js';
import { MAX_LOGIT_BIAS_TOKENS, MAX_TOP_LOGPROBS } from '../engine/types.js';
import { MAX_CHOICES } from './choices.js';
import { badRequest } from './errors.js';
import type { LogitBias } from './logit-bias.js';

type Opt<T> = T | null | undefined;

export interface SamplingFields {
  temperature?: Opt<number>;
  top_p?: Opt<number>;
  top_k?: Opt<number>;
  min_p?: Opt<number>;
  p_less?: Opt<boolean>;
  /** vLLM's spelling; llama-server's repeat_penalty/repeat_last_n are accepted too. */
  repetition_penalty?: Opt<number>;
  repetition_context_size?: Opt<number>;
  repeat_penalty?: Opt<number>;
  repeat_last_n?: Opt<number>;
  frequency_penalty?: Opt<number>;
  presence_penalty?: Opt<number>;
  dry_multiplier?: Opt<number>;
  dry_base?: Opt<number>;
  dry_allowed_length?: Opt<number>;
  dry_penalty_last_n?: Opt<number>;
  dry_sequence_breakers?: Opt<number[]>;
  xtc_probability?: Opt<number>;
  xtc_threshold?: Opt<number>;
  seed?: Opt<number>;
  /** Prompt tokens a context shift keeps (llama-server's n_keep; -1 = all). */
  n_keep?: Opt<number>;
  stop?: Opt<string | string[]>;
  stream?: Opt<boolean>;
  /** Loop detection (vLLM's names); see ./loop-policy.ts. */
  max_pattern_size?: Opt<number>;
  min_pattern_size?: Opt<number>;
  min_count?: Opt<number>;
  /** false: prefill cold, donate nothing; also read from extra_body.cache_prompt. */
  cache_prompt?: Opt<boolean>;
  /** llama-server's: every end-of-generation token banned, so generation runs to its limit. */
  ignore_eos?: Opt<boolean>;
  /** llama-server's slot to run in; -1 (or absent) = any. */
  id_slot?: Opt<number>;
  /** Raw-JSON clients imitating the OpenAI SDK's extra_body (cache_prompt, chat_template_kwargs). */
  extra_body?: Opt<Record<string, unknown>>;
  /** Structured output; checked by ./response-format.ts. */
  response_format?: unknown;
}

/** llama-server's structured output, checked by ./response-format.ts: a JSON Schema, or GBNF text ("" is none). */
export interface GrammarFields {
  json_schema?: unknown;
  grammar?: Opt<string>;
}

export interface OpenAIStreamFields {
  stream_options?: Opt<{ include_usage?: Opt<boolean> }>;
  max_tokens?: Opt<number>;
  max_completion_tokens?: Opt<number>;
  n?: Opt<number>;
  /** OpenAI's map of token id (a decimal string) -> bias in [-100, 100]. */
  logit_bias?: Opt<Record<string, number>>;
  /** llama-server's: a stream sends prompt_progress chunks while the prompt is prefilled. */
  return_progress?: Opt<boolean>;
}

export interface ChatCompletionBody extends SamplingFields, GrammarFields, OpenAIStreamFields, ThinkingBudgetFields {
  messages: ChatMessage[];
  /** llama-server's: false renders the prompt without opening the assistant's turn. */
  add_generation_prompt?: Opt<boolean>;
  chat_template_kwargs?: Opt<Record<string, unknown>>;
  tools?: Opt<ToolDefinition[]>;
  /** Checked by src/chat/chat-request.ts, which words the 400s the REST reference lists. */
  tool_choice?: unknown;
  parallel_tool_calls?: Opt<boolean>;
  /** OpenAI logprobs: `top_logprobs` (0-20) needs `logprobs: true`. */
  logprobs?: Opt<boolean>;
  top_logprobs?: Opt<number>;
  /** llama-server's: the logprobs as prob/top_probs of the distribution each token was drawn from. */
  post_sampling_probs?: Opt<boolean>;
}

/** Chat completions' and /completion's cap on reasoning tokens. */
export interface ThinkingBudgetFields {
  /** Thinking-budget aliases (src/chat/chat-request.ts): -1 = no limit. */
  thinking_budget_tokens?: Opt<number>;
  reasoning_budget_tokens?: Opt<number>;
  reasoning_budget?: Opt<number>;
  /** Forced before the closing reasoning tag when the budget is spent (llama-server's field). */
  reasoning_budget_message?: Opt<string>;
}

export interface CompletionBody extends SamplingFields, GrammarFields, OpenAIStreamFields {
  /** One prompt or a batch of them (./prompt-forms.ts). */
  prompt: string | unknown[];
  /** OpenAI legacy logprobs: the number of top tokens (0-20). */
  logprobs?: Opt<number>;
}

export interface NativeCompletionBody extends SamplingFields, GrammarFields, ThinkingBudgetFields {
  /** One prompt or a batch of them (./prompt-forms.ts). */
  prompt: string | unknown[] | Record<string, unknown>;
  /** Completions per prompt; `n` is accepted as its alias. */
  n_cmpl?: Opt<number>;
  n?: Opt<number>;
  /** -1 = until the context is full. */
  n_predict?: Opt<number>;
  /** llama-server's top-token count per generated token (0 = none, at most 20). */
  n_probs?: Opt<number>;
  /** llama-server's forms: see ./logit-bias.ts. */
  logit_bias?: Opt<LogitBias>;
  /** The generated token ids in the body's `tokens` (a stream's chunks always carry theirs). */
  return_tokens?: Opt<boolean>;
  /** Only these fields of the body; "a/b" reaches into an object (./native/response.ts). */
  response_fields?: Opt<string[]>;
  /** Each streamed chunk carries the timings so far. */
  timings_per_token?: Opt<boolean>;
  /** A stream sends prompt_progress chunks while the prompt is prefilled. */
  return_progress?: Opt<boolean>;
  /** n_probs as `prob`/`top_probs` of the distribution each token was drawn from. */
  post_sampling_probs?: Opt<boolean>;
}

/** llama-server's /infill: /completion's fields, the prompt being the text typed at the cursor. */
export interface InfillBody extends Omit<NativeCompletionBody, 'prompt'> {
  input_prefix?: Opt<string>;
  input_suffix?: Opt<string>;
  /** Other files for context. */
  input_extra?: Opt<Array<{ filename: string; text: string }>>;
  prompt?: Opt<string>;
}

export interface TokenizeBody {
  content: string;
  add_special?: Opt<boolean>;
  /** [{id, piece}] instead of ids (llama-server's). */
  with_pieces?: Opt<boolean>;
}

export interface DetokenizeBody {
  tokens: number[];
}

/** POST /slots/:id?action=save|restore. */
export interface SlotFileBody {
  filename: string;
}

const nullable = (...types: string[]) => ({ type: [...types, 'null'] });

/**
 * Bounds on request fields the server works through on its event loop before generating
 * (the prompt itself is bounded by the context: ./generation-params.ts tokenizeText).
 */
const MAX_STOP_STRINGS = 16;
const MAX_STOP_CHARS = 4096;
/** A logit_bias text key is a word or a phrase, tokenized on the loop. */
const MAX_LOGIT_BIAS_TEXT_CHARS = 256;
const MAX_REASONING_MESSAGE_CHARS = 4096;

/** A stop string or a list of them (OpenAI's `stop`, Anthropic's `stop_sequences`). */
export const stopStrings = (...types: string[]) => ({
  ...nullable(...types),
  ...(types.includes('string') ? { maxLength: MAX_STOP_CHARS } : {}),
  maxItems: MAX_STOP_STRINGS,
  items: { type: 'string', maxLength: MAX_STOP_CHARS },
});

/** ThinkingBudgetFields; values below -1 are refused by src/chat/chat-request.ts's thinkingBudget. */
const thinkingBudgetProperties = {
  thinking_budget_tokens: nullable('integer'),
  reasoning_budget_tokens: nullable('integer'),
  reasoning_budget: nullable('integer'),
  reasoning_budget_message: { ...nullable('string'), maxLength: MAX_REASONING_MESSAGE_CHARS },
};

/**
 * The sampler knobs beyond temperature/top_p/top_k, their ranges as the REST reference and
 * llama-server/vLLM read them. Shared with the Responses schema.
 */
export const extendedSamplingProperties = {
  min_p: { ...nullable('number'), minimum: 0, maximum: 1 },
  p_less: nullable('boolean'),
  repetition_penalty: { ...nullable('number'), exclusiveMinimum: 0 },
  repeat_penalty: { ...nullable('number'), exclusiveMinimum: 0 },
  // -1 = the whole context, 0 = no penalty window (llama-server's repeat_last_n).
  repetition_context_size: { ...nullable('integer'), minimum: -1 },
  repeat_last_n: { ...nullable('integer'), minimum: -1 },
  frequency_penalty: { ...nullable('number'), minimum: -2, maximum: 2 },
  presence_penalty: { ...nullable('number'), minimum: -2, maximum: 2 },
  dry_multiplier: { ...nullable('number'), minimum: 0 },
  dry_base: { ...nullable('number'), minimum: 1 },
  dry_allowed_length: { ...nullable('integer'), minimum: 1 },
  // 0 (the REST reference) or -1 (llama-server) = the whole context.
  dry_penalty_last_n: { ...nullable('integer'), minimum: -1 },
  dry_sequence_breakers: { ...nullable('array'), items: { type: 'integer', minimum: 0 } },
  xtc_probability: { ...nullable('number'), minimum: 0, maximum: 1 },
  xtc_threshold: { ...nullable('number'), minimum: 0, maximum: 1 },
  max_pattern_size: { ...nullable('integer'), minimum: 0 },
  min_pattern_size: { ...nullable('integer'), minimum: 0 },
  // Below 2 disables detection for the request (the REST reference): not an error.
  min_count: nullable('integer'),
  cache_prompt: nullable('boolean'),
  ignore_eos: nullable('boolean'),
  id_slot: { ...nullable('integer'), minimum: -1 },
  extra_body: { ...nullable('object'), properties: { cache_prompt: nullable('boolean') } },
};

const samplingProperties = {
  temperature: { ...nullable('number'), minimum: 0 },
  top_p: { ...nullable('number'), exclusiveMinimum: 0, maximum: 1 },
  // 0 (or >= the vocabulary) keeps every token.
  top_k: { ...nullable('integer'), minimum: 0 },
  seed: nullable('integer'),
  n_keep: { ...nullable('integer'), minimum: -1 },
  stop: stopStrings('string', 'array'),
  stream: nullable('boolean'),
  grammar: nullable('string'),
  ...extendedSamplingProperties,
};

const openAIProperties = {
  ...samplingProperties,
  stream_options: { ...nullable('object'), properties: { include_usage: nullable('boolean') } },
  max_tokens: { ...nullable('integer'), minimum: 1 },
  max_completion_tokens: { ...nullable('integer'), minimum: 1 },
  n: { ...nullable('integer'), minimum: 1, maximum: MAX_CHOICES },
  logit_bias: {
    ...nullable('object'),
    maxProperties: MAX_LOGIT_BIAS_TOKENS,
    propertyNames: { pattern: '^[0-9]+$' },
    additionalProperties: { type: 'number', minimum: -100, maximum: 100 },
  },
  return_progress: nullable('boolean'),
};

/** llama-server's logit_bias value: a number, or false for "never". */
const nativeBiasValue = { anyOf: [{ type: 'number' }, { const: false }] };

/** llama-server's logit_bias: a map keyed by token id or text, or [id or text, bias] pairs. */
const nativeLogitBias = {
  ...nullable('object', 'array'),
  maxProperties: MAX_LOGIT_BIAS_TOKENS,
  propertyNames: { maxLength: MAX_LOGIT_BIAS_TEXT_CHARS },
  additionalProperties: nativeBiasValue,
  maxItems: MAX_LOGIT_BIAS_TOKENS,
  items: {
    type: 'array',
    minItems: 2,
    items: [{ type: ['integer', 'string'], minimum: 0, maxLength: MAX_LOGIT_BIAS_TEXT_CHARS }, nativeBiasValue],
    additionalItems: false,
  },
};

/** The content parts of a chat message: text, and the media parts ./media/parts.ts reads. */
const contentPart = {
  type: 'object',
  required: ['type'],
  properties: { type: { enum: ['text', 'image_url', 'video_url', 'input_audio'] } },
  // Each type's payload is checked only for that type, so a part is reported for its type first.
  allOf: [
    { if: { properties: { type: { const: 'text' } } }, then: { required: ['text'], properties: { text: { type: 'string' } } } },
    {
      if: { properties: { type: { const: 'image_url' } } },
      then: {
        required: ['image_url'],
        properties: {
          image_url: { type: 'object', required: ['url'], properties: { url: { type: 'string' }, detail: { enum: ['auto', 'low', 'high'] } } },
        },
      },
    },
    {
      if: { properties: { type: { const: 'video_url' } } },
      then: {
        required: ['video_url'],
        properties: { video_url: { type: 'object', required: ['url'], properties: { url: { type: 'string' }, fps: { type: 'number', exclusiveMinimum: 0 } } } },
      },
    },
    {
      if: { properties: { type: { const: 'input_audio' } } },
      then: {
        required: ['input_audio'],
        properties: { input_audio: { type: 'object', required: ['data'], properties: { data: { type: 'string' }, format: { type: 'string' } } } },
      },
    },
  ],
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
          content: { ...nullable('string', 'array'), items: contentPart },
          name: { type: 'string' },
        },
      },
    },
    add_generation_prompt: nullable('boolean'),
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
    logprobs: nullable('boolean'),
    top_logprobs: { ...nullable('integer'), minimum: 0, maximum: MAX_TOP_LOGPROBS },
    post_sampling_probs: nullable('boolean'),
    ...thinkingBudgetProperties,
  },
});

export const validateCompletion = ajv.compile<CompletionBody>({
  type: 'object',
  required: ['prompt'],
  properties: {
    ...openAIProperties,
    // Its forms are told apart by ./prompt-forms.ts.
    prompt: { type: ['string', 'array'], minItems: 1 },
    logprobs: { ...nullable('integer'), minimum: 0, maximum: MAX_TOP_LOGPROBS },
  },
});

/** /completion's fields without the prompt, which /infill has in its own form. */
const nativeCompletionProperties = {
  ...samplingProperties,
  n_cmpl: { ...nullable('integer'), minimum: 1, maximum: MAX_CHOICES },
  n: { ...nullable('integer'), minimum: 1, maximum: MAX_CHOICES },
  n_predict: { ...nullable('integer'), minimum: -1 },
  n_probs: { ...nullable('integer'), minimum: 0, maximum: MAX_TOP_LOGPROBS },
  logit_bias: nativeLogitBias,
  return_tokens: nullable('boolean'),
  response_fields: { ...nullable('array'), items: { type: 'string' } },
  timings_per_token: nullable('boolean'),
  return_progress: nullable('boolean'),
  post_sampling_probs: nullable('boolean'),
  ...thinkingBudgetProperties,
};

export const validateNativeCompletion = ajv.compile<NativeCompletionBody>({
  type: 'object',
  required: ['prompt'],
  properties: {
    ...nativeCompletionProperties,
    // Its forms are told apart by ./prompt-forms.ts.
    prompt: { type: ['string', 'array', 'object'] },
  },
});

export const validateInfill = ajv.compile<InfillBody>({
  type: 'object',
  properties: {
    ...nativeCompletionProperties,
    prompt: nullable('string'),
    input_prefix: nullable('string'),
    input_suffix: nullable('string'),
    input_extra: {
      ...nullable('array'),
      items: { type: 'object', required: ['filename', 'text'], properties: { filename: { type: 'string' }, text: { type: 'string' } } },
    },
  },
});

export const validateTokenize = ajv.compile<TokenizeBody>({
  type: 'object',
  required: ['content'],
  properties: { content: { type: 'string' }, add_special: nullable('boolean'), with_pieces: nullable('boolean') },
});

export const validateDetokenize = ajv.compile<DetokenizeBody>({
  type: 'object',
  required: ['tokens'],
  properties: { tokens: { type: 'array', items: { type: 'integer' } } },
});

export const validateSlotFile = ajv.compile<SlotFileBody>({
  type: 'object',
  required: ['filename'],
  properties: { filename: { type: 'string' } },
});

/** An embedding input: text, token ids, ids mixed with text, or a list of those (checked item by item in ./openai/embeddings.ts). */
export type EmbeddingInput = string | Array<string | number> | Array<string | Array<string | number>>;

export interface EmbeddingBody {
  input?: Opt<EmbeddingInput>;
  /** The native routes' name for input, used when input is absent. */
  content?: Opt<EmbeddingInput>;
  model?: Opt<string>;
  encoding_format?: Opt<'float' | 'base64'>;
  dimensions?: Opt<number>;
  embd_normalize?: Opt<number>;
  instruction?: Opt<string>;
}

/** Text, or an array of token ids, text and arrays of those; which arrays form one input is the route's to tell. */
const inputPiece = { type: ['string', 'integer'], minimum: 0 };
const embeddingInput = { type: ['string', 'array', 'null'], items: { type: ['string', 'integer', 'array'], minimum: 0, items: inputPiece } };

export const validateEmbedding = ajv.compile<EmbeddingBody>({
  type: 'object',
  properties: {
    input: embeddingInput,
    content: embeddingInput,
    model: { type: ['string', 'null'] },
    encoding_format: { enum: ['float', 'base64', null] },
    dimensions: { type: ['integer', 'null'] },
    embd_normalize: { type: ['integer', 'null'], minimum: -1 },
    instruction: { type: ['string', 'null'] },
  },
});

export interface RerankBody {
  query?: Opt<string>;
  documents?: Opt<string[]>;
  /** TEI's name for documents: with it (and no documents) the answer is TEI's bare array. */
  texts?: Opt<string[]>;
  top_n?: Opt<number>;
  return_documents?: Opt<boolean>;
  return_text?: Opt<boolean>;
  model?: Opt<string>;
  instruction?: Opt<string>;
}

export const validateRerank = ajv.compile<RerankBody>({
  type: 'object',
  properties: {
    query: { type: ['string', 'null'] },
    documents: { type: ['array', 'null'], items: { type: 'string' } },
    texts: { type: ['array', 'null'], items: { type: 'string' } },
    top_n: { type: ['integer', 'null'] },
    return_documents: { type: ['boolean', 'null'] },
    return_text: { type: ['boolean', 'null'] },
    model: { type: ['string', 'null'] },
    instruction: { type: ['string', 'null'] },
  },
});

/** The multipart fields of /v1/audio/transcriptions and /v1/audio/translations, as strings (the file apart). */
export interface AudioFields {
  model?: string;
  language?: string;
  prompt?: string;
  response_format?: 'json' | 'text' | 'srt' | 'verbose_json' | 'vtt';
  /** One temperature, or several increasing ones separated by commas (the fallback). */
  temperature?: string;
  'timestamp_granularities[]'?: Array<'segment' | 'word'>;
  stream?: 'true' | 'false';
}

export const validateAudioFields = ajv.compile<AudioFields>({
  type: 'object',
  additionalProperties: false,
  properties: {
    model: { type: 'string' },
    language: { type: 'string' },
    prompt: { type: 'string' },
    response_format: { enum: ['json', 'text', 'srt', 'verbose_json', 'vtt'] },
    temperature: { type: 'string', pattern: '^\\s*[0-9.]+(\\s*,\\s*[0-9.]+)*\\s*$' },
    'timestamp_granularities[]': { type: 'array', items: { enum: ['segment', 'word'] } },
    stream: { enum: ['true', 'false'] },
  },
});

/** POST /v1/audio/speech: OpenAI's fields, and a seed for the harmonic source's noise. */
export interface SpeechBody {
  model?: string;
  input: string;
  /** A voice's name, or OpenAI's custom-voice object. */
  voice: string | { id: string };
  /** Checked by the route, which names the formats it encodes. */
  response_format?: string;
  speed?: number;
  /** Accepted and ignored: Kokoro takes no instructions. */
  instructions?: string;
  stream_format?: 'audio' | 'sse';
  seed?: number;
}

export const validateSpeech = ajv.compile<SpeechBody>({
  type: 'object',
  required: ['input', 'voice'],
  properties: {
    model: { type: 'string' },
    input: { type: 'string' },
    voice: { type: ['string', 'object'], required: ['id'], properties: { id: { type: 'string' } } },
    response_format: { type: 'string' },
    speed: { type: 'number' },
    instructions: { type: 'string' },
    stream_format: { enum: ['audio', 'sse'] },
    seed: { type: 'integer', minimum: 0, maximum: 4294967295 },
  },
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
    case 'additionalProperties':
      return `unknown field ${field ? `${field}.` : ''}${String(params.additionalProperty)}`;
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
