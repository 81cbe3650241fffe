// Builds a Responses API `response` object from a chat turn's events, and the typed
// stream events that describe its construction. Sync and streamed requests run the same
// builder (a sync request simply drops the events), so the final object is identical
// either way, and a stored response that is still generating shows its progress.
//
// Event sequence (each with a monotonic sequence_number, starting at 0):
//   response.created, response.in_progress,
//   [mlx.compaction.started, mlx.compaction.completed, output_item.added/done (compaction)],
//   per reasoning item: output_item.added, content_part.added (reasoning_text),
//     response.reasoning_text.delta…, reasoning_text.done, content_part.done, output_item.done;
//   per message: output_item.added, content_part.added (output_text),
//     response.output_text.delta…, output_text.done, content_part.done, output_item.done;
//   per function call: output_item.added, function_call_arguments.delta…,
//     function_call_arguments.done, output_item.done;
//   response.completed | response.incomplete | response.failed.
//
// With logprobs (include: ["message.output_text.logprobs"]), each output_text part lists
// the logprobs of the tokens written into it, and each output_text.delta those of its
// own tokens; a token that wrote nothing (held-back markup) while a message is open gets
// a delta of "" carrying its entry, as chat completions streams do.
import { randomBytes } from 'node:crypto';
import type { GeneratedToken } from '../../chat/text-generation.js';
import type { ChatEvent, TurnResult } from '../chat-turn.js';
import type { ApiError } from '../errors.js';
import type { ChatTokenLogprob } from '../logprobs.js';
import type { Item } from './items.js';

export type ResponseStatus = 'in_progress' | 'completed' | 'incomplete' | 'failed' | 'cancelled';

export interface ResponseUsage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
}

/** The wire object; fields follow OpenAI's `Response`, in its order. */
export interface ResponseObject {
  id: string;
  object: 'response';
  created_at: number;
  status: ResponseStatus;
  background: false;
  completed_at: number | null;
  error: { code: string; message: string } | null;
  incomplete_details: { reason: string } | null;
  instructions: string | null;
  max_output_tokens: number | null;
  max_tool_calls: null;
  model: string;
  output: Item[];
  parallel_tool_calls: boolean;
  previous_response_id: string | null;
  conversation: { id: string } | null;
  reasoning: { effort: string | null; summary: string | null };
  service_tier: 'default';
  store: boolean;
  temperature: number;
  text: { format: Record<string, unknown>; verbosity: string };
  tool_choice: unknown;
  tools: unknown[];
  top_logprobs: number;
  top_p: number;
  truncation: 'disabled';
  usage: ResponseUsage | null;
  user: null;
  metadata: Record<string, unknown>;
}

export type ResponseHead = Omit<ResponseObject, 'id' | 'object' | 'status' | 'background' | 'completed_at' | 'error' | 'incomplete_details' | 'output' | 'usage' | 'max_tool_calls' | 'service_tier' | 'truncation' | 'user'>;

export type StreamEvent = { type: string; sequence_number: number; [key: string]: unknown };

export const newId = (prefix: string) => `${prefix}_${randomBytes(12).toString('hex')}`;

interface OpenPart {
  item: Item;
  index: number;
  part: { type: string; text: string; [key: string]: unknown };
}

export class ResponseBuilder {
  readonly response: ResponseObject;
  private sequence = 0;
  private reasoning: OpenPart | undefined;
  private message: OpenPart | undefined;
  private readonly calls = new Map<number, { item: Item; index: number }>();
  /** Every function call of the turn, open or done. */
  private callCount = 0;

  constructor(
    id: string,
    head: ResponseHead,
    private readonly send: (event: StreamEvent) => void = () => {},
    /** Set when the request includes message.output_text.logprobs. */
    private readonly logprobEntry?: (token: GeneratedToken) => ChatTokenLogprob,
  ) {
    this.response = {
      id,
      object: 'response',
      created_at: head.created_at,
      status: 'in_progress',
      background: false,
      completed_at: null,
      error: null,
      incomplete_details: null,
      instructions: head.instructions,
      max_output_tokens: head.max_output_tokens,
      max_tool_calls: null,
      model: head.model,
      output: [],
      parallel_tool_calls: head.parallel_tool_calls,
      previous_response_id: head.previous_response_id,
      conversation: head.conversation,
      reasoning: head.reasoning,
      service_tier: 'default',
      store: head.store,
      temperature: head.temperature,
      text: head.text,
      tool_choice: head.tool_choice,
      tools: head.tools,
      top_logprobs: head.top_logprobs,
      top_p: head.top_p,
      truncation: 'disabled',
      usage: null,
      user: null,
      metadata: head.metadata,
    };
  }

  get finished(): boolean {
    return this.response.status !== 'in_progress';
  }

  start(): void {
    this.emit('response.created', { response: this.response });
    this.emit('response.in_progress', { response: this.response });
  }

  compactionStarted(inputTokens: number): void {
    this.emit('mlx.compaction.started', { input_tokens: inputTokens });
  }

  /** The compaction item leads the output. */
  compactionCompleted(before: number, after: number, item: Item): void {
    this.emit('mlx.compaction.completed', { input_tokens_before: before, input_tokens_after: after });
    const index = this.response.output.push(item) - 1;
    this.emit('response.output_item.added', { output_index: index, item });
    this.emit('response.output_item.done', { output_index: index, item });
  }

  push(event: ChatEvent): void {
    // A cancelled response is final: tokens still in flight from the engine are dropped.
    if (this.finished) return;
    switch (event.type) {
      case 'reasoning': {
        if (!isOpen(this.reasoning)) this.reasoning = this.openPart('reasoning', 'rs', 'reasoning_text');
        const open = this.reasoning!;
        open.part.text += event.text;
        this.emit('response.reasoning_text.delta', this.partRef(open, { delta: event.text }));
        return;
      }
      case 'content': {
        this.closeReasoning('completed');
        // Text after a function call starts a new message item.
        if (!isOpen(this.message)) this.message = this.openPart('message', 'msg', 'output_text');
        const open = this.message!;
        open.part.text += event.text;
        this.emit('response.output_text.delta', this.partRef(open, { delta: event.text, logprobs: this.logprobs(open, event.token) }));
        return;
      }
      case 'token': {
        const open = this.message;
        if (!this.logprobEntry || !isOpen(open) || isOpen(this.reasoning)) return;
        this.emit('response.output_text.delta', this.partRef(open!, { delta: '', logprobs: this.logprobs(open!, event.token) }));
        return;
      }
      case 'tool_call': {
        // Calls are written one after another: a new one means the previous ones are done.
        this.closeReasoning('completed');
        this.closeMessage('completed');
        this.closeCalls();
        const item: Item = { id: newId('fc'), type: 'function_call', status: 'in_progress', arguments: '', call_id: event.id, name: event.name };
        const index = this.response.output.push(item) - 1;
        this.calls.set(event.index, { item, index });
        this.callCount++;
        this.emit('response.output_item.added', { output_index: index, item });
        return;
      }
      case 'tool_arguments': {
        const call = this.calls.get(event.index);
        if (!call) throw new Error(`arguments for tool call ${event.index}, which never started`);
        call.item.arguments += event.delta;
        this.emit('response.function_call_arguments.delta', { item_id: call.item.id, output_index: call.index, delta: event.delta });
        return;
      }
      case 'done':
        this.finish(event.turn);
        return;
    }
  }

  /** Closes what is open and emits the terminal event. */
  private finish(turn: TurnResult): void {
    const length = turn.finish === 'length';
    this.closeReasoning(length && !this.message && this.callCount === 0 ? 'incomplete' : 'completed');
    // Clients look for an assistant message: a turn without text or calls still has one.
    if (!this.message && this.callCount === 0) this.message = this.openPart('message', 'msg', 'output_text');
    this.closeMessage(length ? 'incomplete' : 'completed');
    // A turn that ends at the limit with a call open was cut off inside it.
    this.closeCalls(length ? 'incomplete' : 'completed');
    const usage = turn.generation.usage;
    this.response.usage = {
      input_tokens: usage.prompt_tokens,
      input_tokens_details: { cached_tokens: turn.generation.cachedTokens },
      output_tokens: usage.completion_tokens,
      output_tokens_details: { reasoning_tokens: turn.reasoningTokens },
      total_tokens: usage.total_tokens,
    };
    if (length) {
      this.response.status = 'incomplete';
      this.response.incomplete_details = { reason: 'max_output_tokens' };
      this.emit('response.incomplete', { response: this.response });
      return;
    }
    this.response.status = 'completed';
    this.response.completed_at = Math.floor(Date.now() / 1000);
    this.emit('response.completed', { response: this.response });
  }

  /** Generation stopped by POST /v1/responses/{id}/cancel: the partial output stays. */
  cancel(): void {
    if (this.finished) return;
    this.closeReasoning('incomplete');
    this.closeMessage('incomplete');
    for (const call of this.calls.values()) call.item.status = 'incomplete';
    this.response.status = 'cancelled';
    // The stream has no cancelled event; a terminal event carrying the status ends it.
    this.emit('response.incomplete', { response: this.response });
  }

  fail(error: ApiError): void {
    if (this.finished) return;
    this.response.status = 'failed';
    this.response.error = { code: error.code ?? error.type, message: error.message };
    this.emit('response.failed', { response: this.response });
  }

  private openPart(kind: 'reasoning' | 'message', prefix: string, partType: string): OpenPart {
    const item: Item =
      kind === 'reasoning'
        ? { id: newId(prefix), type: 'reasoning', summary: [], content: [], status: 'in_progress' }
        : { id: newId(prefix), type: 'message', status: 'in_progress', role: 'assistant', content: [] };
    const index = this.response.output.push(item) - 1;
    this.emit('response.output_item.added', { output_index: index, item });
    const part = partType === 'output_text' ? { type: partType, text: '', annotations: [], logprobs: [] } : { type: partType, text: '' };
    (item.content as unknown[]).push(part);
    const open = { item, index, part };
    this.emit('response.content_part.added', this.partRef(open, { part }));
    return open;
  }

  private closeReasoning(status: 'completed' | 'incomplete'): void {
    const open = this.reasoning;
    if (!open || !isOpen(open)) return;
    this.emit('response.reasoning_text.done', this.partRef(open, { text: open.part.text }));
    this.closePart(open, status);
  }

  private closeMessage(status: 'completed' | 'incomplete'): void {
    const open = this.message;
    if (!open || !isOpen(open)) return;
    this.emit('response.output_text.done', this.partRef(open, { text: open.part.text, logprobs: open.part.logprobs }));
    this.closePart(open, status);
  }

  private closeCalls(status: 'completed' | 'incomplete' = 'completed'): void {
    for (const call of this.calls.values()) {
      if (call.item.status !== 'in_progress') continue;
      call.item.status = status;
      this.emit('response.function_call_arguments.done', {
        item_id: call.item.id,
        output_index: call.index,
        name: call.item.name,
        arguments: call.item.arguments,
      });
      this.emit('response.output_item.done', { output_index: call.index, item: call.item });
    }
  }

  private closePart(open: OpenPart, status: 'completed' | 'incomplete'): void {
    this.emit('response.content_part.done', this.partRef(open, { part: open.part }));
    open.item.status = status;
    this.emit('response.output_item.done', { output_index: open.index, item: open.item });
  }

  /** The token's entry, added to the part's list; [] without logprobs. */
  private logprobs(open: OpenPart, token: GeneratedToken | undefined): ChatTokenLogprob[] {
    if (!this.logprobEntry || !token) return [];
    const entry = this.logprobEntry(token);
    (open.part.logprobs as ChatTokenLogprob[]).push(entry);
    return [entry];
  }

  private partRef(open: OpenPart, extra: Record<string, unknown>): Record<string, unknown> {
    return { item_id: open.item.id, output_index: open.index, content_index: 0, ...extra };
  }

  /** Events are serialized as they are sent, so they carry the state of that moment. */
  /** A stream's `error` event, for a failure after the response ended (it changes nothing in it). */
  streamError(error: ApiError): void {
    this.emit('error', { code: error.code ?? error.type, message: error.message, param: null });
  }

  private emit(type: string, fields: Record<string, unknown>): void {
    this.send({ type, sequence_number: this.sequence++, ...fields });
  }
}

function isOpen(open: OpenPart | undefined): boolean {
  return open !== undefined && open.item.status === 'in_progress';
}
