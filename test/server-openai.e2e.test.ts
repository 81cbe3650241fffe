// The OpenAI routes through the official client, against a live server on the real
// engine and the trained stories260k model (greedy outputs from expected.json).
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { useLive } from './helpers/live-server.js';
import { storiesCase } from './helpers/stories-expected.js';

const onceUponATime = storiesCase('Once upon a time');
const lilyWantedTo = storiesCase('Lily wanted to');

const live = useLive({ model: 'models/stories260k' });

describe('OpenAI API on stories260k', () => {
  it('lists the model', async () => {
    const models = await live.openai.models.list();
    expect(models.data.map((m) => m.id)).toEqual(['stories260k']);
  });

  it('completions reproduce the greedy expected text, leading space included', async () => {
    // The second prompt shares the first one's BOS, which the prompt cache serves.
    for (const [c, cached] of [[onceUponATime, 0], [lilyWantedTo, 1]] as const) {
      const res = await live.openai.completions.create({ model: 'stories260k', prompt: c.prompt, max_tokens: 64, temperature: 0 });
      expect(res.choices[0]!.text).toBe(c.expected_text);
      expect(res.choices[0]!.finish_reason).toBe('length');
      expect(res.usage).toEqual({ prompt_tokens: 5, completion_tokens: 64, total_tokens: 69, prompt_tokens_details: { cached_tokens: cached } });
    }
  });

  it('chat renders "<s>Once upon a time" and continues it greedily', async () => {
    const res = await live.openai.chat.completions.create({
      model: 'stories260k',
      messages: [{ role: 'user', content: 'Once upon a time' }],
      max_tokens: 64,
      temperature: 0,
    });
    expect(res.id).toMatch(/^chatcmpl-/);
    expect(res.choices[0]!.message).toMatchObject({ role: 'assistant', content: onceUponATime.expected_text });
    expect(res.choices[0]!.finish_reason).toBe('length');
    expect(res.usage).toMatchObject({ prompt_tokens: 5, completion_tokens: 64, total_tokens: 69 });
  });

  it('streams chat with include_usage', async () => {
    const stream = await live.openai.chat.completions.create({
      model: 'stories260k',
      messages: [{ role: 'user', content: 'Once upon a time' }],
      max_tokens: 64,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
    });
    let content = '';
    const finishReasons: Array<string | null> = [];
    let usage: OpenAI.CompletionUsage | null | undefined;
    let role: string | undefined;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      const choice = chunk.choices[0];
      if (!choice) continue;
      role ??= choice.delta.role;
      content += choice.delta.content ?? '';
      finishReasons.push(choice.finish_reason);
    }
    expect(role).toBe('assistant');
    expect(content).toBe(onceUponATime.expected_text);
    expect(finishReasons.at(-1)).toBe('length');
    expect(finishReasons.slice(0, -1).every((r) => r === null)).toBe(true);
    // The same 5 prompt tokens as the request before: all but the last come from the prompt cache.
    expect(usage).toEqual({ prompt_tokens: 5, completion_tokens: 64, total_tokens: 69, prompt_tokens_details: { cached_tokens: 4 } });
  });

  it('streams completions', async () => {
    const stream = await live.openai.completions.create({
      model: 'stories260k',
      prompt: lilyWantedTo.prompt,
      max_tokens: 64,
      temperature: 0,
      stream: true,
    });
    let text = '';
    let finish: string | null = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.text ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    expect(text).toBe(lilyWantedTo.expected_text);
    expect(finish).toBe('length');
  });

  it('ends at stop strings, streaming or not', async () => {
    const res = await live.openai.completions.create({
      model: 'stories260k',
      prompt: 'Once upon a time',
      max_tokens: 64,
      temperature: 0,
      stop: ['Lily', 'park'],
    });
    expect(res.choices[0]!.text).toBe(', there was a little girl named ');
    expect(res.choices[0]!.finish_reason).toBe('stop');

    const stream = await live.openai.chat.completions.create({
      model: 'stories260k',
      messages: [{ role: 'user', content: 'Once upon a time' }],
      max_tokens: 64,
      temperature: 0,
      stop: 'red ball',
      stream: true,
    });
    let content = '';
    let finish: string | null = null;
    for await (const chunk of stream) {
      content += chunk.choices[0]?.delta.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    const expectedPrefix = onceUponATime.expected_text.slice(0, onceUponATime.expected_text.indexOf('red ball'));
    expect(content).toBe(expectedPrefix);
    expect(finish).toBe('stop');
  });

  it('rejects a prompt longer than the context with 400 and the token counts', async () => {
    const prompt = 'Once upon a time '.repeat(200);
    const err = await live.openai.completions.create({ model: 'stories260k', prompt, max_tokens: 1 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).code).toBe('context_length_exceeded');
    expect((err as Error).message).toMatch(/request \(\d+ tokens\) exceeds the available context size \(512 tokens\), try increasing it/);
    // The SDK's `error` is the envelope's error object, llama-server's two counts included.
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).error).toMatchObject({ type: 'invalid_request_error', n_prompt_tokens: 802, n_ctx: 512 });
  });

  it('a client that disconnects mid-stream does not disturb the next request', async () => {
    const controller = new AbortController();
    const stream = await live.openai.chat.completions.create(
      { model: 'stories260k', messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 400, stream: true },
      { signal: controller.signal },
    );
    let chunks = 0;
    // The client ends the iteration quietly once aborted.
    for await (const _chunk of stream) {
      if (++chunks === 3) controller.abort();
    }
    expect(chunks).toBe(3);
    // The server notices the closed connection and frees the sequence.
    for (let i = 0; i < 100 && live.engine.stats().activeSequences > 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect(live.engine.stats()).toMatchObject({ activeSequences: 0, queueDepth: 0 });

    const res = await live.openai.completions.create({ model: 'stories260k', prompt: 'Once upon a time', max_tokens: 64, temperature: 0 });
    expect(res.choices[0]!.text).toBe(onceUponATime.expected_text);
    for (let i = 0; i < 100 && live.engine.stats().activeSequences > 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect(live.engine.stats()).toMatchObject({ activeSequences: 0, queueDepth: 0 });
  });
});
