// The Responses API through the official `openai` client, against live servers on the
// real engine and the trained stories260k model. Its template joins message contents
// with "\n" after <s>, so every prompt (and so every token count) can be rebuilt here
// by hand; greedy outputs come from expected.json.
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { useLive, useServer } from './helpers/live-server.js';
import { storiesCase } from './helpers/stories-expected.js';

const onceUponATime = storiesCase('Once upon a time');

const live = useLive({ model: 'models/stories260k' });
const noStore = useServer(live, { server: { responsesStoreMaxEntries: 0, conversationStoreMaxEntries: 0 } });

/** Tokens of the stories template's rendering of these message texts. */
const promptTokens = (...texts: string[]) => live.engine.tokenizer.encode(`<s>${texts.join('\n')}`, false).length;

const greedy = { model: 'stories260k', temperature: 0 } as const;

/** A Response as this server sends it: with `store`, which the SDK's Response type does not declare. */
type StoredResponse = OpenAI.Responses.Response & { store?: boolean };
/** Compaction params plus `max_output_tokens` (the summary's budget), a field of this server's. */
type CompactParams = OpenAI.Responses.ResponseCompactParams & { max_output_tokens?: number };

async function badRequest(promise: Promise<unknown>): Promise<InstanceType<typeof OpenAI.BadRequestError>> {
  const err = await promise.catch((e: unknown) => e);
  expect(err).toBeInstanceOf(OpenAI.BadRequestError);
  return err as InstanceType<typeof OpenAI.BadRequestError>;
}

/** A history of whole stories turns, long enough to be worth compacting. */
const longHistory = (): OpenAI.Responses.ResponseInputItem[] => [
  { role: 'system', content: 'Tell stories.' },
  { role: 'user', content: 'Once upon a time there was a little dog who loved to run in the park.' },
  { role: 'assistant', content: 'One day the dog saw a big red ball and ran after it all the way home.' },
  { role: 'user', content: 'Lily wanted to play with the dog, so she went to the park with her mom.' },
  { role: 'assistant', content: 'They played all day and then they went home to eat a big dinner together.' },
  { role: 'user', content: 'Once upon a time' },
];

describe('POST /v1/responses on stories260k', () => {
  it('answers with the greedy continuation, parsed by the SDK', async () => {
    const res = await live.openai.responses.create({ ...greedy, input: onceUponATime.prompt, max_output_tokens: 64 });
    expect(res.id).toMatch(/^resp_/);
    expect(res.object).toBe('response');
    expect(res.output_text).toBe(onceUponATime.expected_text);
    expect(res.status).toBe('incomplete');
    expect(res.incomplete_details).toEqual({ reason: 'max_output_tokens' });
    expect(res.output).toHaveLength(1);
    expect(res.output[0]).toMatchObject({ type: 'message', role: 'assistant', status: 'incomplete', id: expect.stringMatching(/^msg_/) });
    expect(res.usage).toMatchObject({ input_tokens: 5, output_tokens: 64, total_tokens: 69, output_tokens_details: { reasoning_tokens: 0 } });
  });

  it('streams typed events with monotonic sequence numbers', async () => {
    const stream = await live.openai.responses.create({ ...greedy, input: onceUponATime.prompt, max_output_tokens: 64, stream: true });
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const event of stream) events.push(event);
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    expect(events.slice(0, 4).map((e) => e.type)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
    ]);
    expect(events.slice(-4).map((e) => e.type)).toEqual([
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.incomplete',
    ]);
    const deltas = events.filter((e): e is OpenAI.Responses.ResponseTextDeltaEvent => e.type === 'response.output_text.delta');
    expect(deltas.map((d) => d.delta).join('')).toBe(onceUponATime.expected_text);
    const last = events.at(-1) as OpenAI.Responses.ResponseIncompleteEvent;
    expect(last.response.usage).toMatchObject({ input_tokens: 5, output_tokens: 64 });
  });

  it('reports output_text logprobs when included, streamed and not alike', async () => {
    const params = { ...greedy, input: onceUponATime.prompt, max_output_tokens: 16, include: ['message.output_text.logprobs' as const], top_logprobs: 2 };
    const res = await live.openai.responses.create(params);
    expect(res.top_logprobs).toBe(2);
    const part = (res.output[0] as OpenAI.Responses.ResponseOutputMessage).content[0] as OpenAI.Responses.ResponseOutputText;
    const logprobs = part.logprobs!;
    // One entry a generated token; greedy, so each chosen token is the likeliest.
    expect(logprobs).toHaveLength(16);
    expect(Buffer.from(logprobs.flatMap((l) => l.bytes)).toString('utf8')).toBe(part.text);
    for (const entry of logprobs) {
      expect(entry.logprob).toBeLessThanOrEqual(0);
      expect(entry.top_logprobs).toHaveLength(2);
      expect(entry.top_logprobs[0]!.token).toBe(entry.token);
      expect(entry.top_logprobs[0]!.logprob).toBeCloseTo(entry.logprob, 5);
      expect(entry.top_logprobs[1]!.logprob).toBeLessThanOrEqual(entry.top_logprobs[0]!.logprob);
    }

    const stream = await live.openai.responses.create({ ...params, stream: true });
    const streamed: OpenAI.Responses.ResponseTextDeltaEvent.Logprob[] = [];
    let done: OpenAI.Responses.ResponseTextDoneEvent | undefined;
    for await (const event of stream) {
      if (event.type === 'response.output_text.delta') streamed.push(...event.logprobs);
      if (event.type === 'response.output_text.done') done = event;
    }
    expect(streamed).toEqual(logprobs);
    expect(done!.logprobs).toEqual(logprobs);

    // Without include, no logprobs are computed.
    const plain = await live.openai.responses.create({ ...greedy, input: onceUponATime.prompt, max_output_tokens: 4 });
    expect(((plain.output[0] as OpenAI.Responses.ResponseOutputMessage).content[0] as OpenAI.Responses.ResponseOutputText).logprobs).toEqual([]);
    // top_logprobs is bounded as on chat completions; unknown include values are refused.
    expect((await live.post('/v1/responses', { input: 'x', top_logprobs: 21 })).status).toBe(400);
    expect((await live.post('/v1/responses', { input: 'x', include: ['message.output_text.nope'] })).status).toBe(400);
  });

  it("rebuilds through the SDK's stream helper into the same response", async () => {
    const stream = live.openai.responses.stream({ ...greedy, input: onceUponATime.prompt, max_output_tokens: 20, stop: ['Lily'] } as never);
    let snapshotText = '';
    stream.on('response.output_text.delta', (e) => (snapshotText = e.snapshot));
    const final = await stream.finalResponse();
    expect(final.output_text).toBe(', there was a little girl named ');
    expect(snapshotText).toBe(final.output_text);
    // A stop string ends the turn: completed, not incomplete.
    expect(final.status).toBe('completed');
    const stored = await live.openai.responses.retrieve(final.id);
    expect(stored).toMatchObject({ status: 'completed', output_text: final.output_text, usage: final.usage });
    expect(stored.output.map((o) => o.id)).toEqual(final.output.map((o) => o.id));
  });

  it('retrieves and deletes stored responses', async () => {
    const created = await live.openai.responses.create({ ...greedy, input: onceUponATime.prompt, max_output_tokens: 8 });
    const retrieved = await live.openai.responses.retrieve(created.id);
    expect(retrieved).toEqual(created);
    await live.openai.responses.delete(created.id);
    const err = await live.openai.responses.retrieve(created.id).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    // store: false is never kept.
    const unstored: StoredResponse = await live.openai.responses.create({ ...greedy, input: 'Lily', max_output_tokens: 2, store: false });
    expect(unstored.store).toBe(false);
    expect(await live.openai.responses.retrieve(unstored.id).catch((e: unknown) => e)).toBeInstanceOf(OpenAI.NotFoundError);
  });

  it('chains turns through previous_response_id', async () => {
    const first = await live.openai.responses.create({ ...greedy, input: onceUponATime.prompt, max_output_tokens: 8 });
    const next = { previous_response_id: first.id, input: [{ role: 'user' as const, content: 'Lily' }] };
    const expectedTokens = promptTokens(onceUponATime.prompt, first.output_text, 'Lily');
    expect(await live.openai.responses.inputTokens.count(next)).toEqual({ object: 'response.input_tokens', input_tokens: expectedTokens });
    const second = await live.openai.responses.create({ ...greedy, ...next, max_output_tokens: 4 });
    expect(second.previous_response_id).toBe(first.id);
    expect(second.usage?.input_tokens).toBe(expectedTokens);
    // instructions are not carried over from the previous response.
    const third = await live.openai.responses.create({ ...greedy, previous_response_id: second.id, input: 'Tom', max_output_tokens: 2 });
    expect(third.usage?.input_tokens).toBe(promptTokens(onceUponATime.prompt, first.output_text, 'Lily', second.output_text, 'Tom'));

    const err = await badRequest(live.openai.responses.create({ ...greedy, previous_response_id: 'resp_missing', input: 'x' }));
    expect(err.message).toMatch(/previous response 'resp_missing' was not found/);
  });

  it('continues a string-form conversation', async () => {
    const conversation = `conv_${Date.now()}`;
    const first = await live.openai.responses.create({ ...greedy, conversation, input: onceUponATime.prompt, max_output_tokens: 6 });
    expect(first.conversation).toEqual({ id: conversation });
    const second = await live.openai.responses.create({ ...greedy, conversation, input: 'Lily', max_output_tokens: 2 });
    expect(second.usage?.input_tokens).toBe(promptTokens(onceUponATime.prompt, first.output_text, 'Lily'));
    await badRequest(live.openai.responses.create({ ...greedy, conversation, previous_response_id: first.id, input: 'x' }));
  });

  it('counts input tokens with instructions first', async () => {
    expect(await live.openai.responses.inputTokens.count({ input: onceUponATime.prompt })).toEqual({ object: 'response.input_tokens', input_tokens: 5 });
    const counted = await live.openai.responses.inputTokens.count({ instructions: 'Tell stories.', input: onceUponATime.prompt });
    expect(counted.input_tokens).toBe(promptTokens('Tell stories.', onceUponATime.prompt));
  });

  it('cancels a generation in progress and leaves a finished one as it is', async () => {
    const stream = await live.openai.responses.create({ ...greedy, input: onceUponATime.prompt, max_output_tokens: 400, stream: true });
    let id = '';
    let cancelled: OpenAI.Responses.Response | undefined;
    const types: string[] = [];
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'response.created') id = event.response.id;
      if (event.type === 'response.output_text.delta' && !cancelled) cancelled = await live.openai.responses.cancel(id);
    }
    expect(cancelled?.status).toBe('cancelled');
    expect(types.at(-1)).toBe('response.incomplete');
    const stored = await live.openai.responses.retrieve(id);
    expect(stored.status).toBe('cancelled');
    expect(stored.usage).toBeNull();
    for (let i = 0; i < 100 && live.engine.stats().activeSequences > 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect(live.engine.stats().activeSequences).toBe(0);

    const done = await live.openai.responses.create({ ...greedy, input: 'Lily', max_output_tokens: 2 });
    expect(await live.openai.responses.cancel(done.id)).toMatchObject({ id: done.id, status: 'incomplete' });
  });

  it('serves the paths without /v1', async () => {
    const created = await live.post('/responses', { ...greedy, input: onceUponATime.prompt, max_output_tokens: 3 });
    expect(created.status).toBe(200);
    expect((await fetch(`${live.url}/responses/${created.body.id}`)).status).toBe(200);
    expect(await live.post('/responses/input_tokens', { input: onceUponATime.prompt })).toEqual({ status: 200, body: { object: 'response.input_tokens', input_tokens: 5 } });
    expect((await live.post(`/responses/${created.body.id}/cancel`, {})).status).toBe(200);
    expect((await fetch(`${live.url}/responses/${created.body.id}`, { method: 'DELETE' })).status).toBe(200);
  });
});

describe('compaction on stories260k', () => {
  const decode = (item: { encrypted_content: string }) =>
    JSON.parse(Buffer.from(item.encrypted_content, 'base64url').toString('utf8')) as { summary: string; items: unknown[] };

  it('POST /v1/responses/compact summarizes older turns into one compaction item', async () => {
    const history = longHistory();
    const before = (await live.openai.responses.inputTokens.count({ input: history })).input_tokens;
    const compactParams: CompactParams = { model: 'stories260k', input: history, max_output_tokens: 24 };
    const compacted = await live.openai.responses.compact(compactParams);
    expect(compacted).toMatchObject({ object: 'response.compaction', model: 'stories260k' });
    // Kept system message, the retained latest user message, one compaction item.
    expect(compacted.output.map((o) => o.type)).toEqual(['message', 'message', 'compaction']);
    expect(compacted.output[0]).toMatchObject({ role: 'system', content: 'Tell stories.' });
    expect(compacted.output[1]).toMatchObject({ role: 'user', content: 'Once upon a time' });
    const item = compacted.output[2] as OpenAI.Responses.ResponseCompactionItem;
    expect(item.id).toMatch(/^cmp_/);
    expect(item.encrypted_content).toMatch(/^[A-Za-z0-9_-]+$/);
    const capsule = decode(item);
    expect(capsule.items).toEqual([{ type: 'message', role: 'user', content: 'Once upon a time' }]);
    expect(compacted.usage.output_tokens).toBeGreaterThan(0);
    expect(compacted.usage.output_tokens).toBeLessThanOrEqual(24);

    // Replayed: instructions, the summary merged into the retained user message.
    const replay = compacted.output as unknown as OpenAI.Responses.ResponseInputItem[];
    const after = (await live.openai.responses.inputTokens.count({ input: replay })).input_tokens;
    expect(after).toBe(promptTokens('Tell stories.', `Summary of the earlier conversation:\n${capsule.summary}`, 'Once upon a time'));
    expect(after).toBeLessThan(before);

    // A generation on the compacted history, and a chain from it, see the same context.
    const res = await live.openai.responses.create({ ...greedy, input: replay, max_output_tokens: 4 });
    expect(res.usage?.input_tokens).toBe(after);
    const chained = await live.openai.responses.inputTokens.count({ previous_response_id: res.id, input: 'Lily' });
    expect(chained.input_tokens).toBe(
      promptTokens('Tell stories.', `Summary of the earlier conversation:\n${capsule.summary}`, 'Once upon a time', res.output_text, 'Lily'),
    );
  });

  it('refuses what it cannot compact, with context_length_exceeded', async () => {
    const tooLong = [{ role: 'user' as const, content: 'Once upon a time '.repeat(150) }, { role: 'user' as const, content: 'Lily' }];
    let err = await badRequest(live.openai.responses.compact({ model: 'm', input: tooLong }));
    expect(err.code).toBe('context_length_exceeded');
    expect(err.message).toMatch(/more than the context window/);

    err = await badRequest(live.openai.responses.compact({ model: 'm', input: longHistory(), max_output_tokens: 500 } as never));
    expect(err.code).toBe('context_length_exceeded');
    expect(err.message).toMatch(/does not fit the context window/);

    // A head shorter than any summary: the result would be longer.
    const short = [{ role: 'user' as const, content: 'Hi' }, { role: 'assistant' as const, content: 'Yes' }, { role: 'user' as const, content: 'Lily' }];
    err = await badRequest(live.openai.responses.compact({ model: 'm', input: short, max_output_tokens: 48 } as never));
    expect(err.code).toBe('context_length_exceeded');
    expect(err.message).toMatch(/would not be shorter than the input/);

    // Greedy decoding opens the summary with whitespace: one token of it leaves no text.
    const empty = await live.post('/v1/responses/compact', { model: 'm', input: longHistory(), max_output_tokens: 1 });
    expect(empty.status).toBe(400);
    expect(empty.body.error).toMatchObject({
      type: 'invalid_request_error',
      code: 'context_length_exceeded',
      message: 'compaction failed: the summary generation produced no text within max_output_tokens 1; nothing was changed',
    });
  });

  it('rejects streaming, previous_response_id, conversation and bad bounds', async () => {
    const input = longHistory();
    for (const extra of [
      { stream: true },
      { previous_response_id: 'resp_x' },
      { conversation: 'conv_x' },
      { keep_tokens: 0 },
      { max_output_tokens: 0 },
      { max_output_tokens: 16385 },
    ]) {
      const res = await live.post('/v1/responses/compact', { model: 'm', input, ...extra });
      expect(res.status, JSON.stringify(extra)).toBe(400);
      expect(res.body.error).toMatchObject({ type: 'invalid_request_error', message: expect.any(String) });
    }
    expect((await live.post('/responses/compact', { input, max_output_tokens: 16 })).status).toBe(200);
  });

  it('context_management compacts before generating, streamed with mlx.compaction events', async () => {
    const input = longHistory();
    const before = (await live.openai.responses.inputTokens.count({ input })).input_tokens;
    const stream = await live.openai.responses.create({
      ...greedy,
      input,
      max_output_tokens: 6,
      stream: true,
      context_management: [{ type: 'compaction', compact_threshold: 40 }],
    } as never);
    const events: any[] = [];
    for await (const event of stream as unknown as AsyncIterable<any>) events.push(event);
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    expect(events.slice(0, 6).map((e) => e.type)).toEqual([
      'response.created',
      'response.in_progress',
      'mlx.compaction.started',
      'mlx.compaction.completed',
      'response.output_item.added',
      'response.output_item.done',
    ]);
    expect(events[2]).toMatchObject({ input_tokens: before });
    expect(events[3]).toMatchObject({ input_tokens_before: before, input_tokens_after: expect.any(Number) });
    expect(events[3].input_tokens_after).toBeLessThan(before);
    expect(events[4]).toMatchObject({ output_index: 0, item: { type: 'compaction' } });
    const final = events.at(-1).response as OpenAI.Responses.Response;
    expect(final.output.map((o) => o.type)).toEqual(['compaction', 'message']);
    expect(final.usage?.input_tokens).toBe(events[3].input_tokens_after);

    // The stored response continues from the compacted context.
    const chained = await live.openai.responses.inputTokens.count({ previous_response_id: final.id, input: 'Lily' });
    const summary = decode(final.output[0] as OpenAI.Responses.ResponseCompactionItem).summary;
    const text = (final.output[1] as OpenAI.Responses.ResponseOutputMessage).content.map((c) => (c.type === 'output_text' ? c.text : '')).join('');
    expect(chained.input_tokens).toBe(promptTokens('Tell stories.', `Summary of the earlier conversation:\n${summary}`, 'Once upon a time', text, 'Lily'));
  });

  it('context_management leaves a short input alone, and compacts sync requests too', async () => {
    const short = await live.openai.responses.create({
      ...greedy,
      input: onceUponATime.prompt,
      max_output_tokens: 4,
      context_management: [{ type: 'compaction', compact_threshold: 1000 }],
    } as never);
    expect(short.output.map((o) => o.type)).toEqual(['message']);
    const compacted = await live.openai.responses.create({
      ...greedy,
      input: longHistory(),
      max_output_tokens: 4,
      context_management: [{ type: 'compaction', compact_threshold: 40 }],
    } as never);
    expect(compacted.output.map((o) => o.type)).toEqual(['compaction', 'message']);
  });
});

describe('refusals', () => {
  const builtIn = [
    { type: 'web_search' },
    { type: 'file_search', vector_store_ids: ['vs'] },
    { type: 'computer_use_preview', display_height: 1, display_width: 1, environment: 'linux' },
    { type: 'code_interpreter', container: { type: 'auto' } },
    { type: 'image_generation' },
    { type: 'mcp', server_label: 's', server_url: 'https://example.com' },
    { type: 'custom', name: 'c' },
    { type: 'apply_patch' },
    { type: 'function_shell' },
  ];

  it('answers 400 invalid_request_error for each built-in tool type', async () => {
    for (const tool of builtIn) {
      const err = await badRequest(live.openai.responses.create({ ...greedy, input: 'x', tools: [tool as never] }));
      expect(err.type).toBe('invalid_request_error');
      expect(err.message).toContain(`built-in tool type "${tool.type}" is not supported`);
      const raw = await live.post('/v1/responses', { input: 'x', tools: [tool] });
      expect(raw).toMatchObject({ status: 400, body: { error: { type: 'invalid_request_error', message: expect.any(String), code: null } } });
    }
  });

  it('answers 400 for input_file parts, truncation other than disabled, and background', async () => {
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ input: [{ role: 'user', content: [{ type: 'input_file', file_id: 'file_1' }] }] }, /input_file content parts are not supported/],
      [{ input: 'x', truncation: 'auto' }, /truncation "auto" is not supported/],
      [{ input: 'x', background: true }, /background responses are not supported/],
      [{ input: 'x', text: { format: { type: 'json_object' } } }, /json_object/],
      [{ input: 'x', tool_choice: 'required' }, /tool_choice "required" needs at least one tool/],
    ];
    for (const [body, message] of cases) {
      const err = await badRequest(live.openai.responses.create({ ...greedy, ...body } as never));
      expect(err.type).toBe('invalid_request_error');
      expect(err.message).toMatch(message);
      // input_tokens applies the same checks.
      if (!('background' in body)) expect((await live.post('/v1/responses/input_tokens', body)).status).toBe(400);
    }
    // input_image parts are read, and refused with 501 by a model without a vision tower.
    const image = { input: [{ role: 'user', content: [{ type: 'input_text', text: 'What is this?' }, { type: 'input_image', image_url: 'data:image/png;base64,AAAA', detail: 'auto' }] }] };
    const err = await live.openai.responses.create({ ...greedy, ...image } as never).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(501);
    expect((err as InstanceType<typeof OpenAI.APIError>).error).toMatchObject({ type: 'not_supported_error', message: expect.stringMatching(/^image input is not supported - hint: /) });
    expect((await live.post('/v1/responses/input_tokens', image)).status).toBe(501);
    // truncation "disabled" and background false are fine.
    expect((await live.openai.responses.create({ ...greedy, input: 'Lily', truncation: 'disabled', background: false, max_output_tokens: 1 })).status).toBe('incomplete');
  });

  it('answers 400 for stored-response operations when storing is disabled', async () => {
    const res: StoredResponse = await noStore.openai.responses.create({ ...greedy, input: 'Lily', max_output_tokens: 2 });
    expect(res.store).toBe(false);
    for (const attempt of [
      noStore.openai.responses.retrieve(res.id),
      noStore.openai.responses.delete(res.id),
      noStore.openai.responses.cancel(res.id),
      noStore.openai.responses.create({ ...greedy, previous_response_id: res.id, input: 'x' }),
      noStore.openai.responses.create({ ...greedy, conversation: 'conv_1', input: 'x' }),
    ]) {
      const err = await badRequest(attempt);
      expect(err.message).toMatch(/disabled on this server/);
    }
  });
});
