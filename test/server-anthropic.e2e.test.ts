// The Anthropic Messages API through the official @anthropic-ai/sdk, against live servers
// on the real engine and the trained stories260k model (whose template joins message
// contents with "\n" after <s>, so token counts can be rebuilt by hand).
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { useLive, useServer } from './helpers/live-server.js';
import { storiesCase } from './helpers/stories-expected.js';

const onceUponATime = storiesCase('Once upon a time');

const HEADERS = { 'anthropic-version': '2023-06-01' };
const live = useLive({ model: 'models/stories260k', headers: HEADERS });
const keyed = useServer(live, { server: { apiKey: 'secret' }, headers: HEADERS });

const promptTokens = (...texts: string[]) => live.engine.tokenizer.encode(`<s>${texts.join('\n')}`, false).length;
const ask = (content: Anthropic.MessageParam['content']): Anthropic.MessageParam[] => [{ role: 'user', content }];
/** Messages params plus `temperature`, which this server takes and the SDK no longer declares (the SDK sends every field). */
type SamplingMessageParams = Anthropic.MessageCreateParamsNonStreaming & { temperature?: number };

/** Anthropic's error envelope, with the type its SDKs switch on. */
const envelope = (type: string, message: RegExp | string = /./) => ({
  type: 'error',
  error: { type, message: typeof message === 'string' ? message : expect.stringMatching(message) },
});

describe('POST /v1/messages on stories260k', () => {
  it('answers with the greedy continuation and usage', async () => {
    const params: SamplingMessageParams = { model: 'stories260k', max_tokens: 64, temperature: 0, messages: ask(onceUponATime.prompt) };
    const msg = await live.anthropic.messages.create(params);
    expect(msg).toMatchObject({
      type: 'message',
      role: 'assistant',
      model: 'stories260k',
      content: [{ type: 'text', text: onceUponATime.expected_text }],
      stop_reason: 'max_tokens',
      stop_sequence: null,
      usage: { input_tokens: 5, output_tokens: 64 },
    });
    expect(msg.id).toMatch(/^msg_/);
  });

  it('streams the event sequence the SDK rebuilds into the same message', async () => {
    const stream = live.anthropic.messages.stream({ model: 'stories260k', max_tokens: 64, temperature: 0, messages: ask(onceUponATime.prompt) });
    let text = '';
    stream.on('text', (delta) => (text += delta));
    const types: string[] = [];
    for await (const event of stream) types.push(event.type);
    const final = await stream.finalMessage();
    expect(text).toBe(onceUponATime.expected_text);
    // The prompt of the request before: all but its last token are read from the prompt cache.
    expect(final).toMatchObject({ content: [{ type: 'text', text }], stop_reason: 'max_tokens', usage: { input_tokens: 1, cache_read_input_tokens: 4, output_tokens: 64 } });
    expect(types[0]).toBe('message_start');
    expect(types[1]).toBe('content_block_start');
    expect(types.slice(2, -3).every((t) => t === 'content_block_delta')).toBe(true);
    expect(types.slice(-3)).toEqual(['content_block_stop', 'message_delta', 'message_stop']);
  });

  it('stops at stop_sequences and says which', async () => {
    const params = { model: 'stories260k', max_tokens: 64, temperature: 0, stop_sequences: ['park', 'Lily'], messages: ask(onceUponATime.prompt) };
    const msg = await live.anthropic.messages.create(params);
    expect(msg).toMatchObject({ content: [{ type: 'text', text: ', there was a little girl named ' }], stop_reason: 'stop_sequence', stop_sequence: 'Lily' });
    const streamed = await live.anthropic.messages.stream(params).finalMessage();
    expect(streamed).toMatchObject({ content: msg.content, stop_reason: 'stop_sequence', stop_sequence: 'Lily', usage: msg.usage });
  });

  it('counts tokens of the system prompt (string or blocks), messages and tool traffic', async () => {
    const system = await live.anthropic.messages.countTokens({ model: 'm', system: 'Tell stories.', messages: ask(onceUponATime.prompt) });
    expect(system).toEqual({ input_tokens: promptTokens('Tell stories.', onceUponATime.prompt) });
    const blocks = await live.anthropic.messages.countTokens({
      model: 'm',
      system: [
        { type: 'text', text: 'Tell' },
        { type: 'text', text: 'stories.' },
      ],
      messages: ask([{ type: 'text', text: onceUponATime.prompt }]),
    });
    expect(blocks.input_tokens).toBe(promptTokens('Tell\nstories.', onceUponATime.prompt));
    // tool_use joins the assistant turn (no text here); tool_result becomes a tool message.
    // stories260k's template shows only contents, so the call is written as llama-server's
    // polyfill writes it: the turn's content, as JSON.
    const tools = await live.anthropic.messages.countTokens({
      model: 'm',
      tools: [{ name: 'weather', description: 'Weather now', input_schema: { type: 'object', properties: { city: { type: 'string' } } } }],
      messages: [
        { role: 'user', content: 'Weather?' },
        { role: 'assistant', content: [{ type: 'thinking', thinking: 'Use the tool.', signature: '' }, { type: 'tool_use', id: 'toolu_1', name: 'weather', input: { city: 'Paris' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'text', text: 'Sunny' }] }, { type: 'text', text: 'Thanks' }] },
      ],
    });
    const call = JSON.stringify({ tool_calls: [{ name: 'weather', arguments: { city: 'Paris' }, id: 'toolu_1' }] }, null, 2);
    expect(tools.input_tokens).toBe(promptTokens('Weather?', call, 'Sunny', 'Thanks'));
  });

  it('accepts server tools (dropped), client tools with tool_choice, thinking, and unknown fields', async () => {
    const msg = await live.anthropic.messages.create({
      model: 'stories260k',
      max_tokens: 4,
      temperature: 0,
      top_k: 1,
      top_p: 1,
      messages: ask(onceUponATime.prompt),
      tools: [
        { type: 'web_search_20250305', name: 'web_search', max_uses: 1 },
        { name: 'weather', input_schema: { type: 'object', properties: {} } },
      ],
      tool_choice: { type: 'auto' },
      thinking: { type: 'disabled' },
      metadata: { user_id: 'u' },
      service_tier: 'auto',
      container: null,
      not_a_field: 1,
    } as never);
    const [block] = msg.content;
    expect(block?.type === 'text' && block.text.length > 0 && onceUponATime.expected_text.startsWith(block.text)).toBe(true);
    expect(msg.usage.input_tokens + (msg.usage.cache_read_input_tokens ?? 0)).toBe(5);
    // The dropped server tool cannot be forced.
    const forced = await live.anthropic.messages
      .create({ model: 'm', max_tokens: 1, messages: ask('x'), tools: [{ type: 'web_search_20250305', name: 'web_search' }], tool_choice: { type: 'tool', name: 'web_search' } })
      .catch((e: unknown) => e);
    expect(forced).toBeInstanceOf(Anthropic.BadRequestError);
    expect((forced as InstanceType<typeof Anthropic.BadRequestError>).error).toEqual(envelope('invalid_request_error', /names function "web_search", which is not declared/));
  });

  it('serves the paths without /v1', async () => {
    const res = await live.post('/messages', { model: 'm', max_tokens: 2, temperature: 0, messages: ask(onceUponATime.prompt) });
    expect(res).toMatchObject({ status: 200, body: { type: 'message', stop_reason: 'max_tokens' } });
    expect(await live.post('/messages/count_tokens', { model: 'm', messages: ask(onceUponATime.prompt) })).toEqual({ status: 200, body: { input_tokens: 5 } });
  });
});

describe('errors on the Messages routes', () => {
  it('are 400s in Anthropic envelope', async () => {
    const cases: Array<[unknown, RegExp]> = [
      [{ model: 'm', messages: ask('x') }, /max_tokens is required/],
      [{ model: 'm', max_tokens: 0, messages: ask('x') }, /max_tokens/],
      [{ model: 'm', max_tokens: 1, messages: [] }, /messages/],
      [{ model: 'm', max_tokens: 1, messages: [{ role: 'system', content: 'x' }] }, /role/],
      [{ model: 'm', max_tokens: 1, messages: [{ role: 'user', content: [{ type: 'document', source: { type: 'text', data: 'x' } }] }] }, /"document" is not supported/],
      [{ model: 'm', max_tokens: 1, messages: ask('Once upon a time '.repeat(200)) }, /context size/],
      [{ model: 'm', max_tokens: 1, messages: ask('x'), tool_choice: { type: 'any' } }, /needs at least one tool/],
      ['{"model": ', /malformed JSON/],
    ];
    for (const [body, message] of cases) {
      const res = await live.post('/v1/messages', body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body).toEqual(envelope('invalid_request_error', message));
    }
  });

  it('answer 501 for images (base64, url, inside tool_result) on a model without a vision tower, as chat completions does, fetching nothing', async () => {
    // A URL the server could reach were it to fetch: the site counts requests.
    const hits: string[] = [];
    const site = createServer((req, res) => {
      hits.push(req.url ?? '');
      res.end();
    });
    await new Promise<void>((resolve) => site.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(site.address() as AddressInfo).port}/cat.png`;
    const image = (source: Record<string, string>) => ({ type: 'image' as const, source });
    const hint = /^image input is not supported - hint: the loaded model takes text only/;
    for (const content of [
      [image({ type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' }), { type: 'text', text: 'What is this?' }],
      [image({ type: 'url', url })],
      [{ type: 'tool_result', tool_use_id: 'toolu_1', content: [image({ type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' })] }],
    ]) {
      const err = await live.anthropic.messages.create({ model: 'm', max_tokens: 1, messages: ask(content as never) }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(Anthropic.APIError);
      expect((err as InstanceType<typeof Anthropic.APIError>).status).toBe(501);
      expect((err as InstanceType<typeof Anthropic.APIError>).error).toEqual(envelope('api_error', hint));
    }
    const openai = new OpenAI({ baseURL: `${live.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const parts: Array<[OpenAI.ChatCompletionContentPart | Record<string, unknown>, RegExp]> = [
      [{ type: 'image_url', image_url: { url, detail: 'high' } }, hint],
      [{ type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } }, hint],
      [{ type: 'image_url', image_url: { url: 'file:///tmp/cat.png' } }, hint],
      [{ type: 'image_url', image_url: { url: '/tmp/cat.png', detail: 'low' } }, hint],
      [{ type: 'video_url', video_url: { url, fps: 2 } }, /^video input is not supported - hint: the loaded model takes text only/],
      [{ type: 'input_audio', input_audio: { data: 'UklGRg==', format: 'wav' } }, /^audio input is not supported - hint: /],
    ];
    for (const [part, message] of parts) {
      const err = await openai.chat.completions.create({ model: 'm', max_tokens: 1, messages: [{ role: 'user', content: [{ type: 'text', text: 'Look:' }, part as never] }] }).catch((e: unknown) => e);
      expect(err, JSON.stringify(part)).toBeInstanceOf(OpenAI.APIError);
      expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(501);
      expect((err as InstanceType<typeof OpenAI.APIError>).error).toMatchObject({ type: 'not_supported_error', message: expect.stringMatching(message) });
    }
    // Video with audio is refused for every model; an image part without a url is malformed.
    const both = await live.post('/v1/chat/completions', { messages: [{ role: 'user', content: [parts[4]![0], parts[5]![0]] }] });
    expect(both).toMatchObject({ status: 400, body: { error: { type: 'invalid_request_error', message: 'Combined video and audio inputs are not supported' } } });
    const malformed = await live.post('/v1/chat/completions', { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: {} }] }] });
    expect(malformed).toMatchObject({ status: 400, body: { error: { message: expect.stringContaining('messages[0].content[0].image_url.url is required') } } });
    site.close();
    expect(hits).toEqual([]);
  });

  it('take the key from x-api-key, as the SDK sends it, and answer 401 in the envelope', async () => {
    const good = new Anthropic({ baseURL: keyed.url, apiKey: 'secret', maxRetries: 0 });
    expect((await good.messages.countTokens({ model: 'm', messages: ask(onceUponATime.prompt) })).input_tokens).toBe(5);
    const bad = new Anthropic({ baseURL: keyed.url, apiKey: 'wrong', maxRetries: 0 });
    const err = await bad.messages.create({ model: 'm', max_tokens: 1, messages: ask('x') }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.AuthenticationError);
    expect((err as InstanceType<typeof Anthropic.AuthenticationError>).error).toEqual(envelope('authentication_error', 'Invalid API key'));
    const missing = await keyed.post('/v1/messages/count_tokens', { messages: ask('x') });
    expect(missing).toEqual({ status: 401, body: envelope('authentication_error', /Missing API key/) });
    // The OpenAI routes keep their envelope, and take either header.
    const openai = await keyed.post('/v1/responses/input_tokens', { input: 'x' }, { 'x-api-key': 'wrong' });
    expect(openai).toMatchObject({ status: 401, body: { error: { type: 'invalid_api_key' } } });
    const bearer = new OpenAI({ baseURL: `${keyed.url}/v1`, apiKey: 'secret', maxRetries: 0 });
    expect((await bearer.responses.inputTokens.count({ input: onceUponATime.prompt })).input_tokens).toBe(5);
  });
});
