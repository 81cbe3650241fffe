// The embedding routes through the real server: a random-weight Qwen3 (on the 512-token
// stories tokenizer: the routes are the point) served with --embeddings (the CLI in a child
// process) and the official openai client (embeddings.create: float, base64 as the SDK
// decodes it, base64 raw, dimensions), raw HTTP for the native routes, capabilities in
// /v1/models and /props, the generation routes' 501, and every input error. The vectors are checked against the embedder run
// directly in this process on the same checkpoint. An in-process server covers the 501 of
// a server without an embedding model, and the embedder's full queue (503) and timeout (504).
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadEmbedder, type Embedder } from '../src/engine/embedder.js';
import { listCheckpointTensors, readTensorF32, writeSafetensors } from '../src/models/safetensors.js';
import { Endpoint, serve, useModel, type LiveServer } from './helpers/live-server.js';
import { testGpu } from './helpers/model-harness.js';
import { expectGenerationRefused } from './helpers/generation-routes.js';
import { makeRandomCheckpoint } from './helpers/random-checkpoint.js';
import { startServerProcess, type ServerProcess } from './helpers/server-process.js';

const HIDDEN = 64;
const CONTEXT = 64;
const TEXTS = ['Once upon a time, in a small village, there lived a curious cat named Mia.', 'Hi', 'The quick brown fox.'];

let dir: string;
let server: ServerProcess;
let api: Endpoint;
/** The same checkpoint, embedded directly (the reference for what the server returns). */
let reference: Embedder;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'embed-e2e-'));
  makeRandomCheckpoint({ arch: 'qwen3', tokenizer: 'stories', hidden: HIDDEN, layers: 2, heads: 4, kvHeads: 2, headDim: 16, intermediate: 128, seed: 5 }, dir);
  [server, reference] = await Promise.all([
    startServerProcess(['-m', dir, '--embeddings', '--batch-size', String(CONTEXT), '--alias', 'qwen3-embed']),
    testGpu().then((gpu) => loadEmbedder({ modelDir: dir, gpu, batchSize: CONTEXT })),
  ]);
  api = new Endpoint(server.url);
});

afterAll(async () => {
  await server?.stop();
  await reference?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const norm = (v: ArrayLike<number>, p = 2) => Array.from(v).reduce((s, x) => s + Math.abs(x) ** p, 0) ** (1 / p);
const maxDiff = (a: ArrayLike<number>, b: ArrayLike<number>) => Array.from(a).reduce((m, x, i) => Math.max(m, Math.abs(x - b[i]!)), 0);

async function expected(text: string, dims = HIDDEN, normalize = 2): Promise<Float32Array> {
  const [v] = await reference.embed([{ tokens: reference.tokenizer.encode(text, true), dims, normalize }]);
  return v!;
}

describe('--embeddings through the openai client', () => {
  it('embeds a batch in order, as the embedder does, unit-normed (the SDK asks for base64 and decodes it)', async () => {
    const res = await api.openai.embeddings.create({ model: 'qwen3-embed', input: TEXTS });
    expect(res.object).toBe('list');
    expect(res.model).toBe('qwen3-embed');
    expect(res.data.map((d) => d.index)).toEqual([0, 1, 2]);
    const tokens = TEXTS.reduce((n, t) => n + reference.tokenizer.encode(t, true).length, 0);
    expect(res.usage).toEqual({ prompt_tokens: tokens, total_tokens: tokens });
    for (const [i, d] of res.data.entries()) {
      expect(d.object).toBe('embedding');
      expect(d.embedding).toHaveLength(HIDDEN);
      expect(norm(d.embedding)).toBeCloseTo(1, 5);
      expect(maxDiff(d.embedding, await expected(TEXTS[i]!))).toBeLessThan(1e-5);
    }
  });

  it('float and explicit base64 (little-endian f32) carry the same vector', async () => {
    const asFloat = await api.openai.embeddings.create({ model: 'qwen3-embed', input: TEXTS[0]!, encoding_format: 'float' });
    const asBase64 = await api.openai.embeddings.create({ model: 'qwen3-embed', input: TEXTS[0]!, encoding_format: 'base64' });
    const b64 = asBase64.data[0]!.embedding as unknown as string;
    expect(typeof b64).toBe('string');
    const bytes = Buffer.from(b64, 'base64');
    const decoded = Array.from({ length: bytes.length / 4 }, (_, i) => bytes.readFloatLE(i * 4));
    expect(decoded).toEqual(asFloat.data[0]!.embedding);
  });

  it('dimensions truncates, then re-normalises', async () => {
    const res = await api.openai.embeddings.create({ model: 'qwen3-embed', input: TEXTS[0]!, dimensions: 16, encoding_format: 'float' });
    const v = res.data[0]!.embedding;
    expect(v).toHaveLength(16);
    expect(norm(v)).toBeCloseTo(1, 5);
    const raw = await expected(TEXTS[0]!, HIDDEN, -1);
    const head = Array.from(raw.slice(0, 16));
    expect(maxDiff(v, head.map((x) => x / norm(head)))).toBeLessThan(1e-5);
  });

  it('instruction is prefixed to each text', async () => {
    const res = await api.post('/v1/embeddings', { input: ['fox'], instruction: 'Instruct: find animals\nQuery:' });
    expect(maxDiff(res.body.data[0].embedding, await expected('Instruct: find animals\nQuery:fox'))).toBeLessThan(1e-5);
  });

  it('token-id inputs embed as their text does', async () => {
    const ids = reference.tokenizer.encode(TEXTS[1]!, true);
    const res = await api.openai.embeddings.create({ model: 'qwen3-embed', input: [ids, ids.slice(0, 1)], encoding_format: 'float' });
    expect(maxDiff(res.data[0]!.embedding, await expected(TEXTS[1]!))).toBeLessThan(1e-5);
    expect(res.data).toHaveLength(2);
  });
});

// llama-server's tokenize_mixed: an array holding both token ids and strings is one input,
// its pieces concatenated; a string piece gets the special tokens only when it starts the
// input. Arrays of strings and arrays of token arrays stay lists of inputs.
describe('ids mixed with text', () => {
  const vectorOf = async (ids: number[]) => (await reference.embed([{ tokens: ids, dims: HIDDEN, normalize: 2 }]))[0]!;
  const mixed = [12, 34, 'a fox', 56, 78];
  const ids = () => [12, 34, ...reference.tokenizer.encode('a fox', false), 56, 78];

  it('[12, 34, "a fox", 56, 78] embeds as the equivalent token ids, on every route', async () => {
    const asIds = await api.post('/v1/embeddings', { input: ids() });
    const reference = await vectorOf(ids());
    expect(maxDiff(asIds.body.data[0].embedding, reference)).toBeLessThan(1e-5);
    const res = await api.post('/v1/embeddings', { input: mixed });
    expect(res.status).toBe(200);
    expect(res.body.data).toHaveLength(1);
    expect(res.body.data[0].embedding).toEqual(asIds.body.data[0].embedding);
    expect(res.body.usage.prompt_tokens).toBe(ids().length);
    // The openai client's types have no mixed form; it sends the array as given.
    const sdk = await api.openai.embeddings.create({ model: 'qwen3-embed', input: mixed as unknown as number[], encoding_format: 'float' });
    expect(sdk.data[0]!.embedding).toEqual(asIds.body.data[0].embedding);
    for (const path of ['/embedding', '/embeddings']) {
      for (const body of [{ input: mixed }, { content: mixed }]) {
        const native = await api.post(path, body);
        expect(native.status, path).toBe(200);
        expect(native.body).toHaveLength(1);
        expect(native.body[0].embedding[0]).toEqual(asIds.body.data[0].embedding);
      }
    }
  });

  it('a leading string gets the special tokens (and the instruction); a list may hold mixed inputs', async () => {
    const leading = [...reference.tokenizer.encode('Query:Hi', true), 5, 6];
    const res = await api.post('/v1/embeddings', { input: [['Hi', 5, 6], [7, 'Hi'], 'Hi', [7, 8]], instruction: 'Query:' });
    expect(res.status).toBe(200);
    expect(res.body.data).toHaveLength(4);
    const expectedIds = [leading, [7, ...reference.tokenizer.encode('Hi', false)], reference.tokenizer.encode('Query:Hi', true), [7, 8]];
    for (const [i, tokens] of expectedIds.entries()) expect(maxDiff(res.body.data[i].embedding, await vectorOf(tokens))).toBeLessThan(1e-5);
  });

  it('refuses a mixed input with a bad id, and a list element of strings only', async () => {
    const cases: Array<[unknown, RegExp]> = [
      [[12, 999999, 'x'], /input\[0\] contains token id 999999, which is >= vocab_size \d+/],
      [[12, -1, 'x'], /^input\[1\] must be >= 0$/],
      [[12, 1.5, 'x'], /^input\[1\] must be string or integer or array$/],
      [[['a', 'b']], /^input\[0\] must be a string, token ids, or token ids mixed with strings$/],
      [[12, [1, 2]], /^input\[0\] must be a string, token ids, or token ids mixed with strings$/],
      [[12, 'x', null], /^input\[2\] must be string or integer or array$/],
      [[[12, ['x']]], /^input\[0\]\[1\] must be string or integer$/],
    ];
    for (const [input, message] of cases) {
      const res = await api.post('/v1/embeddings', { input });
      expect(res.status, JSON.stringify(input)).toBe(400);
      expect(res.body.error.message, JSON.stringify(input)).toMatch(message);
    }
  });
});

describe('embd_normalize', () => {
  it('-1 none, 0 max-abs into int16 range, 1 taxicab, 2 euclidean, 3 p-norm', async () => {
    const get = async (embd_normalize: number) => (await api.post('/v1/embeddings', { input: TEXTS[0], embd_normalize })).body.data[0].embedding as number[];
    const raw = await get(-1);
    expect(maxDiff(raw, await expected(TEXTS[0]!, HIDDEN, -1))).toBeLessThan(1e-5);
    const maxAbs = Math.max(...raw.map(Math.abs));
    expect(maxDiff(await get(0), raw.map((x) => (x * 32760) / maxAbs))).toBeLessThan(1e-2);
    expect(norm(await get(1), 1)).toBeCloseTo(1, 5);
    expect(norm(await get(2), 2)).toBeCloseTo(1, 5);
    expect(norm(await get(3), 3)).toBeCloseTo(1, 5);
  });
});

describe('native routes', () => {
  it('/embedding and /embeddings answer a bare array of {index, embedding: [row]}, from content', async () => {
    for (const path of ['/embedding', '/embeddings']) {
      const { status, body } = await api.post(path, { content: [TEXTS[1], TEXTS[2]] });
      expect(status).toBe(200);
      expect(Array.isArray(body)).toBe(true);
      expect(body.map((e: { index: number }) => e.index)).toEqual([0, 1]);
      expect(body[0].embedding).toHaveLength(1);
      expect(maxDiff(body[0].embedding[0], await expected(TEXTS[1]!))).toBeLessThan(1e-5);
      expect(maxDiff(body[1].embedding[0], await expected(TEXTS[2]!))).toBeLessThan(1e-5);
    }
  });
});

describe('capabilities and generation', () => {
  it('/v1/models and /props say embedding, not completion', async () => {
    const models = (await (await fetch(`${server.url}/v1/models`)).json()) as { data: Array<{ id: string; capabilities: string[] }> };
    expect(models.data).toHaveLength(1);
    expect(models.data[0]).toMatchObject({ id: 'qwen3-embed', capabilities: ['embedding'] });
    const props = (await (await fetch(`${server.url}/props`)).json()) as { capabilities: string[] };
    expect(props.capabilities).toEqual(['embedding']);
  });

  it('every generation route and alias answers 501 naming --embeddings; the tokenizer routes still serve', async () => {
    await expectGenerationRefused(server.url, '--embeddings');
    const chat = await api.openai.chat.completions.create({ model: 'qwen3-embed', messages: [{ role: 'user', content: 'hi' }] }).then(() => undefined, (e: unknown) => e);
    expect(chat).toMatchObject({ status: 501, message: expect.stringContaining('`--embeddings`') });
    // The routes of models this server lacks name what it does serve.
    const image = await api.post('/v1/images/generations', { prompt: 'a cat' });
    expect(image.status).toBe(501);
    expect(image.body.error.message).toMatch(/not supported yet; this server serves embeddings \(\/v1\/embeddings, \/embedding, \/embeddings\)$/);
    const { body } = await api.post('/tokenize', { content: 'Hi' });
    expect(body.tokens).toEqual(reference.tokenizer.encode('Hi', false));
    expect((await api.post('/detokenize', { tokens: body.tokens })).body).toEqual({ content: 'Hi' });
  });
});

describe('errors', () => {
  const cases: Array<[string, Record<string, unknown>, RegExp]> = [
    ['no input', {}, /"input" or "content" must be provided/],
    ['empty input', { input: [] }, /`input` must not be empty/],
    ['an empty string', { input: ['a', ''] }, /input\[1\] is an empty string/],
    ['an empty token list', { input: [[1, 2], []] }, /input\[1\] is an empty token list/],
    ['a token id past the vocabulary', { input: [[1, 999999]] }, /input\[0\] contains token id 999999, which is >= vocab_size \d+/],
    ['another model', { input: 'a', model: 'gpt-4' }, /model `gpt-4`.*`qwen3-embed`/],
    ['a bad encoding_format', { input: 'a', encoding_format: 'int8' }, /encoding_format must be one of: float, base64/],
    ['dimensions 0', { input: 'a', dimensions: 0 }, /`dimensions` must be between 1 and 64/],
    ['dimensions past the model', { input: 'a', dimensions: 65 }, /`dimensions` must be between 1 and 64/],
    ['an input longer than the context', { input: 'word '.repeat(200) }, /exceeds the available context size \(64 tokens\)|more than the 64/],
    ['token ids longer than the context', { input: Array.from({ length: 65 }, () => 1) }, /input\[0\] has 65 tokens, more than the 64/],
  ];
  for (const [label, body, message] of cases) {
    it(`400 for ${label}`, async () => {
      for (const path of ['/v1/embeddings', '/embedding']) {
        const res = await api.post(path, body);
        expect(res.status).toBe(400);
        expect(res.body.error.type).toBe('invalid_request_error');
        expect(res.body.error.message).toMatch(message);
      }
    });
  }
});

describe('an in-process server with a chat model (stories260k)', () => {
  let app: LiveServer | undefined;
  const chat = useModel({ model: 'models/stories260k', engine: { parallel: 1, contextSize: 64, warmup: false } });
  afterAll(async () => {
    await app?.close();
  });

  it('without an embedding model answers 501 naming --embeddings and --embedding-model', async () => {
    app = await serve(chat.engine);
    for (const path of ['/v1/embeddings', '/embedding', '/embeddings']) {
      const res = await fetch(`${app.url}${path}`, { method: 'POST', body: JSON.stringify({ input: 'a' }) });
      expect(res.status).toBe(501);
      const body = (await res.json()) as { error: { message: string } };
      expect(body.error.message).toMatch(/--embeddings.*--embedding-model/);
    }
    const props = (await (await fetch(`${app.url}/props`)).json()) as { capabilities: string[] };
    expect(props.capabilities).toEqual(['completion']);
    await app.close();
    app = undefined;
  });

  it('beside the chat model: both listed; a full queue answers 503, a timeout 504', async () => {
    const gpu = await testGpu();
    const queued = await loadEmbedder({ modelDir: dir, gpu, batchSize: CONTEXT, maxQueue: 1, alias: 'beside' });
    app = await serve(chat.engine, { server: { embedder: queued } });
    try {
      const models = (await (await fetch(`${app.url}/v1/models`)).json()) as { data: Array<{ id: string; capabilities: string[] }> };
      expect(models.data.map((m) => m.capabilities)).toEqual([['completion'], ['embedding']]);
      expect(models.data[1]!.id).toBe('beside');
      const statuses = await Promise.all(Array.from({ length: 4 }, () =>
        fetch(`${app!.url}/v1/embeddings`, { method: 'POST', body: JSON.stringify({ input: TEXTS }) }).then((r) => r.status)));
      expect(statuses).toContain(200);
      expect(statuses).toContain(503);
    } finally {
      await app.close();
      app = undefined;
      await queued.close();
    }
    const slow = await loadEmbedder({ modelDir: dir, gpu, batchSize: CONTEXT, timeoutMs: 1 });
    app = await serve(chat.engine, { server: { embedder: slow } });
    try {
      const res = await fetch(`${app.url}/v1/embeddings`, { method: 'POST', body: JSON.stringify({ input: TEXTS }) });
      expect(res.status).toBe(504);
    } finally {
      await app.close();
      app = undefined;
      await slow.close();
    }
  });

  it('a non-finite vector answers 500 server_error', async () => {
    // The same checkpoint with an infinite final norm weight: the pooled vector overflows.
    const broken = join(dir, '..', `${dir.split('/').pop()}-inf`);
    cpSync(dir, broken, { recursive: true });
    const tensors = [...listCheckpointTensors(dir).values()].map((t) => {
      const data = readTensorF32(t);
      return { name: t.name, dtype: 'F32' as const, shape: t.info.shape, data: t.name === 'model.norm.weight' ? data.map(() => Infinity) : data };
    });
    writeSafetensors(join(broken, 'model.safetensors'), tensors, { format: 'pt' });
    const embedder = await loadEmbedder({ modelDir: broken, gpu: await testGpu(), batchSize: CONTEXT });
    app = await serve(chat.engine, { server: { embedder } });
    try {
      const res = await fetch(`${app.url}/v1/embeddings`, { method: 'POST', body: JSON.stringify({ input: TEXTS[0], embd_normalize: -1 }) });
      expect(res.status).toBe(500);
      const body = (await res.json()) as { error: { type: string; message: string } };
      expect(body.error.type).toBe('server_error');
      expect(body.error.message).toMatch(/input\[0\] is not finite/);
    } finally {
      await embedder.close();
      rmSync(broken, { recursive: true, force: true });
    }
  });
});
