// The pieces under the Responses and Anthropic routes, without a model: the store flags,
// the bounded store and the two wire builders fed scripted turn events,
// whose streams the official SDKs' own accumulators must rebuild into the very objects
// the sync path returns. The events are scripted, so that function calls are covered
// whatever a random-weight model writes.
import { MessageStream } from '@anthropic-ai/sdk/lib/MessageStream';
import { accumulateResponse } from 'openai/lib/responses/ResponseAccumulator';
import { describe, expect, it } from 'vitest';
import { MessageBuilder, type AnthropicEvent } from '../src/server/anthropic/output.js';
import { parseCli } from '../src/cli-options.js';
import { BoundedStore } from '../src/server/stores/bounded-store.js';
import type { ChatEvent, TurnResult } from '../src/server/chat-turn.js';
import { ResponseBuilder, type StreamEvent } from '../src/server/responses/output.js';

describe('store flags', () => {
  const parse = (argv: string[], env: Record<string, string> = {}) => parseCli(argv, env, '/m');

  it('are read from the command line and their LLAMA_ARG_* variables, the flag winning', () => {
    const flags = ['--responses-store-max-entries', '0', '--responses-store-ttl-secs', '60', '--conversation-store-max-entries', '7', '--conversation-store-ttl-secs', '0'];
    expect(parse(flags)).toMatchObject({
      options: { responsesStoreMaxEntries: 0, responsesStoreTtlSecs: 60, conversationStoreMaxEntries: 7, conversationStoreTtlSecs: 0 },
    });
    const env = {
      LLAMA_ARG_RESPONSES_STORE_MAX_ENTRIES: '5',
      LLAMA_ARG_RESPONSES_STORE_TTL_SECS: '6',
      LLAMA_ARG_CONVERSATION_STORE_MAX_ENTRIES: '8',
      LLAMA_ARG_CONVERSATION_STORE_TTL_SECS: '9',
    };
    expect(parse([], env)).toMatchObject({
      options: { responsesStoreMaxEntries: 5, responsesStoreTtlSecs: 6, conversationStoreMaxEntries: 8, conversationStoreTtlSecs: 9 },
    });
    expect(parse(['--responses-store-max-entries', '2'], env)).toMatchObject({ options: { responsesStoreMaxEntries: 2 } });
    expect(() => parse(['--responses-store-ttl-secs', '-1'])).toThrow(/--responses-store-ttl-secs must be an integer/);
  });

  it('--store and --shutdown-grace-secs, and their MLXCEL_* variables', () => {
    expect(parse(['--store', 'sqlite:/data/r.db', '--shutdown-grace-secs', '5'])).toMatchObject({
      options: { storeSpec: { kind: 'sqlite', path: '/data/r.db' }, shutdownGraceSecs: 5 },
    });
    expect(parse([], { MLXCEL_STORE: 'redis://cache:6379', MLXCEL_SHUTDOWN_GRACE_SECS: '0' })).toMatchObject({
      options: { storeSpec: { kind: 'redis', url: 'redis://cache:6379' }, shutdownGraceSecs: 0 },
    });
    const defaults = parse([]);
    expect(defaults.kind === 'serve' && [defaults.options.storeSpec, defaults.options.shutdownGraceSecs]).toEqual([undefined, undefined]);
    expect(() => parse(['--store', 'postgres://db'])).toThrow('--store must be memory | sqlite:PATH | redis://[:PASSWORD@]HOST[:PORT][/DB], got "postgres://db"');
    expect(() => parse(['--shutdown-grace-secs', '-1'])).toThrow(/--shutdown-grace-secs must be an integer/);
  });
});

describe('BoundedStore', () => {
  it('evicts the least recently written entry over the cap', () => {
    const store = new BoundedStore<number>({ maxEntries: 2, ttlSecs: 0 });
    store.set('a', 1);
    store.set('b', 2);
    store.set('a', 3); // rewritten: now the newest
    store.set('c', 4);
    expect([store.get('a'), store.get('b'), store.get('c')]).toEqual([3, undefined, 4]);
    expect(store.size).toBe(2);
  });

  it('expires entries a TTL after their last write', () => {
    let now = 0;
    const store = new BoundedStore<string>({ maxEntries: 10, ttlSecs: 60 }, () => now);
    store.set('x', 'v');
    now = 59_000;
    expect(store.get('x')).toBe('v');
    store.set('x', 'w');
    now = 118_000;
    expect(store.get('x')).toBe('w');
    now = 119_000;
    expect(store.get('x')).toBeUndefined();
    expect(store.size).toBe(0);
  });

  it('keeps nothing with a cap of 0', () => {
    const store = new BoundedStore<number>({ maxEntries: 0, ttlSecs: 3600 });
    store.set('a', 1);
    expect(store.enabled).toBe(false);
    expect(store.get('a')).toBeUndefined();
  });
});

function turn(finish: TurnResult['finish'], extra: Partial<TurnResult> = {}): TurnResult {
  return {
    finish,
    generation: {
      finishReason: finish === 'length' ? 'length' : 'stop',
      usage: { prompt_tokens: 12, completion_tokens: 9, total_tokens: 21, prompt_tokens_details: { cached_tokens: 0 } },
      timings: {} as TurnResult['generation']['timings'],
      text: '',
      cachedTokens: 0,
    },
    reasoning: '',
    content: '',
    toolCalls: [],
    reasoningTokens: 0,
    ...extra,
  };
}

const reasoningThenCall: ChatEvent[] = [
  { type: 'reasoning', text: 'The user wants ' },
  { type: 'reasoning', text: 'the weather.' },
  { type: 'content', text: 'Let me ' },
  { type: 'content', text: 'check.' },
  { type: 'tool_call', index: 0, id: 'call_1', name: 'get_weather' },
  { type: 'tool_arguments', index: 0, delta: '{"city": ' },
  { type: 'tool_arguments', index: 0, delta: '"Paris"}' },
  { type: 'tool_call', index: 1, id: 'call_2', name: 'get_time' },
  { type: 'tool_arguments', index: 1, delta: '{}' },
  { type: 'done', turn: turn('tool_calls', { reasoningTokens: 5 }) },
];

const head = {
  created_at: 1,
  instructions: null,
  max_output_tokens: null,
  model: 'm',
  parallel_tool_calls: true,
  previous_response_id: null,
  conversation: null,
  reasoning: { effort: null, summary: null },
  store: true,
  temperature: 1,
  top_p: 1,
  top_logprobs: 0,
  text: { format: { type: 'text' }, verbosity: 'medium' },
  tool_choice: 'auto',
  tools: [],
  metadata: {},
};

describe('ResponseBuilder', () => {
  function build(events: ChatEvent[]) {
    const sent: StreamEvent[] = [];
    const builder = new ResponseBuilder('resp_1', head, (e) => sent.push(JSON.parse(JSON.stringify(e))));
    builder.start();
    for (const e of events) builder.push(e);
    return { builder, sent };
  }

  it("streams events the SDK's accumulator rebuilds into the returned response", () => {
    const { builder, sent } = build(reasoningThenCall);
    expect(sent.map((e) => e.sequence_number)).toEqual(sent.map((_, i) => i));
    let snapshot: unknown;
    for (const event of sent) snapshot = accumulateResponse(event as never, snapshot as never);
    expect(snapshot).toMatchObject(JSON.parse(JSON.stringify(builder.response)));
    expect(builder.response.output.map((o) => o.type)).toEqual(['reasoning', 'message', 'function_call', 'function_call']);
    expect(builder.response.output[2]).toMatchObject({ call_id: 'call_1', name: 'get_weather', arguments: '{"city": "Paris"}', status: 'completed' });
    expect(builder.response.usage?.output_tokens_details).toEqual({ reasoning_tokens: 5 });
    expect(sent.map((e) => e.type)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.reasoning_text.delta',
      'response.reasoning_text.delta',
      'response.reasoning_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.output_item.added',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.done',
      'response.output_item.done',
      'response.output_item.added',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.done',
      'response.output_item.done',
      'response.completed',
    ]);
  });

  it('ends a length stop as incomplete, and still answers with a message', () => {
    const { builder, sent } = build([{ type: 'reasoning', text: 'hmm' }, { type: 'done', turn: turn('length') }]);
    expect(builder.response).toMatchObject({ status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' } });
    expect(builder.response.output.map((o) => [o.type, o.status])).toEqual([
      ['reasoning', 'incomplete'],
      ['message', 'incomplete'],
    ]);
    expect(sent.at(-1)?.type).toBe('response.incomplete');
  });

  it('drops what arrives after a cancel', () => {
    const { builder, sent } = build([{ type: 'content', text: 'partial' }]);
    builder.cancel();
    builder.push({ type: 'content', text: ' late' });
    builder.push({ type: 'done', turn: turn('stop') });
    expect(builder.response.status).toBe('cancelled');
    expect(builder.response.output[0]).toMatchObject({ status: 'incomplete', content: [{ text: 'partial' }] });
    expect(sent.at(-1)).toMatchObject({ type: 'response.incomplete', response: { status: 'cancelled' } });
  });
});

describe('MessageBuilder', () => {
  async function viaSdk(events: AnthropicEvent[]) {
    const ndjson = events.map((e) => JSON.stringify(e)).join('\n') + '\n';
    const stream = MessageStream.fromReadableStream(new Blob([ndjson]).stream());
    return stream.finalMessage();
  }

  it("streams events the SDK's MessageStream rebuilds into the returned message", async () => {
    const sent: AnthropicEvent[] = [];
    const builder = new MessageBuilder('msg_1', 'm', 12, (e) => sent.push(JSON.parse(JSON.stringify(e))));
    builder.start();
    for (const e of reasoningThenCall) builder.push(e);
    expect(builder.message).toMatchObject({
      stop_reason: 'tool_use',
      content: [
        { type: 'thinking', thinking: 'The user wants the weather.', signature: '' },
        { type: 'text', text: 'Let me check.' },
        { type: 'tool_use', id: 'call_1', name: 'get_weather', input: { city: 'Paris' } },
        { type: 'tool_use', id: 'call_2', name: 'get_time', input: {} },
      ],
      usage: { input_tokens: 12, output_tokens: 9 },
    });
    const final = await viaSdk(sent);
    expect(final).toMatchObject(JSON.parse(JSON.stringify(builder.message)));
    expect(sent.map((e) => e.type)).toEqual([
      'message_start',
      'content_block_start',
      'content_block_delta',
      'content_block_delta',
      'content_block_stop',
      'content_block_start',
      'content_block_delta',
      'content_block_delta',
      'content_block_stop',
      'content_block_start',
      'content_block_delta',
      'content_block_delta',
      'content_block_stop',
      'content_block_start',
      'content_block_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
  });

  it('maps the finish to stop_reason and stop_sequence', () => {
    const finish = (t: TurnResult) => {
      const builder = new MessageBuilder('msg_1', 'm', 1);
      builder.push({ type: 'done', turn: t });
      return builder.message;
    };
    expect(finish(turn('stop'))).toMatchObject({ stop_reason: 'end_turn', stop_sequence: null, content: [{ type: 'text', text: '' }] });
    expect(finish(turn('length'))).toMatchObject({ stop_reason: 'max_tokens' });
    const stopped = turn('stop');
    stopped.generation.stopString = 'END';
    expect(finish(stopped)).toMatchObject({ stop_reason: 'stop_sequence', stop_sequence: 'END' });
  });
});
