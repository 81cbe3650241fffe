// Several choices (n) and several prompts (batches) through the real server and engine on
// stories260k: a seeded n = 3 request gives three reproducible choices (choice i is what
// the same request with seed + i gets alone) from one prefill of its prompt, over raw HTTP
// and the official openai SDK, streamed with each chunk's index; more choices than slots
// queue; llama-server's /completion prompt forms, batches and n_cmpl.
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import type { Engine } from '../src/engine/engine.js';
import { useLive } from './helpers/live-server.js';
import { waitFor } from './helpers/server-load.js';
import { storiesCase } from './helpers/stories-expected.js';

const MODEL = 'models/stories260k';
const onceUponATime = storiesCase('Once upon a time');

const wide = useLive({ model: MODEL, engine: { parallel: 4 } }); // 4 slots: every choice forks from the one prefill
const narrow = useLive({ model: MODEL, engine: { parallel: 2 } }); // 2 slots: a third choice queues

const idle = (engine: Engine) => waitFor(() => engine.stats().activeSequences === 0 && engine.stats().queueDepth === 0, 10_000, 'engine idle');
const prefilled = (engine: Engine) => engine.stats().counters.total_prefill_tokens;

// Sampled (so that choices differ), cold (so that no request depends on what an earlier
// one left in the prompt cache).
const sampled = { temperature: 1, top_k: 0, top_p: 1, min_p: 0, cache_prompt: false };
const chatRequest = { model: 'm', messages: [{ role: 'user', content: 'Tell me a story about a cat and a dog' }], max_tokens: 24, ...sampled };

describe('n choices share one prefill', () => {
  it('chat: n = 3 with a seed gives choice i of seed + i, prefilling the prompt once', async () => {
    const { engine } = wide;
    const server = wide;
    const before = prefilled(engine);
    const res = await server.post('/v1/chat/completions', { ...chatRequest, n: 3, seed: 77 });
    expect(res.status).toBe(200);
    const { choices, usage } = res.body;
    expect(choices.map((c: any) => c.index)).toEqual([0, 1, 2]);
    // The prompt is counted once, each choice's tokens summed, and prefilled once.
    const promptTokens = usage.prompt_tokens;
    expect(promptTokens % 16).not.toBe(0); // the forks copy a partly filled block
    expect(prefilled(engine) - before).toBe(promptTokens);
    const texts = choices.map((c: any) => c.message.content as string);
    expect(new Set(texts).size).toBeGreaterThan(1);

    // Each choice is what the same request gets alone with seed + i, and again with n = 3.
    let completionTokens = 0;
    for (const [i, text] of texts.entries()) {
      const alone = await server.post('/v1/chat/completions', { ...chatRequest, seed: 77 + i });
      expect(alone.body.choices[0].message.content).toBe(text);
      expect(alone.body.choices[0].finish_reason).toBe(choices[i].finish_reason);
      completionTokens += alone.body.usage.completion_tokens;
    }
    expect(usage).toMatchObject({ completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens });
    const again = await server.post('/v1/chat/completions', { ...chatRequest, n: 3, seed: 77 });
    expect(again.body.choices.map((c: any) => c.message.content)).toEqual(texts);
    await idle(engine);
  });

  it('chat: a stream tags each chunk with its choice and adds up to the same texts', async () => {
    const server = wide;
    const whole = await server.post('/v1/chat/completions', { ...chatRequest, n: 3, seed: 5 });
    const events = await server.postSse('/v1/chat/completions', { ...chatRequest, n: 3, seed: 5, stream: true, stream_options: { include_usage: true } });
    expect(events.at(-1)).toBe('[DONE]');
    const chunks = events.slice(0, -1);
    const usage = chunks.at(-1);
    expect(usage.choices).toEqual([]);
    expect(usage.usage).toEqual(whole.body.usage);
    const texts = ['', '', ''];
    const finishes: string[] = [];
    for (const chunk of chunks.slice(0, -1)) {
      expect(chunk.choices).toHaveLength(1);
      const [c] = chunk.choices;
      texts[c.index] += c.delta.content ?? '';
      if (c.finish_reason) finishes[c.index] = c.finish_reason;
    }
    expect(texts).toEqual(whole.body.choices.map((c: any) => c.message.content));
    expect(finishes).toEqual(['length', 'length', 'length']);
    // Every choice opens with its role.
    expect(chunks.filter((c) => c.choices[0]?.delta.role === 'assistant').map((c) => c.choices[0].index)).toEqual([0, 1, 2]);
  });

  it('the openai SDK reads n choices of chat and of text completions', async () => {
    const { openai: client, engine } = wide;
    const server = wide;
    const chat = await client.chat.completions.create({ ...chatRequest, n: 3, seed: 77 } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    const raw = await server.post('/v1/chat/completions', { ...chatRequest, n: 3, seed: 77 });
    expect(chat.choices.map((c) => c.message.content)).toEqual(raw.body.choices.map((c: any) => c.message.content));

    // A prompt of exactly two blocks: the forks share every block of it.
    const prompt = Array.from({ length: 32 }, (_, i) => 300 + i);
    const before = prefilled(engine);
    const text = await client.completions.create({ model: 'm', prompt, n: 3, seed: 9, max_tokens: 16, ...sampled } as OpenAI.CompletionCreateParamsNonStreaming);
    expect(prefilled(engine) - before).toBe(32);
    expect(text.choices.map((c) => c.index)).toEqual([0, 1, 2]);
    let completionTokens = 0;
    for (const [i, c] of text.choices.entries()) {
      const alone = await client.completions.create({ model: 'm', prompt, seed: 9 + i, max_tokens: 16, ...sampled } as OpenAI.CompletionCreateParamsNonStreaming);
      expect(alone.choices[0]!.text).toBe(c.text);
      completionTokens += alone.usage!.completion_tokens;
    }
    expect(text.usage).toMatchObject({ prompt_tokens: 32, completion_tokens: completionTokens, total_tokens: 32 + completionTokens });

    // Streamed through the SDK: each choice's deltas under its index.
    const streamed = ['', '', ''];
    const stream = await client.completions.create({ model: 'm', prompt, n: 3, seed: 9, max_tokens: 16, stream: true, ...sampled } as OpenAI.CompletionCreateParamsStreaming);
    for await (const chunk of stream) for (const c of chunk.choices) streamed[c.index] += c.text;
    expect(streamed).toEqual(text.choices.map((c) => c.text));
    await idle(engine);
  });

  it('more choices than slots: the third queues, runs on its own, and is still choice seed + 2', async () => {
    const { engine } = narrow;
    const server = narrow;
    const res = await server.post('/v1/chat/completions', { ...chatRequest, n: 3, seed: 31 });
    expect(res.status).toBe(200);
    expect(res.body.choices).toHaveLength(3);
    for (const [i, c] of res.body.choices.entries()) {
      const alone = await server.post('/v1/chat/completions', { ...chatRequest, seed: 31 + i });
      expect(alone.body.choices[0].message.content).toBe(c.message.content);
    }
    await idle(engine);
  });

  it('structured output holds for every choice', async () => {
    const server = wide;
    const schema = { type: 'object', properties: { pet: { enum: ['cat', 'dog', 'bird'] } }, required: ['pet'], additionalProperties: false };
    const res = await server.post('/v1/chat/completions', {
      ...chatRequest,
      max_tokens: 40,
      n: 3,
      seed: 3,
      response_format: { type: 'json_schema', json_schema: { name: 'pet', schema } },
    });
    expect(res.status).toBe(200);
    for (const c of res.body.choices) expect(['cat', 'dog', 'bird']).toContain(JSON.parse(c.message.content).pet);
  });

  it('refuses n outside 1..16', async () => {
    for (const n of [0, 17]) {
      const res = await wide.post('/v1/chat/completions', { ...chatRequest, n });
      expect(res.status).toBe(400);
      expect(res.body.error.message).toMatch(/^n must be/);
    }
  });
});

describe('prompt forms and batches', () => {
  const greedy = { n_predict: 12, temperature: 0 };

  it('/completion reads a string, token ids, ids mixed with text and a prompt object alike', async () => {
    const server = wide;
    const expected = await server.post('/completion', { prompt: 'Once upon a time', ...greedy });
    expect(expected.body).toMatchObject({ index: 0, tokens_evaluated: 5 });
    for (const prompt of [onceUponATime.prompt_token_ids, [1, 'Once upon a time'], [1, 403, 'upon a time'], { prompt_string: 'Once upon a time' }]) {
      const res = await server.post('/completion', { prompt, ...greedy });
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ content: expected.body.content, tokens_evaluated: 5 });
    }
    // Media in any form is refused (llama-server would read a string as one file) until the
    // loaded model takes images; batched or streamed alike.
    for (const multimodal_data of [['aGk='], 'aGk=', '', { image: 'aGk=' }]) {
      for (const body of [{ prompt: { prompt_string: 'x <__media__>', multimodal_data } }, { prompt: ['a', { prompt_string: 'x <__media__>', multimodal_data }], stream: true }]) {
        const media = await server.post('/completion', { ...body, ...greedy });
        expect(media.status, JSON.stringify(body)).toBe(400);
        expect(media.body.error).toMatchObject({ type: 'invalid_request_error', message: 'the loaded model takes text only; multimodal_data is not supported' });
      }
    }
    // No media: an empty list, or null, leaves the prompt text as it is.
    for (const multimodal_data of [[], null]) {
      const res = await server.post('/completion', { prompt: { prompt_string: 'Once upon a time', multimodal_data }, ...greedy });
      expect(res.body).toMatchObject({ content: expected.body.content, tokens_evaluated: 5 });
    }
  });

  it('/completion answers a batch with an array, each result at its index, streamed or not', async () => {
    const server = wide;
    const prompts = ['Once upon a time', [1, 403, 407], { prompt_string: 'The cat' }];
    const alone = await Promise.all(prompts.map((prompt) => server.post('/completion', { prompt, ...greedy })));
    const res = await server.post('/completion', { prompt: prompts, ...greedy });
    expect(res.status).toBe(200);
    expect(res.body.map((r: any) => r.index)).toEqual([0, 1, 2]);
    expect(res.body.map((r: any) => r.content)).toEqual(alone.map((a) => a.body.content));
    expect(res.body.map((r: any) => r.tokens_evaluated)).toEqual(alone.map((a) => a.body.tokens_evaluated));

    const events = await server.postSse('/completion', { prompt: prompts, ...greedy, stream: true });
    const texts = ['', '', ''];
    for (const e of events.filter((e) => !e.stop)) texts[e.index] += e.content;
    expect(texts).toEqual(res.body.map((r: any) => r.content));
    expect(events.filter((e) => e.stop).map((e) => e.index).sort()).toEqual([0, 1, 2]);

    // n_cmpl: each prompt's completions in a row.
    const twice = await server.post('/completion', { prompt: prompts.slice(0, 2), ...greedy, n_cmpl: 2 });
    expect(twice.body.map((r: any) => r.content)).toEqual([0, 0, 1, 1].map((p) => alone[p]!.body.content));
  });

  it('/completion with n_cmpl: each result streams its prompt_progress, its tokens and its own settings', async () => {
    const server = wide;
    const prompt = Array.from({ length: 40 }, (_, i) => 300 + i);
    const body = { prompt, n_cmpl: 2, n_predict: 6, seed: 11, ...sampled, return_progress: true };
    const whole = await server.post('/completion', { ...body, return_tokens: true, response_fields: ['content', 'tokens', 'generation_settings/seed', 'index'] });
    expect(whole.body).toEqual([0, 1].map((index) => ({ index, content: expect.any(String), tokens: expect.any(Array), 'generation_settings/seed': 11 + index })));
    const events = await server.postSse('/completion', { ...body, stream: true });
    for (const index of [0, 1]) {
      const mine = events.filter((e) => e.index === index);
      const progress = mine.filter((e) => e.prompt_progress);
      // Progress comes first (the fork's once, as it forks) and ends with the whole prompt.
      expect(progress.length).toBeGreaterThan(0);
      expect(mine.slice(0, progress.length)).toEqual(progress);
      expect(progress.at(-1).prompt_progress).toMatchObject({ total: 40, processed: 40 });
      const tokens = mine.filter((e) => !e.prompt_progress && !e.stop).flatMap((e) => e.tokens);
      expect(tokens).toEqual(whole.body[index].tokens);
      expect(mine.at(-1)).toMatchObject({ stop: true, index, generation_settings: { seed: 11 + index } });
    }
  });

  it('choices fork from a prompt the prompt cache serves to the token, before and after a cache reset', async () => {
    const { engine } = wide;
    const server = wide;
    // Cached (to the token, its last block partly) by a first request; then n = 3 borrows
    // it, prefills the rest once and forks. Each choice is still what seed + i gets cold.
    const prompt = Array.from({ length: 37 }, (_, i) => 300 + ((i * 7) % 100));
    const request = { prompt, n_predict: 10, temperature: 1, top_k: 0, top_p: 1, min_p: 0 };
    await server.post('/completion', { ...request, prompt: [...prompt, 5, 6], seed: 1 });
    const cold = await Promise.all([0, 1, 2].map((i) => server.post('/completion', { ...request, seed: 40 + i, cache_prompt: false })));
    for (const round of [0, 1]) {
      const res = await server.post('/completion', { ...request, seed: 40, n_cmpl: 3 });
      expect(res.status).toBe(200);
      expect(res.body.map((r: any) => r.content)).toEqual(cold.map((c) => c.body.content));
      expect(res.body[0].tokens_cached).toBe(round === 0 ? 36 : 0);
      await idle(engine);
      if (round === 0) expect((await server.post('/v1/cache/reset', {})).status).toBe(200);
    }
  });

  it('/v1/completions: an array of prompts gives a choice per prompt, times n', async () => {
    const { openai: client } = wide;
    const prompts = ['Once upon a time', 'The cat'];
    const res = await client.completions.create({ model: 'm', prompt: prompts, max_tokens: 8, temperature: 0, n: 2 });
    expect(res.choices.map((c) => c.index)).toEqual([0, 1, 2, 3]);
    const alone = await Promise.all(prompts.map((prompt) => client.completions.create({ model: 'm', prompt, max_tokens: 8, temperature: 0 })));
    expect(res.choices.map((c) => c.text)).toEqual([0, 0, 1, 1].map((p) => alone[p]!.choices[0]!.text));
    // Each prompt counted once, every choice's tokens summed.
    const promptTokens = alone.reduce((n, a) => n + a.usage!.prompt_tokens, 0);
    expect(res.usage).toMatchObject({ prompt_tokens: promptTokens, completion_tokens: 32 });
    const tokenBatch = await client.completions.create({ model: 'm', prompt: [[1, 403, 407], [1, 450]], max_tokens: 4, temperature: 0 });
    expect(tokenBatch.choices).toHaveLength(2);
  });
});
