// response_format end to end: the official openai client against a live server on the
// real engine (a random-weight Qwen3-shaped model with the real Qwen3 tokenizer), streaming
// and not, chat and text completions, the length cut, and every 400 the reference lists;
// and Anthropic's output_config.format through @anthropic-ai/sdk, held to the same grammar.
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { FakeEngine } from './helpers/fake-engine.js';
import { makeAjv, REAL_WORLD_SCHEMAS } from './helpers/json-schemas.js';
import { serve, tinyQwen3, useLive } from './helpers/live-server.js';

const ajv = makeAjv();
const animal = REAL_WORLD_SCHEMAS.find((s) => s.name === 'animal')!.schema;
const order = REAL_WORLD_SCHEMAS.find((s) => s.name === 'order')!.schema;
const format = (schema: unknown) => ({ type: 'json_schema' as const, json_schema: { name: 'result', strict: true, schema: schema as Record<string, unknown> } });

const model = 'qwen3-tiny';
const live = useLive({ model: tinyQwen3({ layers: 1, seed: 5 }), engine: { alias: model, parallel: 4, contextSize: 4 * 1024 } });
async function rejected(p: Promise<unknown>): Promise<{ status: number; message: string }> {
  try {
    await p;
  } catch (err) {
    if (err instanceof OpenAI.APIError) return { status: err.status ?? 0, message: err.message };
    throw err;
  }
  throw new Error('expected a rejection');
}

describe('response_format json_schema', () => {
  it('constrains chat completions', async () => {
    const cases = [[animal, 1], [order, 2], [animal, 3]] as const;
    await Promise.all(cases.map(async ([schema, seed]) => {
      const res = await live.openai.chat.completions.create({
        model,
        messages: [{ role: 'user', content: 'Name one animal and its habitat.' }],
        response_format: format(schema),
        temperature: 1,
        seed,
        max_tokens: 1000,
      });
      const choice = res.choices[0]!;
      expect(choice.finish_reason).toBe('stop');
      expect(ajv.validate(schema, JSON.parse(choice.message.content!))).toBe(true);
    }));
  });

  it('constrains a streamed chat completion', async () => {
    const stream = await live.openai.chat.completions.create({
      model,
      messages: [{ role: 'user', content: 'An order, please.' }],
      response_format: format(order),
      temperature: 1,
      seed: 7,
      max_tokens: 1000,
      stream: true,
    });
    let content = '';
    const reasons: Array<string | null> = [];
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      if (!choice) continue;
      content += choice.delta.content ?? '';
      reasons.push(choice.finish_reason);
    }
    expect(reasons.at(-1)).toBe('stop');
    expect(ajv.validate(order, JSON.parse(content))).toBe(true);
  });

  it('constrains text completions, streamed and not', async () => {
    const request = { model, prompt: 'JSON:', response_format: format(animal), temperature: 1, seed: 4, max_tokens: 200 };
    const res = await live.openai.completions.create(request as OpenAI.CompletionCreateParamsNonStreaming);
    expect(res.choices[0]!.finish_reason).toBe('stop');
    expect(ajv.validate(animal, JSON.parse(res.choices[0]!.text))).toBe(true);
    let text = '';
    let last: string | null = null;
    for await (const chunk of await live.openai.completions.create({ ...request, stream: true } as OpenAI.CompletionCreateParamsStreaming)) {
      text += chunk.choices[0]?.text ?? '';
      last = chunk.choices[0]?.finish_reason ?? last;
    }
    expect(last).toBe('stop');
    expect(text).toBe(res.choices[0]!.text);
  });

  it('ends with "length" when max_tokens cuts the document', async () => {
    const res = await live.openai.chat.completions.create({
      model,
      messages: [{ role: 'user', content: 'An order.' }],
      response_format: format(order),
      max_tokens: 5,
    });
    expect(res.choices[0]!.finish_reason).toBe('length');
    expect(res.usage!.completion_tokens).toBe(5);
    // A prefix of a valid document, however the tokens split it.
    const content = res.choices[0]!.message.content!;
    expect('{"orderId":"'.startsWith(content) || content.startsWith('{"orderId":"')).toBe(true);
  });

  it('leaves "text" and an absent response_format unconstrained', async () => {
    for (const extra of [{ response_format: { type: 'text' as const } }, {}]) {
      const res = await live.openai.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 8, temperature: 0, ...extra });
      expect(res.choices[0]!.finish_reason).toBe('length');
    }
  });
});

describe('response_format 400s', () => {
  const chat = (response_format: unknown) =>
    live.openai.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], max_tokens: 4, response_format } as OpenAI.ChatCompletionCreateParamsNonStreaming);

  it('refuses json_object on both OpenAI routes', async () => {
    for (const p of [chat({ type: 'json_object' }), live.openai.completions.create({ model, prompt: 'x', max_tokens: 4, response_format: { type: 'json_object' } } as OpenAI.CompletionCreateParamsNonStreaming)]) {
      const err = await rejected(p);
      expect(err.status).toBe(400);
      expect(err.message).toMatch(/json_object/);
    }
  });

  it('names an unsupported keyword and never echoes the schema', async () => {
    const err = await rejected(chat(format({ type: 'object', properties: { SECRET_NAME: { type: 'string', not: { const: 'SECRET_VALUE' } } } })));
    expect(err.status).toBe(400);
    expect(err.message).toContain('"not"');
    expect(err.message).not.toMatch(/SECRET/);
  });

  it('refuses schemas over the limits with a short message', async () => {
    const big = { type: 'string', description: 'SECRET'.repeat(12_000) };
    let deep: Record<string, unknown> = { type: 'string' };
    for (let i = 0; i < 20; i++) deep = { type: 'object', properties: { SECRET: deep } };
    const refs = { type: 'object', properties: Object.fromEntries(Array.from({ length: 70 }, (_, i) => [`p${i}`, { $ref: '#/$defs/s' }])), $defs: { s: { type: 'string' } } };
    for (const [schema, why] of [[big, /64 KiB/], [deep, /32 levels/], [refs, /64 \$ref/]] as const) {
      const err = await rejected(chat(format(schema)));
      expect(err.status).toBe(400);
      expect(err.message).toMatch(why);
      expect(err.message).not.toMatch(/SECRET/);
      expect(err.message.length).toBeLessThan(200);
    }
  });

  it('refuses a json_schema without a schema, and unknown types', async () => {
    expect((await rejected(chat({ type: 'json_schema', json_schema: { name: 'x' } }))).status).toBe(400);
    expect((await rejected(chat({ type: 'xml' }))).status).toBe(400);
  });

  it('refuses any response_format but {"type": "text"} on /completion', async () => {
    for (const response_format of [format(animal), { type: 'json_object' }, { type: 'text', extra: 1 }]) {
      const res = await live.request('/completion', { prompt: 'x', n_predict: 2, response_format });
      expect(res.status).toBe(400);
      expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(/response_format/);
    }
    const ok = await live.request('/completion', { prompt: 'x', n_predict: 2, response_format: { type: 'text' } });
    expect(ok.status).toBe(200);
  });

  it('answers UnsupportedTokenizer for a tokenizer it cannot walk', async () => {
    const fake = await FakeEngine.create();
    (fake.tokenizer as unknown as { modelType: string }).modelType = 'Unigram';
    const other = await serve(fake);
    try {
      const res = await other.request('/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], response_format: format(animal) });
      expect(res.status).toBe(400);
      expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(/^UnsupportedTokenizer/);
    } finally {
      await other.close();
    }
  });
});

describe('Anthropic output_config.format', () => {
  const anthropic = () => live.anthropic;
  // Small documents keep the generation short.
  const pet = { type: 'object', properties: { name: { type: 'string', maxLength: 6 }, legs: { type: 'integer', minimum: 0, maximum: 8 } }, required: ['name', 'legs'], additionalProperties: false };
  const tag = { type: 'array', items: { enum: ['a', 'b'] }, minItems: 1, maxItems: 3 };
  const params = (schema: unknown) => ({
    model,
    max_tokens: 100,
    messages: [{ role: 'user' as const, content: 'Name one animal and its habitat.' }],
    output_config: { format: { type: 'json_schema' as const, schema: schema as Record<string, unknown> } },
  });

  it('constrains the text block, streamed and not', async () => {
    const msg = await anthropic().messages.create(params(pet));
    expect(msg.stop_reason).toBe('end_turn');
    expect(msg.content.map((b) => b.type)).toEqual(['text']);
    const text = (msg.content[0] as Anthropic.TextBlock).text;
    expect(ajv.validate(pet, JSON.parse(text))).toBe(true);
    const streamed = await anthropic().messages.stream(params(tag)).finalMessage();
    expect(streamed.stop_reason).toBe('end_turn');
    expect(ajv.validate(tag, JSON.parse((streamed.content[0] as Anthropic.TextBlock).text))).toBe(true);
  });

  it("takes the structured-outputs beta's output_format the same way", async () => {
    const { output_config, ...rest } = params(tag);
    const res = await live.request('/v1/messages', { ...rest, output_format: output_config.format });
    const msg = (await res.json()) as Anthropic.Message;
    expect(res.status).toBe(200);
    expect(ajv.validate(tag, JSON.parse((msg.content[0] as Anthropic.TextBlock).text))).toBe(true);
  });

  it('refuses what the grammar cannot honour, in the Anthropic envelope', async () => {
    const refused = async (body: Record<string, unknown>) => {
      const res = await live.request('/v1/messages', { model, max_tokens: 4, messages: [{ role: 'user', content: 'x' }], ...body });
      expect(res.status).toBe(400);
      const error = (await res.json()) as { type: string; error: { type: string; message: string } };
      expect(error).toMatchObject({ type: 'error', error: { type: 'invalid_request_error' } });
      return error.error.message;
    };
    const schema = { type: 'object', properties: { a: { type: 'string', not: { const: 'b' } } } };
    expect(await refused({ output_config: { format: { type: 'json_schema', schema } } })).toContain('"not"');
    expect(await refused({ output_format: { type: 'json_schema', schema } })).toContain('"not"');
    expect(await refused({ output_config: { format: { type: 'text' } } })).toMatch(/output_config\.format/);
    expect(await refused({ output_config: { format: { type: 'json_schema' } } })).toBe('output_config.format.schema is required');
    expect(await refused({ output_config: { format: { type: 'json_schema', schema: animal } }, output_format: { type: 'json_schema', schema: animal } })).toMatch(/cannot be combined/);
    const tools = [{ name: 'f', input_schema: { type: 'object' } }];
    expect(await refused({ output_config: { format: { type: 'json_schema', schema: animal } }, tools, tool_choice: { type: 'any' } })).toMatch(/forced tool_choice/);
    // The SDK raises it as a BadRequestError.
    const err = await anthropic()
      .messages.create({ ...params(schema), max_tokens: 4 })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.BadRequestError);
  });
});
