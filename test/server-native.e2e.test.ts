// llama-server's native routes over raw HTTP, against a live server on the real engine
// and the trained stories260k model (greedy outputs from expected.json).
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { useLive } from './helpers/live-server.js';
import { readSse } from './helpers/sse.js';
import { storiesCase } from './helpers/stories-expected.js';

const onceUponATime = storiesCase('Once upon a time');

const live = useLive({ model: 'models/stories260k' });

describe('native API on stories260k', () => {
  it('GET /health reports the model and its context', async () => {
    const res = await fetch(`${live.url}/health`);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ status: 'ok', model: 'stories260k', context_size: 512 });
  });

  it('POST /completion reproduces the greedy expected text', async () => {
    const res = await live.post('/completion', { prompt: 'Once upon a time', n_predict: 64, temperature: 0 });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      content: onceUponATime.expected_text,
      stop: true,
      stop_type: 'limit',
      tokens_predicted: 64,
      tokens_evaluated: 5,
      timings: { prompt_n: 5, predicted_n: 64 },
    });
  });

  it('POST /completion streams the same text and ends with the summary', async () => {
    const res = await fetch(`${live.url}/completion`, {
      method: 'POST',
      body: JSON.stringify({ prompt: onceUponATime.prompt_token_ids, n_predict: 64, temperature: 0, stream: true }),
    });
    const events = (await readSse(res)) as any[];
    expect(events.slice(0, -1).map((e) => e.content).join('')).toBe(onceUponATime.expected_text);
    expect(events.at(-1)).toMatchObject({ stop: true, content: '', tokens_predicted: 64, tokens_evaluated: 5 });
  });

  it('POST /completion stops at a stop word', async () => {
    const res = await live.post('/completion', { prompt: 'Once upon a time', n_predict: 64, temperature: 0, stop: ['park'] });
    expect(res.body).toMatchObject({
      content: ', there was a little girl named Lily. She loved to play outside in the ',
      stop_type: 'word',
      stopping_word: 'park',
    });
  });

  // The reference's image routes: their models do not load yet (the CLI exits saying so for
  // --image-model), and the 501 says the same; the speech and transcription routes answer 501
  // naming the flags that serve them, after reading the body (a malformed one is a 400).
  it('the image and audio routes answer 501 saying what would serve them', async () => {
    const cases: Array<[string, RegExp]> = [
      ['/v1/images/generations', /^POST \/v1\/images\/generations needs an image generation model, and image generation models \(--image-model, MLXCEL_IMAGE_MODEL\) are not supported yet; this server serves text generation/],
      ['/images/edits', /^POST \/images\/edits needs an image generation model, and image generation models .* are not supported yet; /],
    ];
    for (const [path, message] of cases) {
      const res = await live.post(path, { prompt: 'a cat', model: 'x', input: 'hi' });
      expect(res.status, path).toBe(501);
      expect(res.body.error.type, path).toBe('not_implemented');
      expect(res.body.error.message, path).toMatch(message);
    }
     // The official client, as an application calls these routes.
    const openai = live.openai;
    const calls: Array<[() => Promise<unknown>, RegExp]> = [
      [() => openai.images.generate({ model: 'flux', prompt: 'a cat' }), /image generation models .* are not supported yet/],
      [() => openai.audio.speech.create({ model: 'kokoro', voice: 'alloy', input: 'hi' }), /^501 This server does not serve text to speech\. Start it with `-m` a Kokoro checkpoint/],
      [() => openai.audio.transcriptions.create({ model: 'whisper-1', file: new File([new Uint8Array(64)], 'a.wav') }), /^501 This server does not serve speech to text\. Start it with `-m` a Whisper checkpoint/],
    ];
    for (const [call, message] of calls) {
      const err = await call().then(() => undefined, (e: unknown) => e);
      expect(err).toBeInstanceOf(OpenAI.APIError);
      expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(501);
      expect((err as InstanceType<typeof OpenAI.APIError>).message).toMatch(message);
    }
  });

  it('POST /tokenize and /detokenize round-trip', async () => {
    const tokens = (await live.post('/tokenize', { content: 'Once upon a time', add_special: true })).body.tokens;
    expect(tokens).toEqual(onceUponATime.prompt_token_ids);
    expect((await live.post('/detokenize', { tokens: tokens.slice(1) })).body).toEqual({ content: 'Once upon a time' });
  });

  // The REST reference: ids are read as 64-bit integers; a negative id or one outside the
  // vocabulary is a 500 server_error naming the first bad id in request order, checked
  // before decoding (llama-server's status and type).
  it('POST /detokenize answers an id outside the vocabulary with the reference\'s 500', async () => {
    const cases: Array<[string, string]> = [
      ['[403, 512]', '512'],
      ['[403, -1, 512]', '-1'],
      ['[403, 512, -1]', '512'],
      ['[-9223372036854775808]', '-9223372036854775808'],
      ['[4294967296]', '4294967296'],
      ['[4294967299, 1]', '4294967299'],
      ['[9223372036854775807]', '9223372036854775807'],
      ['[1, 9007199254740993]', '9007199254740993'],
    ];
    for (const [tokens, bad] of cases) {
      const res = await fetch(`${live.url}/detokenize`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: `{"tokens": ${tokens}}` });
      expect(res.status, tokens).toBe(500);
      expect(await res.json(), tokens).toEqual({
        error: { type: 'server_error', message: `token id ${bad} is out of vocabulary range (vocab_size 512)`, code: null },
      });
    }
  });

  it('POST /detokenize refuses ids that are not 64-bit integers with 400', async () => {
    const cases: Array<[string, RegExp]> = [
      ['[1.5]', /tokens\[0\] must be integer/],
      ['["403"]', /tokens\[0\] must be integer/],
      ['[null]', /tokens\[0\] must be integer/],
      ['[403, 9223372036854775808]', /^tokens\[1\] must be a 64-bit integer, got 9223372036854775808$/],
      ['[-9223372036854775809]', /^tokens\[0\] must be a 64-bit integer, got -9223372036854775809$/],
      ['[1e300]', /^tokens\[0\] must be a 64-bit integer, got 1e300$/],
    ];
    for (const [tokens, message] of cases) {
      const res = await fetch(`${live.url}/detokenize`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: `{"tokens": ${tokens}}` });
      expect(res.status, tokens).toBe(400);
      const body = (await res.json()) as { error: { type: string; message: string } };
      expect(body.error.type, tokens).toBe('invalid_request_error');
      expect(body.error.message, tokens).toMatch(message);
    }
  });
});
