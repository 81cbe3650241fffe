// The HTTP layer over a fake engine: shapes, validation, errors, auth, loading and
// disconnects. The same routes over the real engine are in the *.e2e tests.
import { request } from 'node:http';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Engine } from '../src/engine/engine.js';
import type { ServerOptions } from '../src/server/server.js';
import { FakeEngine, ONCE_UPON_A_TIME_TEXT } from './helpers/fake-engine.js';
import { serve as serveOn, type LiveServer } from './helpers/live-server.js';
import { readSse } from './helpers/sse.js';

let running: LiveServer | undefined;
afterEach(async () => {
  await running?.close();
  running = undefined;
});

async function serve(engine: Engine | Promise<Engine>, apiKey?: string, options: Partial<ServerOptions> = {}): Promise<string> {
  running = await serveOn(engine, { server: { apiKey, ...options } });
  return running.url;
}

async function waitFor(condition: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !condition(); i++) await new Promise((r) => setTimeout(r, 10));
  expect(condition()).toBe(true);
}

const chat = (content: string, extra: Record<string, unknown> = {}) => ({
  model: 'x',
  messages: [{ role: 'user', content }],
  temperature: 0,
  ...extra,
});

describe('health and models', () => {
  it('reports the model on GET /health and GET /', async () => {
    const url = await serve(await FakeEngine.create());
    for (const path of ['/health', '/']) {
      const res = await fetch(url + path);
      expect(res.status).toBe(200);
      expect(await res.json()).toMatchObject({
        status: 'ok',
        model: 'stories260k',
        context_size: 512,
        batch: { active_sequences: 0, queue_depth: 0, max_batch_size: 1 },
        observability: { sequences_completed: 0, current_batch_size: 0 },
        tool_call_parser: null,
      });
    }
  });

  it('reports "no slot available" with 503 while every slot is busy', async () => {
    const engine = await FakeEngine.create({ tokenDelayMs: 20 });
    const url = await serve(engine);
    const pending = running!.post(`/v1/completions`, { prompt: 'Once upon a time', max_tokens: 5 });
    await waitFor(() => engine.running === 1);
    const res = await fetch(`${url}/health`);
    expect(res.status).toBe(503);
    expect(await res.json()).toMatchObject({ status: 'no slot available', batch: { active_sequences: 1 } });
    await pending;
    expect((await fetch(`${url}/health`)).status).toBe(200);
  });

  it('answers 503 while the model loads, then serves', async () => {
    let resolve!: (e: Engine) => void;
    const url = await serve(new Promise<Engine>((r) => (resolve = r)));
    const health = await fetch(`${url}/health`);
    expect(health.status).toBe(503);
    expect(await health.json()).toEqual({ status: 'loading model', error: { code: 503, message: 'Loading model', type: 'unavailable_error' } });
    const busy = await running!.post(`/v1/chat/completions`, chat('Once upon a time'));
    expect(busy.status).toBe(503);
    expect(busy.body.error).toMatchObject({ type: 'server_busy' });

    resolve(await FakeEngine.create());
    await new Promise((r) => setTimeout(r, 0));
    expect((await fetch(`${url}/health`)).status).toBe(200);
    expect((await running!.post(`/v1/chat/completions`, chat('Once upon a time'))).status).toBe(200);
  });

  it('lists the model on GET /v1/models', async () => {
    const url = await serve(await FakeEngine.create());
    const body = (await (await fetch(`${url}/v1/models`)).json()) as any;
    expect(body).toMatchObject({ object: 'list', data: [{ id: 'stories260k', object: 'model', owned_by: 'user' }] });
    expect(typeof body.data[0].created).toBe('number');
  });

  it('answers GET /models as GET /v1/models, behind the API key', async () => {
    const url = await serve(await FakeEngine.create(), 'sesame');
    const auth = { headers: { Authorization: 'Bearer sesame' } };
    const res = await fetch(`${url}/models`, auth);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual(await (await fetch(`${url}/v1/models`, auth)).json());
    expect((await fetch(`${url}/models`)).status).toBe(401);
  });
});

describe('request errors', () => {
  it('answers malformed JSON with 400 invalid_request_error', async () => {
    await serve(await FakeEngine.create());
    const res = await running!.post(`/v1/chat/completions`, '{"messages": [');
    expect(res.status).toBe(400);
    expect(res.body.error).toMatchObject({ type: 'invalid_request_error', code: null });
    expect(res.body.error.message).toMatch(/malformed JSON/);
  });

  it.each([
    ['/v1/chat/completions', { model: 'x' }, 'messages is required'],
    ['/v1/chat/completions', chat('hi', { temperature: 'hot' }), 'temperature must be number'],
    ['/v1/chat/completions', { messages: [{ content: 'hi' }] }, 'messages[0].role is required'],
    ['/v1/chat/completions', { messages: [] }, 'messages must NOT have fewer than 1 items'],
    ['/v1/chat/completions', chat('hi', { max_tokens: 1.5 }), 'max_tokens must be integer'],
    ['/v1/chat/completions', chat('hi', { stop: 5 }), 'stop must be string or array'],
    ['/v1/chat/completions', chat('hi', { n: 0 }), 'n must be >= 1'],
    [
      '/v1/chat/completions',
      { messages: [{ role: 'user', content: [{ type: 'file', file: { file_id: 'x' } }] }] },
      'messages[0].content[0].type must be one of: text, image_url, video_url, input_audio',
    ],
    ['/v1/chat/completions', { messages: [{ role: 'user', content: [{ type: 'text' }] }] }, 'messages[0].content[0].text is required'],
    ['/v1/chat/completions', [1, 2], 'request body must be object'],
    ['/v1/completions', { max_tokens: 3 }, 'prompt is required'],
    ['/v1/completions', { prompt: [['a', 1], true] }, 'prompt[1] must be a string, token ids, ids mixed with strings, or a {"prompt_string"} object'],
    ['/v1/completions', { prompt: 'x', n: 17 }, 'n must be <= 16'],
    ['/completion', { prompt: { prompt_string: 'x', multimodal_data: ['aGk='] } }, 'the loaded model takes text only; multimodal_data is not supported'],
    ['/v1/completions', { prompt: [1, 9999] }, 'prompt token id 9999 is out of vocabulary range (vocab_size 512)'],
    ['/completion', { n_predict: 3 }, 'prompt is required'],
    ['/completion', { prompt: 'x', n_predict: 'many' }, 'n_predict must be integer'],
    ['/completion', { prompt: 'x', thinking_budget_tokens: -2 }, 'thinking_budget_tokens must be an integer >= -1 (-1 = no limit)'],
    ['/completion', { prompt: 'x', reasoning_budget_tokens: 1.5 }, 'reasoning_budget_tokens must be integer'],
    ['/completion', { prompt: 'x', reasoning_budget: 'all' }, 'reasoning_budget must be integer'],
    ['/completion', { prompt: 'x', reasoning_budget: -5 }, 'reasoning_budget must be an integer >= -1'],
    ['/completion', { prompt: 'x', reasoning_budget: 4, reasoning_budget_message: 7 }, 'reasoning_budget_message must be string'],
    ['/tokenize', {}, 'content is required'],
    ['/detokenize', { tokens: ['a'] }, 'tokens[0] must be integer'],
  ])('POST %s %j -> 400 "%s"', async (path, body, message) => {
    await serve(await FakeEngine.create());
    const res = await running!.post(path, body);
    expect(res.status).toBe(400);
    expect(res.body.error.type).toBe('invalid_request_error');
    expect(res.body.error.message).toContain(message);
  });

  it('answers unknown routes with a 404 envelope', async () => {
    const url = await serve(await FakeEngine.create());
    const res = await fetch(`${url}/v1/nothing`);
    expect(res.status).toBe(404);
    expect(await res.json()).toEqual({ error: { message: 'no route for GET /v1/nothing', type: 'not_found_error', code: null } });
  });

  it('rejects a prompt that does not fit the context before any work', async () => {
    const engine = await FakeEngine.create({ contextSize: 8 });
    await serve(engine);
    const res = await running!.post(`/v1/completions`, { prompt: 'Once upon a time, there was a little girl' });
    expect(res.status).toBe(400);
    expect(res.body.error).toMatchObject({ code: 'context_length_exceeded', n_prompt_tokens: 13, n_ctx: 8 });
    expect(res.body.error.message).toContain('13 tokens');
    expect(engine.requests).toHaveLength(0);
  });

  it('caps max_tokens at the room left in the context', async () => {
    const engine = await FakeEngine.create({ contextSize: 8 });
    await serve(engine);
    const res = await running!.post(`/v1/completions`, { prompt: 'Once upon a time', max_tokens: 100 });
    expect(res.body.choices[0].finish_reason).toBe('length');
    expect(engine.requests[0]!.maxTokens).toBe(3);
  });
});

/** `{"a":{"a":...1...}}` as text: a body `depth` levels deep, built without recursion. */
const nested = (depth: number) => '{"a":'.repeat(depth - 1) + '{}' + '}'.repeat(depth - 1);

/** A history long enough to compact on the fake engine's 512-token context. */
const compactable = [
  { role: 'user', content: 'Once upon a time there was a little dog who loved to run in the park.' },
  { role: 'assistant', content: 'One day the dog saw a big red ball and ran after it all the way home.' },
  { role: 'user', content: 'Once upon a time' },
];

describe('error paths', () => {
  it('answers a malformed percent-escape in a path parameter with 400, whatever the method', async () => {
    const logged = vi.spyOn(console, 'error').mockImplementation(() => {});
    const url = await serve(await FakeEngine.create());
    for (const [method, path] of [
      ['GET', '/v1/responses/%ZZ'],
      ['DELETE', '/v1/responses/%ZZ'],
      ['POST', '/v1/responses/%ZZ/cancel'],
      ['POST', '/responses/%E0%A4%A/cancel'],
      ['PUT', '/v1/responses/%ZZ'],
      ['PROPFIND', '/responses/%ZZ'],
    ] as const) {
      const res = await fetch(url + path, { method });
      expect(res.status, `${method} ${path}`).toBe(400);
      const body = (await res.json()) as any;
      expect(body.error).toMatchObject({ type: 'invalid_request_error', code: null });
      expect(body.error.message).toMatch(/^malformed percent-encoding in the request path: Failed to decode param/);
    }
    expect(logged).not.toHaveBeenCalled();
    logged.mockRestore();
  });

  it("answers an unknown route 404 in the path's envelope whatever the method", async () => {
    const url = await serve(await FakeEngine.create());
    for (const method of ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'PROPFIND', 'M-SEARCH']) {
      const openai = await fetch(`${url}/v1/nothing`, { method });
      expect(openai.status, method).toBe(404);
      expect(await openai.json()).toEqual({ error: { message: `no route for ${method} /v1/nothing`, type: 'not_found_error', code: null } });
      const anthropic = await fetch(`${url}/v1/messages/nothing`, { method });
      expect(anthropic.status, method).toBe(404);
      expect(await anthropic.json()).toEqual({
        type: 'error',
        error: { type: 'not_found_error', message: `no route for ${method} /v1/messages/nothing` },
      });
    }
    expect((await fetch(`${url}/v1/chat/completions`)).status).toBe(404);
  });

  it('refuses a body nested deeper than 128 levels with 400, in the route family envelope', async () => {
    const logged = vi.spyOn(console, 'error').mockImplementation(() => {});
    await serve(await FakeEngine.create());
    const atLimit = `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1,"x":${nested(127)}}`;
    expect((await running!.post(`/v1/chat/completions`, atLimit)).status).toBe(200);
    const tooDeep = `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1,"x":${nested(128)}}`;
    expect(await running!.post(`/v1/chat/completions`, tooDeep)).toEqual({
      status: 400,
      body: { error: { message: 'request body nests deeper than 128 levels', type: 'invalid_request_error', code: null } },
    });
    // Brackets inside strings do not count; an escaped quote does not end a string, an
    // escaped backslash before a quote does.
    const inStrings = JSON.stringify({ messages: [{ role: 'user', content: `\\"${'['.repeat(300)}\\` }], max_tokens: 1, x: '{'.repeat(300) });
    expect((await running!.post(`/v1/chat/completions`, inStrings)).status).toBe(200);
    const afterBackslash = `{"messages":[{"role":"user","content":"hi\\\\"}],"max_tokens":1,"x":${nested(128)}}`;
    expect((await running!.post(`/v1/chat/completions`, afterBackslash)).body.error.message).toBe('request body nests deeper than 128 levels');
    const metadata = await running!.post(`/v1/responses`, `{"input":"hi","metadata":${nested(20_000)}}`);
    expect(metadata.status).toBe(400);
    expect(metadata.body.error.message).toBe('request body nests deeper than 128 levels');
    const arrays = await running!.post(`/v1/messages`, '['.repeat(100_000) + ']'.repeat(100_000));
    expect(arrays).toEqual({
      status: 400,
      body: { type: 'error', error: { type: 'invalid_request_error', message: 'request body nests deeper than 128 levels' } },
    });
    expect(logged).not.toHaveBeenCalled();
    logged.mockRestore();
  });

  it('refuses a compaction whose summary generation writes no text with 400, changing nothing', async () => {
    const logged = vi.spyOn(console, 'error').mockImplementation(() => {});
    // Every generation ends at once, with an EOS.
    await serve(await FakeEngine.create({ script: () => [] }));
    const res = await running!.post(`/v1/responses/compact`, { input: compactable, max_output_tokens: 16 });
    expect(res.status).toBe(400);
    expect(res.body.error).toMatchObject({ type: 'invalid_request_error', code: 'context_length_exceeded', n_ctx: 512 });
    expect(res.body.error.message).toBe(
      'compaction failed: the summary generation produced no text within max_output_tokens 16; nothing was changed',
    );
    // context_management compacts the same way before generating.
    const managed = await running!.post(`/v1/responses`, { input: compactable, context_management: [{ type: 'compaction', compact_threshold: 1 }] });
    expect(managed.status).toBe(400);
    expect(managed.body.error.code).toBe('context_length_exceeded');
    expect(logged).not.toHaveBeenCalled();
    logged.mockRestore();
  });

  it('logs a server fault once, under the request id it answers with', async () => {
    const logged = vi.spyOn(console, 'error').mockImplementation(() => {});
    const url = await serve(await FakeEngine.create({ failAfter: 2 }));
    const res = await fetch(`${url}/v1/chat/completions`, { method: 'POST', body: JSON.stringify(chat('Once upon a time')) });
    expect(res.status).toBe(500);
    const id = res.headers.get('x-request-id');
    expect(id).toMatch(/^req_[0-9a-f]{24}$/);
    expect(logged).toHaveBeenCalledTimes(1);
    expect(logged.mock.calls[0]![0]).toBe(`mlxcel-server: request ${id} (POST /v1/chat/completions) failed:`);
    expect((logged.mock.calls[0]![1] as Error).message).toBe('engine step failed');
    logged.mockRestore();
  });
});

describe('documented routes this server cannot serve', () => {
  const SERVED = 'this server serves text generation (/v1/chat/completions, /v1/completions, /v1/responses, /v1/messages, /completion)';
  const image = (path: string) => `POST ${path} needs an image generation model, and image generation models (--image-model, MLXCEL_IMAGE_MODEL) are not supported yet; ${SERVED}`;
  const textToSpeech = 'This server does not serve text to speech. Start it with `-m` a Kokoro checkpoint (an audio-only server) or `--tts-model DIR|repo` (a Kokoro model beside the chat model)';
  const speechToText = 'This server does not serve speech to text. Start it with `-m` a Whisper checkpoint (an audio-only server) or `--stt-model DIR|repo` (a Whisper model beside the chat model)';
  const embeddings = 'This server does not support embeddings. Start it with `--embeddings` (the -m model serves embeddings) or `--embedding-model DIR|repo` (a second model beside the chat model)';
  const reranking = 'This server does not support reranking. Start it with `--reranking` (the -m model reranks) or `--reranker-model DIR|repo` (a second model beside the chat model)';

  it.each([
    ...['/v1/images/generations', '/images/generations', '/v1/images/edits', '/images/edits'].map((p) => ['POST', p, 'not_implemented', image(p)]),
    ['GET', '/v1/realtime', 'not_implemented', `GET /v1/realtime needs a Nemotron VoiceChat checkpoint, and these are not supported yet; ${SERVED}`],
    ...['/v1/embeddings', '/embedding', '/embeddings'].map((p) => ['POST', p, 'not_supported_error', embeddings]),
    ...['/v1/rerank', '/v1/reranking', '/rerank', '/reranking'].map((p) => ['POST', p, 'not_supported_error', reranking]),
  ])('%s %s -> 501 %s', async (method, path, type, message) => {
    const url = await serve(await FakeEngine.create());
    // The body is not read: a multipart upload or a malformed one gets the same answer.
    const res = await fetch(url + path, { method, ...(method === 'POST' ? { body: '{not json' } : {}) });
    expect(res.status).toBe(501);
    expect(await res.json()).toEqual({ error: { message, type, code: null } });
  });

  it.each(['/v1/audio/transcriptions', '/audio/transcriptions', '/v1/audio/translations', '/audio/translations'])('POST %s: 501 for a valid upload, 400 for a malformed one', async (path) => {
    const url = await serve(await FakeEngine.create());
    const form = (file: boolean) => {
      const f = new FormData();
      if (file) f.append('file', new Blob([new Uint8Array(64)]), 'a.wav');
      f.append('model', 'whisper-1');
      return f;
    };
    const valid = await fetch(url + path, { method: 'POST', body: form(true) });
    expect(valid.status).toBe(501);
    expect(await valid.json()).toEqual({ error: { message: speechToText, type: 'not_supported_error', code: null } });
    const missing = await fetch(url + path, { method: 'POST', body: form(false) });
    expect(missing.status).toBe(400);
    expect(((await missing.json()) as { error: { message: string } }).error.message).toMatch(/^file is required/);
    const json = await fetch(url + path, { method: 'POST', body: '{not json' });
    expect(json.status).toBe(400);
  });

  it.each(['/v1/audio/speech', '/audio/speech'])('POST %s: 501 for a valid body, 400 for a malformed one', async (path) => {
    const url = await serve(await FakeEngine.create());
    const post = (body: string) => fetch(url + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    const valid = await post(JSON.stringify({ model: 'kokoro', input: 'Hello.', voice: 'af_heart' }));
    expect(valid.status).toBe(501);
    expect(await valid.json()).toEqual({ error: { message: textToSpeech, type: 'not_supported_error', code: null } });
    const missing = await post(JSON.stringify({ voice: 'af_heart' }));
    expect(missing.status).toBe(400);
    expect(((await missing.json()) as { error: { message: string } }).error.message).toBe('input is required');
    expect((await post('{not json')).status).toBe(400);
  });

  it('answers a WebSocket upgrade on /v1/realtime with the 501', async () => {
    const url = new URL(await serve(await FakeEngine.create()));
    const status = await new Promise<number | undefined>((resolve, reject) => {
      const req = request({
        host: url.hostname,
        port: url.port,
        path: '/v1/realtime',
        headers: { Connection: 'Upgrade', Upgrade: 'websocket', 'Sec-WebSocket-Version': '13', 'Sec-WebSocket-Key': 'dGhlIHNhbXBsZSBub25jZQ==' },
      });
      req.on('response', (res) => {
        res.resume();
        resolve(res.statusCode);
      });
      req.on('upgrade', () => reject(new Error('upgraded')));
      req.on('error', reject);
      req.end();
    });
    expect(status).toBe(501);
  });

  it('asks for the API key first', async () => {
    const url = await serve(await FakeEngine.create(), 'sesame');
    expect((await fetch(`${url}/v1/images/generations`, { method: 'POST' })).status).toBe(401);
    expect((await fetch(`${url}/v1/embeddings`, { method: 'POST', headers: { Authorization: 'Bearer sesame' } })).status).toBe(501);
  });

  it('POST /infill on a model without fill-in-the-middle tokens -> 501', async () => {
    await serve(await FakeEngine.create());
    const res = await running!.post(`/infill`, { input_prefix: 'def f(', input_suffix: ')' });
    expect(res.status).toBe(501);
    expect(res.body.error).toMatchObject({ type: 'not_supported_error', code: null });
    expect(res.body.error.message).toMatch(/^Infill is not supported by this model: its vocabulary has none of the fill-in-the-middle token sets \(<\|fim_prefix\|> <\|fim_suffix\|> <\|fim_middle\|>, /);
  });
});

describe('--api-key', () => {
  it('requires the key everywhere but GET /health and GET /', async () => {
    const url = await serve(await FakeEngine.create(), 'sesame');
    expect((await fetch(`${url}/health`)).status).toBe(200);
    expect((await fetch(`${url}/`)).status).toBe(200);

    const missing = await running!.post(`/v1/chat/completions`, chat('hi'));
    expect(missing.status).toBe(401);
    expect(missing.body.error).toMatchObject({ type: 'missing_api_key', code: 'missing_api_key' });

    const wrong = await running!.post(`/tokenize`, { content: 'hi' }, { Authorization: 'Bearer nope' });
    expect(wrong.status).toBe(401);
    expect(wrong.body.error).toMatchObject({ type: 'invalid_api_key', code: 'invalid_api_key' });

    expect((await fetch(`${url}/v1/models`)).status).toBe(401);
    expect((await fetch(`${url}/models`)).status).toBe(401);
    expect((await running!.post(`/tokenize`, { content: 'hi' }, { Authorization: 'Bearer sesame' })).status).toBe(200);
    expect((await running!.post(`/tokenize`, { content: 'hi' }, { Authorization: 'sesame' })).status).toBe(200);
  });
});

describe('CORS', () => {
  const ORIGIN = 'http://app.example';
  const preflight = (url: string, origin = ORIGIN) =>
    fetch(url, {
      method: 'OPTIONS',
      headers: { Origin: origin, 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'authorization,content-type' },
    });
  const expectCors = (res: Response, origin = ORIGIN) => {
    expect(res.headers.get('access-control-allow-origin')).toBe(origin);
    expect(res.headers.get('access-control-allow-credentials')).toBe('true');
    expect(res.headers.get('access-control-allow-methods')).toBe('GET, POST, DELETE');
    expect(res.headers.get('vary')).toMatch(/Origin/);
  };

  it.each([undefined, 'sesame'])('answers a browser preflight with 200 and no key asked (api key %s)', async (apiKey) => {
    const url = await serve(await FakeEngine.create(), apiKey);
    for (const path of ['/v1/chat/completions', '/completion', '/v1/messages', '/nowhere']) {
      const res = await preflight(url + path);
      expect(res.status).toBe(200);
      expect(await res.text()).toBe('');
      expectCors(res);
      expect(res.headers.get('access-control-allow-headers')).toBe('authorization,content-type');
    }
    // An OPTIONS that is no preflight is routed like any other method.
    expect((await fetch(`${url}/v1/nothing`, { method: 'OPTIONS' })).status).toBe(apiKey ? 401 : 404);
  });

  it('sends the headers on answers and on 401, 404 and 400 errors', async () => {
    const url = await serve(await FakeEngine.create(), 'sesame');
    const auth = { Origin: ORIGIN, Authorization: 'Bearer sesame' };
    const ok = await running!.post(`/tokenize`, { content: 'hi' }, auth);
    expect(ok.status).toBe(200);
    const res = await fetch(`${url}/v1/models`, { headers: auth });
    expect(res.status).toBe(200);
    expectCors(res);
    expectCors(await fetch(`${url}/health`, { headers: { Origin: ORIGIN } }));

    const unauthorized = await fetch(`${url}/v1/models`, { headers: { Origin: ORIGIN } });
    expect(unauthorized.status).toBe(401);
    expectCors(unauthorized);
    const missing = await fetch(`${url}/v1/nothing`, { headers: auth });
    expect(missing.status).toBe(404);
    expectCors(missing);
    const invalid = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: auth, body: '{"messages": [' });
    expect(invalid.status).toBe(400);
    expectCors(invalid);
  });

  it('sends none to a request without Origin', async () => {
    const url = await serve(await FakeEngine.create());
    const res = await fetch(`${url}/v1/models`);
    expect(res.headers.get('access-control-allow-origin')).toBeNull();
  });

  it('sends them only to the origins --cors-origins lists', async () => {
    const url = await serve(await FakeEngine.create(), undefined, { corsOrigins: [ORIGIN, 'http://other.example'] });
    expectCors(await preflight(`${url}/v1/chat/completions`));
    expectCors(await fetch(`${url}/v1/models`, { headers: { Origin: 'http://other.example' } }), 'http://other.example');

    const refused = await preflight(`${url}/v1/chat/completions`, 'http://evil.example');
    expect(refused.status).toBe(200);
    expect(refused.headers.get('access-control-allow-origin')).toBeNull();
    expect(refused.headers.get('access-control-allow-credentials')).toBeNull();
    const read = await fetch(`${url}/v1/models`, { headers: { Origin: 'http://evil.example' } });
    expect(read.headers.get('access-control-allow-origin')).toBeNull();
  });
});

describe('chat completions', () => {
  it('renders the template, generates and reports usage', async () => {
    const engine = await FakeEngine.create();
    await serve(engine);
    const res = await running!.post(`/v1/chat/completions`, chat('Once upon a time'));
    expect(res.status).toBe(200);
    expect(engine.requests[0]!.promptTokens).toEqual([1, 403, 407, 261, 378]);
    expect(res.body).toMatchObject({
      object: 'chat.completion',
      model: 'stories260k',
      system_fingerprint: null,
      choices: [{ index: 0, message: { role: 'assistant', content: ONCE_UPON_A_TIME_TEXT }, finish_reason: 'stop', logprobs: null }],
      usage: { prompt_tokens: 5, completion_tokens: 64, total_tokens: 69 },
    });
    expect(res.body.id).toMatch(/^chatcmpl-/);
  });

  it('passes sampling parameters, with llama-server defaults when absent', async () => {
    const engine = await FakeEngine.create();
    await serve(engine);
    await running!.post(`/chat/completions`, { messages: [{ role: 'user', content: 'x' }], temperature: 0.5, top_k: 10, top_p: 0.9, seed: 42, max_completion_tokens: 2 });
    await running!.post(`/chat/completions`, { messages: [{ role: 'user', content: 'x' }] });
    expect(engine.requests[0]).toMatchObject({ maxTokens: 2, sampling: { temperature: 0.5, topK: 10, topP: 0.9, seed: 42 } });
    expect(engine.requests[1]!.sampling).toEqual({
      temperature: 0.8,
      topK: 40,
      topP: 0.95,
      minP: 0.05,
      pLess: false,
      repetitionPenalty: 1,
      repetitionContextSize: 64,
      frequencyPenalty: 0,
      presencePenalty: 0,
      xtcProbability: 0,
      xtcThreshold: 0.1,
    });
    expect(engine.requests[1]!.maxTokens).toBe(512 - engine.requests[1]!.promptTokens.length);
  });

  it('streams role, content deltas, finish reason, usage and [DONE]', async () => {
    const url = await serve(await FakeEngine.create());
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      body: JSON.stringify(chat('Once upon a time', { stream: true, stream_options: { include_usage: true }, max_tokens: 10 })),
    });
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const events = (await readSse(res)) as any[];
    expect(events.at(-1)).toBe('[DONE]');
    const chunks = events.slice(0, -1);
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
    expect(chunks.every((c) => c.object === 'chat.completion.chunk')).toBe(true);
    expect(chunks[0].choices[0]).toEqual({ index: 0, delta: { role: 'assistant' }, finish_reason: null, logprobs: null });
    const usage = chunks.at(-1);
    expect(usage.choices).toEqual([]);
    expect(usage.usage).toEqual({ prompt_tokens: 5, completion_tokens: 10, total_tokens: 15, prompt_tokens_details: { cached_tokens: 0 } });
    const finish = chunks.at(-2);
    expect(finish.choices[0]).toEqual({ index: 0, delta: {}, finish_reason: 'length', logprobs: null });
    const content = chunks.slice(1, -2).map((c) => c.choices[0].delta.content).join('');
    expect(content).toBe(', there was a little girl named Lily');
  });

  it('applies stop strings, streaming or not', async () => {
    const url = await serve(await FakeEngine.create());
    const res = await running!.post(`/v1/chat/completions`, chat('Once upon a time', { stop: 'Lily' }));
    expect(res.body.choices[0]).toMatchObject({ message: { content: ', there was a little girl named ' }, finish_reason: 'stop' });

    const stream = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      body: JSON.stringify(chat('Once upon a time', { stream: true, stop: ['girl', 'xyz'] })),
    });
    const chunks = ((await readSse(stream)) as any[]).slice(0, -1);
    expect(chunks.map((c) => c.choices[0].delta.content ?? '').join('')).toBe(', there was a little ');
    expect(chunks.at(-1).choices[0].finish_reason).toBe('stop');
  });
});

describe('text completions', () => {
  it('accepts a string, a one-string array or token ids, and adds BOS to text', async () => {
    const engine = await FakeEngine.create();
    await serve(engine);
    for (const prompt of ['Once upon a time', ['Once upon a time'], [1, 403, 407, 261, 378]]) {
      const res = await running!.post(`/v1/completions`, { prompt, max_tokens: 3, temperature: 0 });
      expect(res.body).toMatchObject({
        object: 'text_completion',
        choices: [{ index: 0, text: ', there was', finish_reason: 'length', logprobs: null }],
        usage: { prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 },
      });
      expect(res.body.id).toMatch(/^cmpl-/);
    }
    expect(engine.requests.map((r) => r.promptTokens)).toEqual(Array(3).fill([1, 403, 407, 261, 378]));
  });

  it('streams text deltas', async () => {
    const url = await serve(await FakeEngine.create());
    const res = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      body: JSON.stringify({ prompt: 'Once upon a time', stream: true, max_tokens: 4 }),
    });
    const events = (await readSse(res)) as any[];
    expect(events.at(-1)).toBe('[DONE]');
    const chunks = events.slice(0, -1);
    expect(chunks.every((c) => c.object === 'text_completion')).toBe(true);
    expect(chunks.map((c) => c.choices[0].text).join('')).toBe(', there was a');
    expect(chunks.at(-1).choices[0]).toEqual({ index: 0, text: '', finish_reason: 'length', logprobs: null });
  });
});

describe('native routes', () => {
  it('POST /completion answers in llama-server shape', async () => {
    await serve(await FakeEngine.create());
    const full = await running!.post(`/completion`, { prompt: 'Once upon a time', temperature: 0 });
    expect(full.body).toMatchObject({
      content: ONCE_UPON_A_TIME_TEXT,
      stop: true,
      model: 'stories260k',
      tokens_predicted: 64,
      tokens_evaluated: 5,
      stop_type: 'eos',
      stopping_word: '',
      timings: { predicted_n: 64, prompt_n: 5 },
    });
    const limited = await running!.post(`/completion`, { prompt: 'Once upon a time', n_predict: 3 });
    expect(limited.body).toMatchObject({ content: ', there was', stop_type: 'limit', tokens_predicted: 3 });
    const worded = await running!.post(`/completion`, { prompt: [1, 403, 407, 261, 378], stop: ['Lily'] });
    expect(worded.body).toMatchObject({ content: ', there was a little girl named ', stop_type: 'word', stopping_word: 'Lily' });
  });

  it('POST /completion accepts a thinking budget; a model without a reasoning block has nothing to cap', async () => {
    await serve(await FakeEngine.create());
    const plain = await running!.post(`/completion`, { prompt: 'Once upon a time', n_predict: 4, temperature: 0 });
    for (const field of ['thinking_budget_tokens', 'reasoning_budget_tokens', 'reasoning_budget']) {
      const res = await running!.post(`/completion`, { prompt: 'Once upon a time', n_predict: 4, temperature: 0, [field]: 0 });
      expect(res.status).toBe(200);
      expect(res.body.content).toBe(plain.body.content);
    }
  });

  it('POST /completion streams content chunks and ends with the summary, without [DONE]', async () => {
    const url = await serve(await FakeEngine.create());
    const res = await fetch(`${url}/completion`, {
      method: 'POST',
      body: JSON.stringify({ prompt: 'Once upon a time', n_predict: 5, stream: true }),
    });
    const events = (await readSse(res)) as any[];
    expect(events).not.toContain('[DONE]');
    const last = events.at(-1);
    expect(last).toMatchObject({ content: '', stop: true, stop_type: 'limit', tokens_predicted: 5, tokens_evaluated: 5 });
    const parts = events.slice(0, -1);
    expect(parts.every((e) => e.stop === false)).toBe(true);
    expect(parts.map((e) => e.content).join('')).toBe(', there was a little');
  });

  it('POST /tokenize and /detokenize', async () => {
    await serve(await FakeEngine.create());
    expect((await running!.post(`/tokenize`, { content: 'Once upon a time' })).body).toEqual({ tokens: [403, 407, 261, 378] });
    expect((await running!.post(`/tokenize`, { content: 'Once upon a time', add_special: true })).body).toEqual({
      tokens: [1, 403, 407, 261, 378],
    });
    expect((await running!.post(`/detokenize`, { tokens: [403, 407, 261, 378] })).body).toEqual({ content: 'Once upon a time' });
    expect((await running!.post(`/detokenize`, { tokens: [] })).body).toEqual({ content: '' });
  });

  it('POST /detokenize names the first out-of-vocabulary id with the reference\'s 500', async () => {
    await serve(await FakeEngine.create());
    for (const [tokens, bad] of [
      [[403, 512, -1], 512],
      [[403, -1, 512], -1],
      [[2 ** 40], 2 ** 40],
    ] as const) {
      const res = await running!.post(`/detokenize`, { tokens });
      expect(res.status).toBe(500);
      expect(res.body.error).toEqual({
        message: `token id ${bad} is out of vocabulary range (vocab_size 512)`,
        type: 'server_error',
        code: null,
      });
    }
  });
});

describe('request lifecycle', () => {
  it('aborts the generation of a client that disconnects mid-stream, then serves the next', async () => {
    const engine = await FakeEngine.create({ tokenDelayMs: 20 });
    const url = await serve(engine);
    const controller = new AbortController();
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      body: JSON.stringify(chat('Once upon a time', { stream: true })),
      signal: controller.signal,
    });
    const reader = res.body!.getReader();
    await reader.read();
    controller.abort();
    await waitFor(() => engine.cancelled === 1);

    const next = await running!.post(`/v1/completions`, { prompt: 'Once upon a time', max_tokens: 3 });
    expect(next.body.choices[0].text).toBe(', there was');
    expect(engine.completed).toBe(1);
  });

  it('aborts a non-streaming generation whose client disconnects', async () => {
    const engine = await FakeEngine.create({ tokenDelayMs: 20 });
    const url = await serve(engine);
    const controller = new AbortController();
    const pending = fetch(`${url}/completion`, {
      method: 'POST',
      body: JSON.stringify({ prompt: 'Once upon a time' }),
      signal: controller.signal,
    }).catch((e: Error) => e);
    await waitFor(() => engine.running === 1);
    controller.abort();
    expect(await pending).toBeInstanceOf(Error);
    await waitFor(() => engine.cancelled === 1);
    expect(engine.completed).toBe(0);
  });

  it('answers 503 server_busy before any stream header when the queue is full', async () => {
    const engine = await FakeEngine.create({ tokenDelayMs: 20, maxQueue: 0 });
    const url = await serve(engine);
    const first = running!.post(`/v1/completions`, { prompt: 'Once upon a time', max_tokens: 3 });
    await waitFor(() => engine.running === 1);
    const res = await fetch(`${url}/v1/chat/completions`, { method: 'POST', body: JSON.stringify(chat('x', { stream: true })) });
    expect(res.status).toBe(503);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(((await res.json()) as any).error).toMatchObject({ type: 'server_busy', code: null });
    expect((await first).body.choices[0].text).toBe(', there was');
  });

  it('reports an engine failure as a 500, or as an error event once streaming', async () => {
    const logged = vi.spyOn(console, 'error').mockImplementation(() => {});
    const url = await serve(await FakeEngine.create({ failAfter: 2 }));
    const plain = await running!.post(`/v1/chat/completions`, chat('Once upon a time'));
    expect(plain.status).toBe(500);
    expect(plain.body.error).toEqual({ message: 'engine step failed', type: 'server_error', code: null });

    const res = await fetch(`${url}/v1/chat/completions`, { method: 'POST', body: JSON.stringify(chat('Once upon a time', { stream: true })) });
    expect(res.status).toBe(200);
    const events = (await readSse(res)) as any[];
    // The error, then the finish_reason "error" chunk and [DONE] (test/server-stream-errors.test.ts).
    expect(events.at(-3)).toEqual({ error: { message: 'engine step failed', type: 'server_error', code: null } });
    expect(events.at(-2).choices[0].finish_reason).toBe('error');
    expect(events.at(-1)).toBe('[DONE]');
    expect(events.slice(1, -3).map((e) => e.choices[0].delta.content).join('')).toBe(', there');
    expect(logged).toHaveBeenCalledTimes(2);
    logged.mockRestore();
  });

  it('passes X-Priority to the engine and rejects unknown values', async () => {
    const engine = await FakeEngine.create();
    await serve(engine);
    await running!.post(`/completion`, { prompt: 'x', n_predict: 1 }, { 'X-Priority': 'high' });
    await running!.post(`/completion`, { prompt: 'x', n_predict: 1 });
    expect(engine.requests.map((r) => r.priority)).toEqual(['high', undefined]);
    const bad = await running!.post(`/completion`, { prompt: 'x' }, { 'X-Priority': 'urgent' });
    expect(bad.status).toBe(400);
    expect(bad.body.error.message).toBe('X-Priority must be one of: high, normal, low');
  });

  it('serves concurrent requests one at a time and answers them all', async () => {
    const engine = await FakeEngine.create({ tokenDelayMs: 1 });
    await serve(engine);
    const results = await Promise.all(
      Array.from({ length: 4 }, (_, i) => running!.post(`/v1/completions`, { prompt: 'Once upon a time', max_tokens: 2 + i })),
    );
    expect(results.map((r) => r.body.usage.completion_tokens)).toEqual([2, 3, 4, 5]);
    expect(engine.maxRunning).toBe(1);
  });
});
