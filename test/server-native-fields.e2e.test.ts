// llama-server's native fields where the REST reference is silent, over raw HTTP (and the
// openai SDK where it has the field), against a live server on the real engine and the
// trained stories260k model (greedy outputs from expected.json).
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Endpoint, serve, useLive } from './helpers/live-server.js';
import { waitFor } from './helpers/server-load.js';
import { readSse } from './helpers/sse.js';
import { STORIES_DIR, storiesCase } from './helpers/stories-expected.js';

const onceUponATime = storiesCase('Once upon a time');
/** stories260k's end-of-sequence token (banned below to run into the context's end). */
const EOS = 2;

const live = useLive({ model: 'models/stories260k' });

describe('/completion response fields', () => {
  it('carries tokens, generation_settings, prompt, has_new_line and truncated', async () => {
    const res = await live.post('/completion', {
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
    const lily = live.engine.tokenizer.encode('Lily', false);
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
    const res = await live.post('/completion', { prompt: 'Once upon a time', n_predict: 4, temperature: 0 });
    expect(res.body.tokens).toEqual([]);
  });

  it('is truncated when the completion runs into the end of the context', async () => {
    const prompt = live.engine.tokenizer.encode('Once upon a time '.repeat(120), true);
    expect(prompt.length).toBeLessThan(512);
    const res = await live.post('/completion', { prompt, temperature: 0, logit_bias: [[EOS, false]] });
    expect(res.body).toMatchObject({ truncated: true, stop_type: 'limit', tokens_evaluated: prompt.length, tokens_predicted: 512 - prompt.length });
  });

  it('streams token ids with each chunk and ends with the summary', async () => {
    const events = await live.postSse('/completion', { prompt: 'Once upon a time', n_predict: 64, temperature: 0, stream: true });
    const chunks = events.slice(0, -1);
    expect(chunks.map((c) => c.content).join('')).toBe(onceUponATime.expected_text);
    expect(chunks.flatMap((c) => c.tokens)).toEqual(onceUponATime.expected_token_ids);
    expect(chunks.at(-1)).toMatchObject({ stop: false, tokens_predicted: 64, tokens_evaluated: 5 });
    expect(events.at(-1)).toMatchObject({ stop: true, content: '', tokens: [], truncated: false, generation_settings: { stream: true, n_predict: 64 } });
  });

  it('timings_per_token puts the timings so far on every streamed chunk', async () => {
    const events = await live.postSse('/completion', { prompt: 'Once upon a time', n_predict: 16, temperature: 0, timings_per_token: true, cache_prompt: false, stream: true });
    const chunks = events.slice(0, -1);
    let predicted = 0;
    for (const chunk of chunks) {
      expect(chunk.timings).toMatchObject({ cache_n: 0, prompt_n: 5, predicted_n: chunk.tokens_predicted });
      expect(chunk.timings.predicted_n).toBeGreaterThan(predicted);
      expect(chunk.timings.prompt_ms).toBeGreaterThan(0);
      predicted = chunk.timings.predicted_n;
    }
    expect(predicted).toBe(16);
    expect(events.at(-1)).toMatchObject({ timings: { predicted_n: 16 }, generation_settings: { timings_per_token: true } });
    // Off by default.
    const plain = await live.postSse('/completion', { prompt: 'Once upon a time', n_predict: 2, temperature: 0, stream: true });
    expect(plain.slice(0, -1).every((c) => c.timings === undefined)).toBe(true);
  });

  it('is also served on /completions, as llama-server serves it', async () => {
    const res = await live.post('/completions', { prompt: 'Once upon a time', n_predict: 64, temperature: 0 });
    expect(res.body).toMatchObject({ content: onceUponATime.expected_text, stop: true, tokens_predicted: 64 });
  });

  it('projects response_fields, nested paths keeping their full name', async () => {
    const res = await live.post('/completion', {
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
    const prompt = live.engine.tokenizer.encode('Once upon a time '.repeat(200), true);
    const res = await live.post('/completion', { prompt, n_predict: 1 });
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

describe('/completion post_sampling_probs', () => {
  it('reports prob/top_probs of the distribution each token was drawn from', async () => {
    const request = { prompt: 'Once upon a time', n_predict: 12, temperature: 1, top_k: 3, top_p: 1, min_p: 0, seed: 7, n_probs: 3 };
    const plain = (await live.post('/completion', request)).body;
    const post_ = (await live.post('/completion', { ...request, post_sampling_probs: true })).body;
    // The same draws: the flag changes what is reported, not what is sampled.
    expect(post_.content).toBe(plain.content);
    expect(post_.generation_settings.post_sampling_probs).toBe(true);
    expect(post_.completion_probabilities).toHaveLength(12);
    post_.completion_probabilities.forEach((entry: any, i: number) => {
      const before = plain.completion_probabilities[i];
      expect(entry.id).toBe(before.id);
      expect(entry).not.toHaveProperty('logprob');
      // At T 1 with top-k 3, the drawn-from distribution is the top 3 of the row, renormalised.
      const z = before.top_logprobs.reduce((a: number, t: any) => a + Math.exp(t.logprob), 0);
      expect(entry.top_probs.map((t: any) => t.id)).toEqual(before.top_logprobs.map((t: any) => t.id));
      entry.top_probs.forEach((t: any, k: number) => {
        expect(t.prob).toBeCloseTo(Math.exp(before.top_logprobs[k].logprob) / z, 5);
        expect(t).toMatchObject({ token: before.top_logprobs[k].token, bytes: before.top_logprobs[k].bytes });
      });
      expect(entry.prob).toBeCloseTo(Math.exp(before.logprob) / z, 5);
    });
  });

  it('greedy: the token has probability 1, and top_probs lists the n_probs candidates top-k, top-p and min-p kept, the rest at 0, streamed too', async () => {
    // llama-server's chain keeps the candidates of top-k, top-p and min-p (at temperature 1),
    // then its temperature stage keeps only the argmax: its test_n_probs_post_sampling gets
    // n_probs entries at temperature 0, one of probability 1. top_k 10 keeps exactly ten here.
    const request = { prompt: 'Once upon a time', n_predict: 4, temperature: 0, n_probs: 10, top_k: 10, top_p: 1, min_p: 0 };
    const plain = (await live.post('/completion', request)).body.completion_probabilities as any[];
    const events = await live.postSse('/completion', { ...request, post_sampling_probs: true, stream: true });
    const entries = events.slice(0, -1).flatMap((e) => e.completion_probabilities ?? []);
    expect(entries.map((e) => e.id)).toEqual(onceUponATime.expected_token_ids.slice(0, 4));
    entries.forEach((e, i) => {
      expect(e.prob).toBe(1);
      // The same candidates as the temperature-1 row's top ten, most likely first.
      expect(e.top_probs.map((t: any) => t.id)).toEqual(plain[i].top_logprobs.map((t: any) => t.id));
      expect(e.top_probs.map((t: any) => t.prob)).toEqual([1, ...Array(9).fill(0)]);
      expect(e.top_probs[0]).toMatchObject({ id: e.id, token: e.token, bytes: e.bytes });
    });
    // The server's defaults (min_p 0.05, top_p 0.95) keep fewer: those of the row's top ten
    // with p >= 0.05 p_max, as many as top-p leaves.
    const defaults = (await live.post('/completion', { prompt: 'Once upon a time', n_predict: 4, temperature: 0, n_probs: 10, post_sampling_probs: true })).body;
    defaults.completion_probabilities.forEach((e: any, i: number) => {
      const row = plain[i].top_logprobs as Array<{ id: number; logprob: number }>;
      const minP = row.filter((t) => t.logprob >= row[0]!.logprob + Math.log(0.05)).map((t) => t.id);
      const ids = e.top_probs.map((t: any) => t.id);
      expect(ids).toEqual(minP.slice(0, ids.length));
      expect(ids[0]).toBe(e.id);
      expect(e.top_probs.slice(1).every((t: any) => t.prob === 0)).toBe(true);
    });
  });
});

describe('chat post_sampling_probs', () => {
  it('chat logprobs become prob/top_probs of the drawn-from distribution, through the openai SDK', async () => {
    const client = live.openai;
    const request = {
      model: 'stories260k',
      messages: [{ role: 'user' as const, content: 'Once upon a time' }],
      max_tokens: 6,
      temperature: 1,
      top_p: 1,
      seed: 11,
      logprobs: true,
      top_logprobs: 3,
      top_k: 3,
      min_p: 0,
    };
    const plain = await client.chat.completions.create(request as OpenAI.ChatCompletionCreateParamsNonStreaming);
    const post_ = await client.chat.completions.create({ ...request, post_sampling_probs: true } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    expect(post_.choices[0]!.message.content).toBe(plain.choices[0]!.message.content);
    const before = plain.choices[0]!.logprobs!.content!;
    const after = post_.choices[0]!.logprobs!.content as unknown as Array<{ id: number; token: string; prob: number; top_probs: Array<{ token: string; prob: number }> }>;
    expect(after).toHaveLength(before.length);
    after.forEach((entry, i) => {
      const z = before[i]!.top_logprobs.reduce((a, t) => a + Math.exp(t.logprob), 0);
      expect(entry.token).toBe(before[i]!.token);
      expect(entry.prob).toBeCloseTo(Math.exp(before[i]!.logprob) / z, 5);
      expect(entry.top_probs.map((t) => t.prob)).toEqual(before[i]!.top_logprobs.map((t) => expect.closeTo(Math.exp(t.logprob) / z, 5)));
    });
  });
});

describe('chat post_sampling_probs, greedy', () => {
  it('top_logprobs 10 at temperature 0: the kept candidates, the chosen at probability 1, through the openai SDK', async () => {
    const client = live.openai;
    const request = { model: 'stories260k', messages: [{ role: 'user' as const, content: 'Once upon a time' }], max_tokens: 3, temperature: 0, logprobs: true, top_logprobs: 10, top_k: 10, top_p: 1, min_p: 0 };
    const plain = await client.chat.completions.create(request as OpenAI.ChatCompletionCreateParamsNonStreaming);
    const post_ = await client.chat.completions.create({ ...request, post_sampling_probs: true } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    const before = plain.choices[0]!.logprobs!.content!;
    const after = post_.choices[0]!.logprobs!.content as unknown as Array<{ token: string; prob: number; top_probs: Array<{ token: string; prob: number }> }>;
    expect(after).toHaveLength(3);
    after.forEach((entry, i) => {
      expect(entry).toMatchObject({ token: before[i]!.token, prob: 1 });
      expect(entry.top_probs.map((t) => t.token)).toEqual(before[i]!.top_logprobs.map((t) => t.token));
      expect(entry.top_probs.map((t) => t.prob)).toEqual([1, ...Array(9).fill(0)]);
    });
  });
});

describe('ignore_eos', () => {
  /** The end of stories260k's greedy "Once upon a time" story: greedy, it ends (EOS) 12 tokens on. */
  const STORY_END =
    "Lily was sad and didn't know what to do. She said, \"I want to play with your ball, but I can't find it.\" Lily was sad and didn't know what to do. " +
    "She said, \"I'm sorry, Lily. I didn't know what to do.\" Lily didn't want to help her mom, so she said, \"I'm sorry, mom. I didn't know what to do.\" " +
    "Her mom said, \"Don't worry, Lily. We can help you.\" Lily and her mom went to the park to play.";
  const ENDING = ' They played together and had fun.';
  /** stories260k's end-of-generation tokens (generation_config's eos_token_id [2, 1]), each banned as llama-server lists them. */
  const EOG_BANS = [{ bias: null, token: 2 }, { bias: null, token: 1 }];

  it('/completion generates past the end of sequence to n_predict, every EOG token banned in generation_settings.logit_bias (llama-server)', async () => {
    const plain = (await live.post('/completion', { prompt: STORY_END, n_predict: 24, temperature: 0 })).body;
    expect(plain).toMatchObject({ content: ENDING, tokens_predicted: 12, stop_type: 'eos', generation_settings: { ignore_eos: false, logit_bias: [] } });
    const ignored = (await live.post('/completion', { prompt: STORY_END, n_predict: 24, temperature: 0, ignore_eos: true, return_tokens: true })).body;
    expect(ignored).toMatchObject({ tokens_predicted: 24, stop_type: 'limit', generation_settings: { ignore_eos: true, logit_bias: EOG_BANS } });
    expect(ignored.content.startsWith(ENDING)).toBe(true);
    expect(ignored.tokens.filter((t: number) => t === 1 || t === 2)).toEqual([]);
    // The request's own logit_bias comes first; a +100 on EOS does not lift the ban.
    const lily = live.engine.tokenizer.encode('Lily', false);
    const both = (await live.post('/completion', { prompt: STORY_END, n_predict: 2, temperature: 0, ignore_eos: true, logit_bias: [['Lily', -2], [2, 100]] })).body;
    expect(both).toMatchObject({ tokens_predicted: 2, stop_type: 'limit' });
    expect(both.generation_settings.logit_bias).toEqual([...lily.map((token) => ({ bias: -2, token })), { bias: null, token: 2 }, { bias: null, token: 1 }]);
  });

  it('does the same on /v1/completions and chat through the openai SDK, and on Responses', async () => {
    const client = live.openai;
    const text = await client.completions.create({ model: 'stories260k', prompt: STORY_END, max_tokens: 16, temperature: 0, ignore_eos: true } as OpenAI.CompletionCreateParamsNonStreaming);
    expect(text.choices[0]).toMatchObject({ finish_reason: 'length' });
    expect(text.choices[0]!.text.startsWith(ENDING)).toBe(true);
    expect(text.usage?.completion_tokens).toBe(16);
    // stories260k's template is BOS + the message, the same prompt tokens.
    const messages = [{ role: 'user' as const, content: STORY_END }];
    const chat = await client.chat.completions.create({ model: 'stories260k', messages, max_tokens: 16, temperature: 0, ignore_eos: true } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    expect(chat.choices[0]).toMatchObject({ finish_reason: 'length' });
    expect(chat.choices[0]!.message.content!.startsWith(ENDING)).toBe(true);
    expect(chat.usage?.completion_tokens).toBe(16);
    const plainChat = await client.chat.completions.create({ model: 'stories260k', messages, max_tokens: 16, temperature: 0 });
    expect(plainChat.choices[0]).toMatchObject({ finish_reason: 'stop', message: { content: ENDING } });
    const response = await client.responses.create({ model: 'stories260k', input: STORY_END, max_output_tokens: 16, temperature: 0, ignore_eos: true } as OpenAI.Responses.ResponseCreateParamsNonStreaming);
    expect(response).toMatchObject({ status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' }, usage: { output_tokens: 16 } });
    expect(response.output_text.startsWith(ENDING)).toBe(true);
  });

  it('refuses an ignore_eos that is not a boolean', async () => {
    for (const [path, body] of [
      ['/completion', { prompt: 'Once upon a time' }],
      ['/v1/completions', { prompt: 'Once upon a time' }],
      ['/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi' }] }],
      ['/v1/responses', { input: 'Hi' }],
    ] as const) {
      const res = await live.post(path, { ...body, ignore_eos: 'yes' });
      expect(res.status, path).toBe(400);
      expect(res.body.error, path).toMatchObject({ message: 'ignore_eos must be boolean', type: 'invalid_request_error' });
    }
  });
});

describe('/tokenize with_pieces', () => {
  it('gives each token its piece: text, or the bytes where they are not UTF-8 on their own', async () => {
    const content = 'Once upon a time, á';
    const ids = (await live.post('/tokenize', { content })).body.tokens as number[];
    const res = await live.post('/tokenize', { content, with_pieces: true });
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
    const res = await fetch(`${live.url}/props`);
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
    const res = await fetch(`${live.url}/slots`);
    const slots = (await res.json()) as any[];
    expect(slots.length).toBeGreaterThan(0);
    for (const slot of slots) expect(slot).toMatchObject({ n_ctx: 512, context_size: 512 });
  });
});

describe('chat completions keep the REST reference wire shape', () => {
  it('system_fingerprint stays null and the stream opens with the role', async () => {
    const client = live.openai;
    const chunks = [];
    const s = await client.chat.completions.create({ model: 'stories260k', messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 4, stream: true });
    for await (const chunk of s) chunks.push(chunk);
    expect(chunks[0]!.choices[0]!.delta).toEqual({ role: 'assistant' });
    expect(chunks.every((c) => c.system_fingerprint === null)).toBe(true);
  });
});

/** bin/mlxcel-server.js, on the sources rather than dist/. */
const ENTRY = "import { main } from './src/cli.ts'; await main(process.argv.slice(1), process.env);";

/** The real command line on stories260k: its address once loaded, and a stop. */
async function startCli(args: string[]): Promise<{ url: string; output: () => string; stop: () => Promise<void> }> {
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', ENTRY, '--', '--host', '127.0.0.1', '--port', '0', '-np', '1', ...args], {
    cwd: join(import.meta.dirname, '..'),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.setEncoding('utf8').on('data', (t: string) => (output += t));
  child.stderr.setEncoding('utf8').on('data', (t: string) => (output += t));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async () => {
    child.kill('SIGTERM');
    const killer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(killer);
  };
  await waitFor(() => /loaded in|could not load/.test(output) || child.exitCode !== null, 60_000, 'the server loaded');
  const url = /listening on (http:\S+)/.exec(output)?.[1];
  if (!url) await stop();
  return { url: url ?? '', output: () => output, stop };
}

describe('/apply-template and __verbose with a BOS-adding tokenizer', () => {
  const messages = [{ role: 'user' as const, content: 'Once upon a time' }];

  // llama-server renders without the leading BOS text its tokenizer adds again, so the
  // prompt sent on to /completion (as its documentation suggests) gets one BOS.
  it('/apply-template leaves out the BOS /completion adds, and renders any length', async () => {
    const applied = await live.post('/apply-template', { messages });
    expect(applied.body).toEqual({ prompt: 'Once upon a time' });
    const completion = await live.post('/completion', { prompt: applied.body.prompt, n_predict: 1, temperature: 0 });
    expect(completion.body.prompt).toBe('<s> Once upon a time');
    const chat = await live.post('/v1/chat/completions', { messages, max_tokens: 1, temperature: 0 });
    expect(completion.body.tokens_evaluated).toBe(chat.body.usage.prompt_tokens);
    // Rendering is not evaluation: a conversation longer than the context renders; chat refuses it.
    const long = [{ role: 'user', content: 'Once upon a time '.repeat(600) }];
    const rendered = await live.post('/apply-template', { messages: long });
    expect(rendered.status).toBe(200);
    expect(rendered.body.prompt).toBe(long[0]!.content);
    const refused = await live.post('/v1/chat/completions', { messages: long, max_tokens: 1 });
    expect(refused.status).toBe(400);
    expect(refused.body.error.code).toBe('context_length_exceeded');
  });

  // llama-server's __verbose.prompt, like its /completion's prompt, is the prompt tokens
  // detokenized (special tokens shown), not the template's text.
  it('__verbose.prompt is the prompt tokens decoded, on chat as on text completions and /completion', async () => {
    const verbose = await serve(live.engine, { server: { verbose: true } });
    try {
      const client = verbose.openai;
      const chat = (await client.chat.completions.create({ model: 's', messages, max_tokens: 2, temperature: 0 })) as unknown as { __verbose: { prompt: string } };
      const text = (await client.completions.create({ model: 's', prompt: 'Once upon a time', max_tokens: 2, temperature: 0 })) as unknown as { __verbose: { prompt: string } };
      const native = await live.post('/completion', { prompt: 'Once upon a time', n_predict: 2, temperature: 0 });
      expect(chat.__verbose.prompt).toBe('<s> Once upon a time');
      expect(text.__verbose.prompt).toBe(native.body.prompt);
      expect(chat.__verbose.prompt).toBe(native.body.prompt);
    } finally {
      await verbose.close();
    }
  });
});

describe('the command line', () => {
  let dir: string;
  let cli: Awaited<ReturnType<typeof startCli>>;
  let api: Endpoint;
  const template = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}";

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'mlxcel-cli-'));
    writeFileSync(join(dir, 'template.jinja'), template);
    cli = await startCli(['--alias', 'gpt-x,tiny', '--tags', 'small,test', '--chat-template-file', join(dir, 'template.jinja'), '-n', '6', '--verbose', '-b', '16']);
    expect(cli.url, cli.output()).not.toBe('');
    api = new Endpoint(cli.url);
  });

  afterAll(async () => {
    await cli?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('--alias names the model in responses and lists every alias, with the --tags', async () => {
    const client = api.openai;
    const models = await client.models.list();
    expect(models.data).toHaveLength(1);
    expect(models.data[0]).toMatchObject({ id: 'gpt-x', aliases: ['gpt-x', 'tiny'], tags: ['small', 'test'] });
    // Any alias is accepted as the model; responses name the first.
    const res = await client.completions.create({ model: 'tiny', prompt: 'Once upon a time', temperature: 0 });
    expect(res.model).toBe('gpt-x');
    // -n 6: the budget of a request that sets none.
    expect(res.usage?.completion_tokens).toBe(6);
  });

  it('--chat-template-file renders chat and /apply-template', async () => {
    const messages = [{ role: 'user' as const, content: 'Once upon a time' }];
    const applied = await fetch(`${cli.url}/apply-template`, { method: 'POST', body: JSON.stringify({ messages }) });
    expect(await applied.json()).toEqual({ prompt: '[user] Once upon a time\n[assistant]' });
    const client = api.openai;
    const chat = await client.chat.completions.create({ model: 'gpt-x', messages, max_tokens: 3, temperature: 0 });
    const tokenize = await fetch(`${cli.url}/tokenize`, { method: 'POST', body: JSON.stringify({ content: '[user] Once upon a time\n[assistant]' }) });
    expect(chat.usage?.prompt_tokens).toBe(((await tokenize.json()) as { tokens: number[] }).tokens.length);
    // --verbose: the native body of the same generation, its prompt tokens decoded.
    const verbose = (chat as unknown as { __verbose: Record<string, unknown> }).__verbose;
    expect(verbose).toMatchObject({ prompt: '[user] Once upon a time\n[assistant]', content: chat.choices[0]!.message.content, tokens_predicted: 3, stop: true });
    expect(verbose.generation_settings).toMatchObject({ n_predict: 3, temperature: 0 });
  });

  it('--verbose adds __verbose to text completions too', async () => {
    const res = await fetch(`${cli.url}/v1/completions`, { method: 'POST', body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 4, temperature: 0 }) });
    const body = (await res.json()) as any;
    expect(body.__verbose).toMatchObject({ prompt: '<s> Once upon a time', content: body.choices[0].text, tokens_evaluated: 5, tokens_predicted: 4 });
  });

  it('return_progress streams prompt_progress after each prefill chunk (-b 16), then the tokens', async () => {
    const prompt = Array.from({ length: 40 }, (_, i) => onceUponATime.prompt_token_ids[i % 5]!);
    const res = await fetch(`${cli.url}/completion`, { method: 'POST', body: JSON.stringify({ prompt, n_predict: 3, stream: true, return_progress: true, cache_prompt: false }) });
    const events = (await readSse(res)) as any[];
    const progress = events.filter((e) => e.prompt_progress);
    expect(progress.map((e) => e.prompt_progress.processed)).toEqual([16, 32, 40]);
    for (const e of progress) {
      expect(e).toMatchObject({ content: '', tokens: [], stop: false, tokens_evaluated: 40, prompt_progress: { total: 40, cache: 0 } });
      expect(e.prompt_progress.time_ms).toBeGreaterThanOrEqual(0);
    }
    // They come first, in order, before any text.
    expect(events.slice(0, 3)).toEqual(progress);
    expect(events.slice(3, -1).flatMap((e) => e.tokens)).toHaveLength(3);
    // Not without the field, nor on a body that does not stream.
    const plain = await fetch(`${cli.url}/completion`, { method: 'POST', body: JSON.stringify({ prompt, n_predict: 1, stream: true }) });
    expect(((await readSse(plain)) as any[]).some((e) => e.prompt_progress)).toBe(false);
  });

  it('return_progress on chat completions and /v1/completions streams llama-server\'s progress chunks before the tokens', async () => {
    const client = api.openai;
    /** The prefill chunks' ends for a prompt of n tokens at -b 16. */
    const ends = (n: number) => Array.from({ length: Math.ceil(n / 16) }, (_, i) => Math.min(16 * (i + 1), n));
    // Chat (the openai SDK): each progress chunk is the role delta with prompt_progress, as llama-server's.
    const messages = [{ role: 'user' as const, content: 'Once upon a time '.repeat(8) }];
    const chunks: any[] = [];
    const chat = await client.chat.completions.create({ model: 'gpt-x', messages, max_tokens: 2, stream: true, stream_options: { include_usage: true }, return_progress: true, cache_prompt: false } as OpenAI.ChatCompletionCreateParamsStreaming);
    for await (const chunk of chat) chunks.push(chunk);
    const promptTokens = chunks.at(-1).usage.prompt_tokens as number;
    expect(promptTokens).toBeGreaterThan(32);
    const progress = chunks.filter((c) => c.prompt_progress);
    expect(progress.map((c) => c.prompt_progress.processed)).toEqual(ends(promptTokens));
    for (const c of progress) {
      expect(c).toMatchObject({ object: 'chat.completion.chunk', choices: [{ index: 0, delta: { role: 'assistant', content: null }, finish_reason: null }] });
      expect(c.prompt_progress).toMatchObject({ total: promptTokens, cache: 0, time_ms: expect.any(Number) });
    }
    // After the opening role chunk, before any content.
    expect(chunks.slice(1, 1 + progress.length)).toEqual(progress);
    expect(chunks.slice(1 + progress.length).some((c) => c.choices[0]?.delta.content)).toBe(true);
    // Text completions: an empty choice with prompt_progress.
    const prompt = Array.from({ length: 40 }, (_, i) => onceUponATime.prompt_token_ids[i % 5]!);
    const res = await fetch(`${cli.url}/v1/completions`, { method: 'POST', body: JSON.stringify({ prompt, max_tokens: 2, stream: true, return_progress: true, cache_prompt: false }) });
    const events = (await readSse(res)) as any[];
    const textProgress = events.filter((e) => e.prompt_progress);
    expect(textProgress.map((e) => e.prompt_progress.processed)).toEqual([16, 32, 40]);
    for (const e of textProgress) {
      expect(e).toMatchObject({ object: 'text_completion', choices: [{ index: 0, text: '', finish_reason: null, logprobs: null }], prompt_progress: { total: 40, cache: 0 } });
    }
    expect(events.slice(0, 3)).toEqual(textProgress);
    // Not without the field.
    const plain = await client.chat.completions.create({ model: 'gpt-x', messages, max_tokens: 1, stream: true });
    for await (const chunk of plain) expect(chunk).not.toHaveProperty('prompt_progress');
  });

  it('refuses a template that is not Jinja before loading anything', async () => {
    const bad = await startCli(['--chat-template', '{% for m in messages %}']);
    expect(bad.url).toBe('');
    expect(bad.output()).toMatch(/the chat template is not valid Jinja/);
  });
});
