// llama-server's native fields where the REST reference is silent, over raw HTTP (and the
// openai SDK where it has the field), against a live server on the real engine and the
// trained stories260k model (greedy outputs from expected.json).
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/engine/engine.js';
import { loadEngine } from '../src/engine/load.js';
import { startServer, type RunningServer } from '../src/server/server.js';
import { readSse } from './helpers/sse.js';
import { STORIES_DIR, storiesCase } from './helpers/stories-expected.js';

const onceUponATime = storiesCase('Once upon a time');
/** stories260k's end-of-sequence token (banned below to run into the context's end). */
const EOS = 2;

let engine: Engine;
let server: RunningServer;

beforeAll(async () => {
  engine = await loadEngine({ modelDir: 'models/stories260k' });
  server = await startServer(engine, { host: '127.0.0.1', port: 0 });
});

afterAll(async () => {
  await server?.close();
  await engine?.close();
});

async function post(path: string, body: unknown) {
  const res = await fetch(server.url + path, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  return { status: res.status, body: (await res.json()) as any };
}

async function stream(path: string, body: Record<string, unknown>) {
  const res = await fetch(server.url + path, { method: 'POST', body: JSON.stringify({ ...body, stream: true }) });
  expect(res.status).toBe(200);
  return (await readSse(res)) as any[];
}

describe('/completion response fields', () => {
  it('carries tokens, generation_settings, prompt, has_new_line and truncated', async () => {
    const res = await post('/completion', {
      prompt: 'Once upon a time',
      n_predict: 64,
      temperature: 0,
      return_tokens: true,
      logit_bias: [[EOS, false], ['Lily', -2]],
      stop: ['dragon'],
    });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      content: onceUponATime.expected_text,
      tokens: onceUponATime.expected_token_ids,
      prompt: '<s> Once upon a time',
      has_new_line: onceUponATime.expected_text.includes('\n'),
      truncated: false,
      stop_type: 'limit',
    });
    const lily = engine.tokenizer.encode('Lily', false);
    expect(res.body.generation_settings).toMatchObject({
      temperature: 0,
      top_k: 40,
      n_predict: 64,
      max_tokens: 64,
      stop: ['dragon'],
      stream: false,
      seed: 4294967295,
      n_probs: 0,
      logit_bias: [{ bias: null, token: EOS }, ...lily.map((token) => ({ bias: -2, token }))],
    });
  });

  it('leaves tokens empty without return_tokens', async () => {
    const res = await post('/completion', { prompt: 'Once upon a time', n_predict: 4, temperature: 0 });
    expect(res.body.tokens).toEqual([]);
  });

  it('is truncated when the completion runs into the end of the context', async () => {
    const prompt = engine.tokenizer.encode('Once upon a time '.repeat(120), true);
    expect(prompt.length).toBeLessThan(512);
    const res = await post('/completion', { prompt, temperature: 0, logit_bias: [[EOS, false]] });
    expect(res.body).toMatchObject({ truncated: true, stop_type: 'limit', tokens_evaluated: prompt.length, tokens_predicted: 512 - prompt.length });
  });

  it('streams token ids with each chunk and ends with the summary', async () => {
    const events = await stream('/completion', { prompt: 'Once upon a time', n_predict: 64, temperature: 0 });
    const chunks = events.slice(0, -1);
    expect(chunks.map((c) => c.content).join('')).toBe(onceUponATime.expected_text);
    expect(chunks.flatMap((c) => c.tokens)).toEqual(onceUponATime.expected_token_ids);
    expect(chunks.at(-1)).toMatchObject({ stop: false, tokens_predicted: 64, tokens_evaluated: 5 });
    expect(events.at(-1)).toMatchObject({ stop: true, content: '', tokens: [], truncated: false, generation_settings: { stream: true, n_predict: 64 } });
  });

  it('is also served on /completions, as llama-server serves it', async () => {
    const res = await post('/completions', { prompt: 'Once upon a time', n_predict: 64, temperature: 0 });
    expect(res.body).toMatchObject({ content: onceUponATime.expected_text, stop: true, tokens_predicted: 64 });
  });

  it('projects response_fields, nested paths keeping their full name', async () => {
    const res = await post('/completion', {
      prompt: 'Once upon a time',
      n_predict: 8,
      temperature: 0,
      response_fields: ['content', 'generation_settings/n_predict', 'timings/predicted_n', 'no_such_field', 'content/deeper'],
    });
    expect(res.body).toEqual({
      content: onceUponATime.expected_text.slice(0, res.body.content.length),
      'generation_settings/n_predict': 8,
      'timings/predicted_n': 8,
    });
    expect(res.body.content.length).toBeGreaterThan(0);
  });

  it('names both sizes when the prompt does not fit, on /completion too', async () => {
    const prompt = engine.tokenizer.encode('Once upon a time '.repeat(200), true);
    const res = await post('/completion', { prompt, n_predict: 1 });
    expect(res.status).toBe(400);
    expect(res.body.error).toEqual({
      message: `request (${prompt.length} tokens) exceeds the available context size (512 tokens), try increasing it`,
      type: 'invalid_request_error',
      code: 'context_length_exceeded',
      n_prompt_tokens: prompt.length,
      n_ctx: 512,
    });
  });
});

describe('/tokenize with_pieces', () => {
  it('gives each token its piece: text, or the bytes where they are not UTF-8 on their own', async () => {
    const content = 'Once upon a time, á';
    const ids = (await post('/tokenize', { content })).body.tokens as number[];
    const res = await post('/tokenize', { content, with_pieces: true });
    expect(res.status).toBe(200);
    const pieces = res.body.tokens as Array<{ id: number; piece: string | number[] }>;
    expect(pieces.map((p) => p.id)).toEqual(ids);
    expect(pieces[0]).toEqual({ id: ids[0], piece: ' Once' });
    // stories260k has no token for "á": it is two byte tokens, 0xC3 and 0xA1, as in llama-server's README.
    expect(pieces.slice(-2).map((p) => p.piece)).toEqual([[0xc3], [0xa1]]);
    const bytes = pieces.flatMap((p) => (typeof p.piece === 'string' ? [...Buffer.from(p.piece)] : p.piece));
    expect(Buffer.from(bytes).toString()).toBe(` ${content}`);
  });
});

describe('/props and /slots', () => {
  it('/props carries model_path, n_ctx and the default params', async () => {
    const res = await fetch(`${server.url}/props`);
    const body = (await res.json()) as any;
    expect(body.model_path).toBe(STORIES_DIR);
    expect(body.default_generation_settings).toMatchObject({
      n_ctx: 512,
      n_predict: -1,
      temperature: 0.8,
      params: { n_predict: -1, temperature: 0.8, top_k: 40, top_p: 0.95, min_p: 0.05, seed: 4294967295, logit_bias: [], stop: [] },
    });
  });

  it('/slots entries carry n_ctx', async () => {
    const res = await fetch(`${server.url}/slots`);
    const slots = (await res.json()) as any[];
    expect(slots.length).toBeGreaterThan(0);
    for (const slot of slots) expect(slot).toMatchObject({ n_ctx: 512, context_size: 512 });
  });
});

describe('chat completions keep the REST reference wire shape', () => {
  it('system_fingerprint stays null and the stream opens with the role', async () => {
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const chunks = [];
    const s = await client.chat.completions.create({ model: 'stories260k', messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 4, stream: true });
    for await (const chunk of s) chunks.push(chunk);
    expect(chunks[0]!.choices[0]!.delta).toEqual({ role: 'assistant' });
    expect(chunks.every((c) => c.system_fingerprint === null)).toBe(true);
  });
});
