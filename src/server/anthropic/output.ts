// Builds an Anthropic `message` from a chat turn's events, and the SSE events that
// stream it: message_start, then per block content_block_start / content_block_delta
// (thinking_delta, text_delta, input_json_delta) / content_block_stop, then
// message_delta (stop_reason, stop_sequence, usage) and message_stop. As for the
// Responses API, sync and streamed requests share the builder, so both agree.
import { randomBytes } from 'node:crypto';
import { completePartialJson } from '../../chat/tool-calls/json-scan.js';
import type { ChatEvent, TurnResult } from '../chat-turn.js';
import type { ApiError } from '../errors.js';

export type StopReason = 'end_turn' | 'max_tokens' | 'stop_sequence' | 'tool_use';

type Block = { type: 'text'; text: string } | { type: 'thinking'; thinking: string; signature: string } | ToolUseBlock;

interface ToolUseBlock {
  type: 'tool_use';
  id: string;
  name: string;
  input: unknown;
}

export interface AnthropicUsage {
  input_tokens: number;
  output_tokens: number;
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
  service_tier: 'standard';
}

export interface AnthropicMessage {
  id: string;
  type: 'message';
  role: 'assistant';
  model: string;
  content: Block[];
  stop_reason: StopReason | null;
  stop_sequence: string | null;
  usage: AnthropicUsage;
}

export type AnthropicEvent = { type: string; [key: string]: unknown };

export const newMessageId = () => `msg_${randomBytes(12).toString('hex')}`;

export class MessageBuilder {
  readonly message: AnthropicMessage;
  /** The block being streamed, and for tool_use blocks the JSON text of its input. */
  private open: { index: number; block: Block; json?: string } | undefined;
  private readonly tools = new Map<number, number>();

  constructor(
    id: string,
    model: string,
    inputTokens: number,
    private readonly send: (event: AnthropicEvent) => void = () => {},
  ) {
    this.message = {
      id,
      type: 'message',
      role: 'assistant',
      model,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: { input_tokens: inputTokens, output_tokens: 0, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, service_tier: 'standard' },
    };
  }

  start(): void {
    this.send({ type: 'message_start', message: this.message });
  }

  push(event: ChatEvent): void {
    switch (event.type) {
      case 'reasoning': {
        const block = this.blockOf('thinking', () => ({ type: 'thinking', thinking: '', signature: '' }));
        block.thinking += event.text;
        this.delta({ type: 'thinking_delta', thinking: event.text });
        return;
      }
      case 'content': {
        const block = this.blockOf('text', () => ({ type: 'text', text: '' }));
        block.text += event.text;
        this.delta({ type: 'text_delta', text: event.text });
        return;
      }
      case 'tool_call': {
        this.close();
        this.openBlock({ type: 'tool_use', id: event.id, name: event.name, input: {} });
        this.open!.json = '';
        this.tools.set(event.index, this.open!.index);
        return;
      }
      case 'tool_arguments': {
        if (this.open?.index !== this.tools.get(event.index)) throw new Error(`arguments for tool call ${event.index} outside its block`);
        this.open!.json += event.delta;
        this.delta({ type: 'input_json_delta', partial_json: event.delta });
        return;
      }
      case 'done':
        this.finish(event.turn);
        return;
    }
  }

  /** Streams the failure in Anthropic's error event; the message is not completed. */
  fail(error: ApiError): void {
    this.send(anthropicError(error));
  }

  private finish(turn: TurnResult): void {
    // Clients read the answer from a text block: a turn without any block still has one.
    if (this.message.content.length === 0) {
      this.close();
      this.openBlock({ type: 'text', text: '' });
    }
    this.close();
    const reason = stopReason(turn);
    this.message.stop_reason = reason;
    this.message.stop_sequence = reason === 'stop_sequence' ? (turn.generation.stopString ?? null) : null;
    // Anthropic counts prompt-cache reads apart from input_tokens.
    const cached = turn.generation.cachedTokens;
    this.message.usage.input_tokens = turn.generation.usage.prompt_tokens - cached;
    this.message.usage.cache_read_input_tokens = cached;
    this.message.usage.output_tokens = turn.generation.usage.completion_tokens;
    this.send({
      type: 'message_delta',
      delta: { stop_reason: this.message.stop_reason, stop_sequence: this.message.stop_sequence },
      usage: { input_tokens: this.message.usage.input_tokens, output_tokens: this.message.usage.output_tokens, cache_read_input_tokens: cached },
    });
    this.send({ type: 'message_stop' });
  }

  /** The open block when it has `type`; otherwise closes it and opens a new one. */
  private blockOf<T extends Block['type']>(type: T, create: () => Extract<Block, { type: T }>): Extract<Block, { type: T }> {
    if (this.open?.block.type !== type) {
      this.close();
      this.openBlock(create());
    }
    return this.open!.block as Extract<Block, { type: T }>;
  }

  private openBlock(block: Block): void {
    const index = this.message.content.length;
    // The start event carries the empty block; its content arrives as deltas.
    this.send({ type: 'content_block_start', index, content_block: { ...block } });
    this.message.content.push(block);
    this.open = { index, block };
  }

  private delta(delta: Record<string, unknown>): void {
    this.send({ type: 'content_block_delta', index: this.open!.index, delta });
  }

  private close(): void {
    const open = this.open;
    if (!open) return;
    if (open.block.type === 'tool_use') open.block.input = parseInput(open.json ?? '');
    this.send({ type: 'content_block_stop', index: open.index });
    this.open = undefined;
  }
}

function stopReason(turn: TurnResult): StopReason {
  if (turn.finish === 'tool_calls') return 'tool_use';
  if (turn.finish === 'length') return 'max_tokens';
  return turn.generation.stopString !== undefined ? 'stop_sequence' : 'end_turn';
}

/**
 * A tool's input is an object; the parser's final arguments are JSON text, cut short when
 * the token limit stopped the call (then the input is what was written of it).
 */
function parseInput(json: string): Record<string, unknown> {
  const value = completePartialJson(json);
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : {};
}

/** HTTP status -> Anthropic's error types (what its SDKs and clients switch on). */
export function anthropicErrorType(status: number): string {
  switch (status) {
    case 400:
      return 'invalid_request_error';
    case 401:
      return 'authentication_error';
    case 403:
      return 'permission_error';
    case 404:
      return 'not_found_error';
    case 413:
      return 'request_too_large';
    case 429:
      return 'rate_limit_error';
    case 503:
    case 529:
      return 'overloaded_error';
    default:
      return status >= 500 ? 'api_error' : 'invalid_request_error';
  }
}

/** {"type":"error","error":{"type","message"}}, the envelope on the Messages routes. */
export function anthropicError(error: ApiError): AnthropicEvent {
  return { type: 'error', error: { type: anthropicErrorType(error.status), message: error.message } };
}
