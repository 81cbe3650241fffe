// llama-server's grammar (GBNF) and top-level json_schema fields end to end: a live server
// on the real engine (a random-weight Qwen3-shaped model with the real Qwen3 tokenizer),
// raw HTTP on /completion, /v1/completions and chat completions, the official openai client
// on chat (the fields as extra body keys), streaming and not, and the 400s.
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { makeAjv, REAL_WORLD_SCHEMAS } from './helpers/json-schemas.js';
import { tinyQwen3, useLive } from './helpers/live-server.js';

const ajv = makeAjv();
const animal = REAL_WORLD_SCHEMAS.find((s) => s.name === 'animal')!.schema;

/** A finite language, so generation always ends: after the last digit only EOS is allowed. */
const GRAMMAR = `# an answer and a number
root   ::= answer " " number
answer ::= "yes" | "no" | "maybe"
number ::= [1-9] [0-9]{0,2}
`;
const MATCH = /^(yes|no|maybe) [1-9][0-9]{0,2}$/;
/** The same with a syntax error on line 3: a literal that never closes. */
const BROKEN = 'root   ::= answer " " number\nanswer ::= "yes" | "no"\nnumber ::= [1-9] "0\n';

const model = 'qwen3-tiny';
const live = useLive({ model: tinyQwen3({ layers: 1, seed: 9 }), engine: { alias: model, parallel: 4, contextSize: 4 * 1024 } });
async function json<T>(res: Response): Promise<T> {
  return (await res.json()) as T;
}

/** The concatenated `data:` payloads of an SSE body. */
async function sseEvents(res: Response): Promise<Array<Record<string, unknown>>> {
  const text = await res.text();
  return text
    .split('\n')
    .filter((l) => l.startsWith('data: ') && l !== 'data: [DONE]')
    .map((l) => JSON.parse(l.slice(6)) as Record<string, unknown>);
}

type ErrorBody = { error: { message: string; type: string; code: string | null; param?: string } };

describe('/completion', () => {
  it('a GBNF grammar yields only matching text, streamed and not', async () => {
    const texts = await Promise.all([1, 2, 3].map(async (seed) => {
      const res = await live.request('/completion', { prompt: 'Answer:', grammar: GRAMMAR, temperature: 1, seed, n_predict: 64 });
      expect(res.status).toBe(200);
      const body = await json<{ content: string; stop_type: string }>(res);
      expect(body.stop_type).toBe('eos');
      expect(body.content).toMatch(MATCH);
      return body.content;
    }));
    const res = await live.request('/completion', { prompt: 'Answer:', grammar: GRAMMAR, temperature: 1, seed: 1, n_predict: 64, stream: true });
    const events = await sseEvents(res);
    expect(events.map((e) => e.content).join('')).toBe(texts[0]);
    expect(events.at(-1)!.stop_type).toBe('eos');
  });

  it('a top-level json_schema yields a document the schema accepts', async () => {
    const res = await live.request('/completion', { prompt: 'JSON:', json_schema: animal, temperature: 1, seed: 4, n_predict: 300 });
    expect(res.status).toBe(200);
    const body = await json<{ content: string; stop_type: string }>(res);
    expect(body.stop_type).toBe('eos');
    expect(ajv.validate(animal, JSON.parse(body.content))).toBe(true);
  });

  it('an empty grammar is no grammar, as in llama-server', async () => {
    const res = await live.request('/completion', { prompt: 'x', grammar: '', temperature: 0, n_predict: 6 });
    expect(res.status).toBe(200);
    expect((await json<{ stop_type: string }>(res)).stop_type).toBe('limit');
  });
});

describe('/v1/completions and chat completions', () => {
  it('/v1/completions takes grammar and json_schema', async () => {
    const res = await live.request('/v1/completions', { model, prompt: 'Answer:', grammar: GRAMMAR, temperature: 1, seed: 5, max_tokens: 64 });
    const body = await json<{ choices: Array<{ text: string; finish_reason: string }> }>(res);
    expect(body.choices[0]!.finish_reason).toBe('stop');
    expect(body.choices[0]!.text).toMatch(MATCH);
    const res2 = await live.request('/v1/completions', { model, prompt: 'JSON:', json_schema: animal, temperature: 1, seed: 6, max_tokens: 300 });
    const text = (await json<{ choices: Array<{ text: string }> }>(res2)).choices[0]!.text;
    expect(ajv.validate(animal, JSON.parse(text))).toBe(true);
  });

  it('chat completions over raw HTTP', async () => {
    const res = await live.request('/v1/chat/completions', { model, messages: [{ role: 'user', content: 'Yes or no?' }], grammar: GRAMMAR, temperature: 1, seed: 2, max_tokens: 64 });
    expect(res.status).toBe(200);
    const body = await json<{ choices: Array<{ message: { content: string }; finish_reason: string }> }>(res);
    expect(body.choices[0]!.finish_reason).toBe('stop');
    expect(body.choices[0]!.message.content).toMatch(MATCH);
  });

  it('chat completions through the openai client, the fields as extra body keys, streamed and not', async () => {
    const base = { model, messages: [{ role: 'user' as const, content: 'Yes or no?' }], temperature: 1, seed: 3, max_tokens: 300 };
    const res = await live.openai.chat.completions.create({ ...base, grammar: GRAMMAR } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    expect(res.choices[0]!.finish_reason).toBe('stop');
    expect(res.choices[0]!.message.content).toMatch(MATCH);

    const doc = await live.openai.chat.completions.create({ ...base, json_schema: animal } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    expect(doc.choices[0]!.finish_reason).toBe('stop');
    expect(ajv.validate(animal, JSON.parse(doc.choices[0]!.message.content!))).toBe(true);

    const stream = await live.openai.chat.completions.create({ ...base, grammar: GRAMMAR, stream: true } as OpenAI.ChatCompletionCreateParamsStreaming);
    let content = '';
    let last: string | null = null;
    for await (const chunk of stream) {
      content += chunk.choices[0]?.delta.content ?? '';
      last = chunk.choices[0]?.finish_reason ?? last;
    }
    expect(last).toBe('stop');
    expect(content).toBe(res.choices[0]!.message.content);
  });
});

describe('400s', () => {
  it('a broken grammar names the line and column on every route', async () => {
    const requests: Array<[string, Record<string, unknown>]> = [
      ['/completion', { prompt: 'x', grammar: BROKEN }],
      ['/v1/completions', { model, prompt: 'x', grammar: BROKEN }],
      ['/v1/chat/completions', { model, messages: [{ role: 'user', content: 'x' }], grammar: BROKEN }],
    ];
    for (const [path, body] of requests) {
      const res = await live.request(path, body);
      expect(res.status, path).toBe(400);
      const { error } = await json<ErrorBody>(res);
      expect(error.type).toBe('invalid_request_error');
      expect(error.code).toBe('invalid_grammar');
      expect(error.message).toMatch(/^grammar: grammar parse error: unterminated literal at line 3, column 18$/);
    }
    const err = await live.openai.chat.completions
      .create({ model, messages: [{ role: 'user', content: 'x' }], grammar: 'root ::= item\nitem ::= "a" other' } as OpenAI.ChatCompletionCreateParamsNonStreaming)
      .then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(400);
    expect((err as Error).message).toMatch(/undefined rule "other" at line 2, column 14/);
  });

  it('refuses missing roots, left recursion and token references', async () => {
    const cases: Array<[string, RegExp]> = [
      ['item ::= "a"', /no "root" rule/],
      ['root ::= root "a" | "b"', /left recursion.*line 1, column 10/],
      ['root ::= <think> "a"', /token references/],
    ];
    for (const [grammar, message] of cases) {
      const res = await live.request('/completion', { prompt: 'x', grammar });
      expect(res.status).toBe(400);
      expect((await json<ErrorBody>(res)).error.message).toMatch(message);
    }
  });

  it('grammar, json_schema and a constraining response_format are mutually exclusive', async () => {
    const format = { type: 'json_schema', json_schema: { name: 'a', schema: animal } };
    const requests: Array<[string, Record<string, unknown>, RegExp]> = [
      ['/completion', { prompt: 'x', grammar: GRAMMAR, json_schema: animal }, /json_schema and grammar cannot be combined/],
      ['/v1/completions', { model, prompt: 'x', grammar: GRAMMAR, response_format: format }, /response_format and grammar cannot be combined/],
      ['/v1/chat/completions', { model, messages: [{ role: 'user', content: 'x' }], json_schema: animal, response_format: format }, /response_format and json_schema cannot be combined/],
    ];
    for (const [path, body, message] of requests) {
      const res = await live.request(path, body);
      expect(res.status, path).toBe(400);
      expect((await json<ErrorBody>(res)).error.message).toMatch(message);
    }
    // {"type": "text"} constrains nothing, so it combines with a grammar.
    const ok = await live.request('/v1/completions', { model, prompt: 'x', grammar: GRAMMAR, response_format: { type: 'text' }, max_tokens: 64 });
    expect(ok.status).toBe(200);
  });

  it('refuses a forced tool_choice with a grammar, bad json_schema values and a non-string grammar', async () => {
    const tool = { type: 'function', function: { name: 'f', parameters: { type: 'object', properties: {} } } };
    const forced = await live.request('/v1/chat/completions', { model, messages: [{ role: 'user', content: 'x' }], tools: [tool], tool_choice: 'required', grammar: GRAMMAR });
    expect(forced.status).toBe(400);
    expect((await json<ErrorBody>(forced)).error.message).toMatch(/forced tool_choice.*grammar/);
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ json_schema: [1] }, /json_schema must be a JSON Schema object/],
      [{ json_schema: { type: 'object', not: {} } }, /^json_schema: schema keyword "not" is not supported/],
      [{ grammar: 7 }, /grammar must be string/],
    ];
    for (const [fields, message] of cases) {
      const res = await live.request('/completion', { prompt: 'x', ...fields });
      expect(res.status).toBe(400);
      expect((await json<ErrorBody>(res)).error.message).toMatch(message);
    }
  });
});
