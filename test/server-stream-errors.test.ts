// Streams whose generation fails after the first byte: each API ends with its documented
// error shape instead of just stopping. The fake engine fails after a few tokens, as a
// broken GPU pass would.
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { FakeEngine } from './helpers/fake-engine.js';
import { serve, type LiveServer } from './helpers/live-server.js';
import { readSse } from './helpers/sse.js';

let server: LiveServer;

beforeAll(async () => {
  // The failure is logged as a fault; keep the test output clean.
  vi.spyOn(console, 'error').mockImplementation(() => {});
  server = await serve(await FakeEngine.create({ failAfter: 3 }));
});

afterAll(async () => {
  await server?.close();
  vi.restoreAllMocks();
});

/** The `event:` names and parsed `data:` of a named-event stream. */
async function readEvents(res: Response): Promise<Array<{ event: string; data: Record<string, unknown> }>> {
  const blocks = (await res.text()).split('\n\n').filter((b) => b.startsWith('event: '));
  return blocks.map((block) => {
    const [head, data] = block.split('\n');
    return { event: head!.slice('event: '.length), data: JSON.parse(data!.slice('data: '.length)) as Record<string, unknown> };
  });
}

const SERVER_ERROR = { error: { message: 'engine step failed', type: 'server_error', code: null } };

describe('a generation that fails mid-stream', () => {
  it('chat completions: the error, a finish_reason "error" chunk, then [DONE]', async () => {
    const res = await server.request('/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi' }], stream: true, max_tokens: 16 });
    expect(res.status).toBe(200);
    const events = await readSse(res);
    const [error, finish, done] = events.slice(-3) as [unknown, { object: string; choices: unknown[] }, unknown];
    expect(error).toEqual(SERVER_ERROR);
    expect(finish.object).toBe('chat.completion.chunk');
    expect(finish.choices).toEqual([{ index: 0, delta: {}, finish_reason: 'error', logprobs: null }]);
    expect(done).toBe('[DONE]');
    // Content streamed before the failure.
    expect(events.filter((e) => (e as { choices?: Array<{ delta?: { content?: string } }> }).choices?.[0]?.delta?.content).length).toBe(3);
  });

  it('text completions: the error, a finish_reason "error" choice, then [DONE]', async () => {
    const res = await server.request('/v1/completions', { prompt: 'Once upon a time', stream: true, max_tokens: 16 });
    const events = await readSse(res);
    const [error, finish, done] = events.slice(-3) as [unknown, { object: string; choices: unknown[] }, unknown];
    expect(error).toEqual(SERVER_ERROR);
    expect(finish.object).toBe('text_completion');
    expect(finish.choices).toEqual([{ index: 0, text: '', finish_reason: 'error', logprobs: null }]);
    expect(done).toBe('[DONE]');
  });

  it('Responses: response.failed carrying the error, last', async () => {
    const res = await server.request('/v1/responses', { input: 'Hi', stream: true, max_output_tokens: 16 });
    const events = await readEvents(res);
    expect(events.some((e) => e.event === 'response.output_text.delta')).toBe(true);
    const last = events.at(-1)!;
    expect(last.event).toBe('response.failed');
    expect((last.data.response as Record<string, unknown>).status).toBe('failed');
    expect((last.data.response as Record<string, unknown>).error).toEqual({ code: 'server_error', message: 'engine step failed' });
  });

  it('Anthropic: an error event, last', async () => {
    const res = await server.request('/v1/messages', { model: 'm', max_tokens: 16, stream: true, messages: [{ role: 'user', content: 'Hi' }] });
    const events = await readEvents(res);
    expect(events[0]!.event).toBe('message_start');
    expect(events.at(-1)).toEqual({ event: 'error', data: { type: 'error', error: { type: 'api_error', message: 'engine step failed' } } });
    expect(events.some((e) => e.event === 'message_stop')).toBe(false);
  });

  it('native /completion: the error object, as llama-server sends it', async () => {
    const res = await server.request('/completion', { prompt: 'Once upon a time', n_predict: 16, stream: true });
    const events = await readSse(res);
    expect(events.at(-1)).toEqual(SERVER_ERROR);
    expect(events).not.toContain('[DONE]');
  });
});
