// --context-shift through the real server and engine on stories260k with a 64-token
// context: without it a generation stops when the context is full; with it the sequence
// drops the older half of its tokens after n_keep and generates on, past the context,
// exactly as a fresh generation from what it kept would.
import { describe, expect, it } from 'vitest';
import type { GenerationRequest } from '../src/engine/types.js';
import { useModel, useServer } from './helpers/live-server.js';
import { readSse } from './helpers/sse.js';

const CONTEXT = 64;
const PROMPT = [1, 403, 407, 261, 378]; // "<s>Once upon a time"

const live = useModel({ model: 'models/stories260k', engine: { parallel: 1, contextSize: CONTEXT } });
const plain = useServer(live);
const shifting = useServer(live, { server: { sampling: { context_shift: true } } });

/** Greedy token ids straight from the live.engine. */
async function generate(promptTokens: number[], maxTokens: number, contextShift?: GenerationRequest['contextShift']): Promise<number[]> {
  const ids: number[] = [];
  const req: GenerationRequest = { promptTokens, maxTokens, sampling: { temperature: 0, topK: 0, topP: 1 }, cachePrompt: false, ...(contextShift ? { contextShift } : {}) };
  for await (const event of live.engine.generate(req)) if (event.type === 'token') ids.push(event.id);
  return ids;
}

describe('context shift', () => {
  const request = { prompt: 'Once upon a time', n_predict: 150, temperature: 0, cache_prompt: false };

  it('without --context-shift a generation stops when the context is full', async () => {
    const res = await plain.post('/completion', request);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ tokens_evaluated: 5, tokens_predicted: CONTEXT - 5, stop_type: 'limit', truncated: true });
  });

  it('with it, the same request generates past the context, its first part unchanged', async () => {
    const full = await plain.post('/completion', request);
    const res = await shifting.post('/completion', request);
    expect(res.status).toBe(200);
    // A shift dropped tokens: truncated, as llama-server says; a request that ends before
    // the context fills is not.
    expect(res.body).toMatchObject({ tokens_evaluated: 5, tokens_predicted: 150, stop_type: 'limit', truncated: true });
    expect(res.body.content.startsWith(full.body.content)).toBe(true);
    expect((await shifting.post('/completion', { ...request, n_predict: 20 })).body).toMatchObject({ tokens_predicted: 20, truncated: false });
    const streamed = await fetch(shifting.url + '/completion', { method: 'POST', body: JSON.stringify({ ...request, stream: true }) });
    expect((await readSse(streamed)).at(-1)).toMatchObject({ stop: true, tokens_predicted: 150, truncated: true });
    // Through the OpenAI route too, where max_tokens is no longer capped by the room left.
    const chat = await shifting.post('/v1/completions', { prompt: 'Once upon a time', max_tokens: 100, temperature: 0, cache_prompt: false });
    expect(chat.body.usage.completion_tokens).toBe(100);
    expect(chat.body.choices[0].finish_reason).toBe('length');
  });

  it('after a shift the sequence goes on as a fresh generation from the tokens it kept', async () => {
    for (const keep of [0, 3, 17]) {
      const shifted = await generate(PROMPT, 90, { keep });
      expect(shifted).toHaveLength(90);
      // The context fills at 64 tokens: 63 written, the last sampled one pending.
      const context = [...PROMPT, ...shifted].slice(0, CONTEXT);
      const discard = Math.floor((CONTEXT - 1 - keep) / 2);
      const kept = [...context.slice(0, keep), ...context.slice(keep + discard)];
      const produced = CONTEXT - PROMPT.length;
      // Until the next shift, what follows is the greedy continuation of `kept`.
      const room = CONTEXT - kept.length;
      const fresh = await generate(kept, room);
      expect(shifted.slice(produced, produced + room)).toEqual(fresh);
    }
  });

  it('n_keep keeps the start of the prompt (-1: all of it); the default keeps only BOS', async () => {
    const base = { ...request, n_predict: 120 };
    const outputs = await Promise.all([
      shifting.post('/completion', base),
      shifting.post('/completion', { ...base, n_keep: 0 }),
      shifting.post('/completion', { ...base, n_keep: -1 }),
    ]);
    for (const o of outputs) expect(o.body.tokens_predicted).toBe(120);
    // Absent n_keep is --keep's 0; all of them agree until the first shift.
    expect(outputs[0].body.content).toBe(outputs[1].body.content);
    const beforeShift = (await plain.post('/completion', request)).body.content;
    for (const o of outputs) expect(o.body.content.startsWith(beforeShift)).toBe(true);
    const bad = await shifting.post('/completion', { ...base, n_keep: -2 });
    expect(bad.status).toBe(400);
  });
});
