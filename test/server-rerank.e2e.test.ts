// The rerank routes through the real server (the CLI in a child process) on a random
// XLM-R sequence classifier: --reranking serves it alone (all four paths, Cohere/Jina's
// shape from `documents`, TEI's bare array from `texts`, top_n, returned documents, every
// error, capabilities, generation's 501), scores checked against the reranker run directly
// in this process; and --embedding-model / --reranker-model beside a chat model
// (stories260k): three models listed with their capabilities, each route served.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadEmbedder, type Embedder } from '../src/engine/embedder.js';
import { EmbeddingOnlyEngine } from '../src/engine/embedding-only-engine.js';
import { qwen3RerankPrompt } from '../src/server/native/rerank.js';
import { expectGenerationRefused } from './helpers/generation-routes.js';
import { Endpoint, serve } from './helpers/live-server.js';
import { makeRandomCheckpoint } from './helpers/random-checkpoint.js';
import { makeEncoderCheckpoint } from './helpers/encoder-checkpoint.js';
import { testGpu } from './helpers/model-harness.js';
import { startServerProcess, type ServerProcess } from './helpers/server-process.js';

const CONTEXT = 64;
const QUERY = 'what is the capital of france?';
const DOCUMENTS = ['paris is the capital of france.', 'the quick brown fox jumps over the lazy dog.', 'berlin is a city in germany.', 'hi', 'a giant panda eats bamboo in china.'];

let tmp: string;
let rerankerDir: string;
let bertDir: string;
let server: ServerProcess;
let api: Endpoint;
let reference: Embedder;

beforeAll(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'rerank-e2e-'));
  rerankerDir = join(tmp, 'xlmr-reranker');
  bertDir = join(tmp, 'bert-embed');
  makeEncoderCheckpoint({ arch: 'xlm-roberta', hidden: 64, layers: 2, heads: 4, intermediate: 128, seed: 41, classifier: true }, rerankerDir);
  makeEncoderCheckpoint({ arch: 'bert', hidden: 64, layers: 2, heads: 4, intermediate: 128, seed: 31, pooling: 'mean' }, bertDir);
  [server, reference] = await Promise.all([
    startServerProcess(['-m', rerankerDir, '--rerank', '--batch-size', String(CONTEXT)]),
    testGpu().then((gpu) => loadEmbedder({ modelDir: rerankerDir, gpu, pooling: 'rank', batchSize: CONTEXT })),
  ]);
  api = new Endpoint(server.url);
});

afterAll(async () => {
  await server?.stop();
  await reference?.close();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

async function expectedScores(): Promise<number[]> {
  const logits = await reference.rank(DOCUMENTS.map((d) => reference.tokenizer.encodePair(QUERY, d)));
  return logits.map((x) => 1 / (1 + Math.exp(-x)));
}

describe('--reranking', () => {
  it('scores every document, sorted by score, on all four paths', async () => {
    const scores = await expectedScores();
    const order = scores.map((s, i) => [s, i] as const).sort((a, b) => b[0] - a[0] || a[1] - b[1]).map(([, i]) => i);
    for (const path of ['/v1/rerank', '/v1/reranking', '/rerank', '/reranking']) {
      const { status, body } = await api.post(path, { query: QUERY, documents: DOCUMENTS });
      expect(status).toBe(200);
      expect(body.object).toBe('list');
      expect(body.model).toBe('xlmr-reranker');
      expect(body.results.map((r: { index: number }) => r.index)).toEqual(order);
      for (const r of body.results as Array<{ index: number; relevance_score: number; document?: unknown }>) {
        expect(r.relevance_score).toBeGreaterThanOrEqual(0);
        expect(r.relevance_score).toBeLessThanOrEqual(1);
        expect(Math.abs(r.relevance_score - scores[r.index]!)).toBeLessThan(1e-5);
        expect(r.document).toBeUndefined();
      }
      const tokens = DOCUMENTS.reduce((n, d) => n + reference.tokenizer.encodePair(QUERY, d).length, 0);
      expect(body.usage).toEqual({ prompt_tokens: tokens, total_tokens: tokens });
    }
  });

  it('top_n cuts the sorted list; return_documents adds each document', async () => {
    const all = (await api.post('/v1/rerank', { query: QUERY, documents: DOCUMENTS })).body.results;
    const { body } = await api.post('/v1/rerank', { query: QUERY, documents: DOCUMENTS, top_n: 2, return_documents: true });
    expect(body.results).toHaveLength(2);
    expect(body.results.map((r: { index: number }) => r.index)).toEqual(all.slice(0, 2).map((r: { index: number }) => r.index));
    for (const r of body.results) expect(r.document).toEqual({ text: DOCUMENTS[r.index] });
  });

  it('texts answers TEI\'s bare array, with text when return_text', async () => {
    const scores = await expectedScores();
    const { status, body } = await api.post('/rerank', { query: QUERY, texts: DOCUMENTS, return_text: true });
    expect(status).toBe(200);
    expect(Array.isArray(body)).toBe(true);
    expect(body).toHaveLength(DOCUMENTS.length);
    for (const r of body as Array<{ index: number; score: number; text: string }>) {
      expect(Math.abs(r.score - scores[r.index]!)).toBeLessThan(1e-5);
      expect(r.text).toBe(DOCUMENTS[r.index]);
    }
    const scoresDesc = (body as Array<{ score: number }>).map((r) => r.score);
    expect(scoresDesc).toEqual([...scoresDesc].sort((a, b) => b - a));
  });

  it('names itself a reranker at startup', () => {
    expect(server.output()).toMatch(/^mlxcel-server: reranker xlmr-reranker \(xlm-roberta, f32, sequence classifier, query and document up to 64 tokens\) from \S+xlmr-reranker$/m);
    expect(server.output()).not.toMatch(/rank pooling/);
  });

  it('capabilities say rerank; every generation route and alias, and embeddings, answer 501 naming how to get them', async () => {
    const props = (await (await fetch(`${server.url}/props`)).json()) as { capabilities: string[] };
    expect(props.capabilities).toEqual(['rerank']);
    await expectGenerationRefused(server.url, '--reranking');
    const embed = await api.post('/v1/embeddings', { input: 'hi' });
    expect(embed.status).toBe(501);
    expect(embed.body.error.message).toContain('--embedding-model');
  });

  const errors: Array<[string, Record<string, unknown>, RegExp]> = [
    ['no query', { documents: DOCUMENTS }, /"query" must be provided/],
    ['no documents', { query: QUERY }, /"documents" must be a non-empty string array/],
    ['empty documents', { query: QUERY, documents: [] }, /"documents" must be a non-empty string array/],
    ['top_n 0', { query: QUERY, documents: DOCUMENTS, top_n: 0 }, /`top_n` must be at least 1/],
    ['an instruction for a sequence classifier', { query: QUERY, documents: DOCUMENTS, instruction: 'Judge relevance' }, /`instruction` applies to generative rerankers/],
    ['another model', { query: QUERY, documents: DOCUMENTS, model: 'bge-reranker-v2-m3' }, /model `bge-reranker-v2-m3`.*`xlmr-reranker`/],
    ['a document too long for the pass', { query: QUERY, documents: ['hi', 'the cat '.repeat(40)] }, /documents\[1\] with the query has \d+ tokens, more than the 64/],
  ];
  for (const [label, body, message] of errors) {
    it(`400 for ${label}`, async () => {
      const res = await api.post('/v1/rerank', body);
      expect(res.status).toBe(400);
      expect(res.body.error.type).toBe('invalid_request_error');
      expect(res.body.error.message).toMatch(message);
    });
  }
});

describe('--embedding-model and --reranker-model beside a chat model', () => {
  let beside: ServerProcess;
  let besideApi: Endpoint;
  beforeAll(async () => {
    beside = await startServerProcess(['-m', 'models/stories260k', '-np', '1', '--embedding-model', bertDir, '--reranker-model', rerankerDir, '--batch-size', String(CONTEXT)]);
    besideApi = new Endpoint(beside.url);
  });
  afterAll(() => beside?.stop());

  it('lists three models with their capabilities and serves each route', async () => {
    expect(beside.output()).toMatch(/^mlxcel-server: embedding model bert-embed \(bert, f32, mean pooling, 64 dims, inputs up to 64 tokens\) from \S+bert-embed$/m);
    expect(beside.output()).toMatch(/^mlxcel-server: reranker xlmr-reranker \(xlm-roberta, f32, sequence classifier, query and document up to 64 tokens\) from /m);
    const models = (await (await fetch(`${beside.url}/v1/models`)).json()) as { data: Array<{ id: string; capabilities: string[] }> };
    expect(models.data.map((m) => [m.id, m.capabilities])).toEqual([['stories260k', ['completion']], ['bert-embed', ['embedding']], ['xlmr-reranker', ['rerank']]]);
    const props = (await (await fetch(`${beside.url}/props`)).json()) as { capabilities: string[] };
    expect(props.capabilities).toEqual(['completion', 'embedding', 'rerank']);
    const { openai } = besideApi;
    const embedded = await openai.embeddings.create({ model: 'bert-embed', input: ['hello world', 'the cat'] });
    expect(embedded.data.map((d) => d.embedding.length)).toEqual([64, 64]);
    const ranked = await besideApi.post('/v1/rerank', { query: QUERY, documents: DOCUMENTS, top_n: 1 });
    expect(ranked.status).toBe(200);
    expect(ranked.body.results).toHaveLength(1);
    const chat = await openai.completions.create({ model: 'stories260k', prompt: 'Once upon a time', max_tokens: 4, temperature: 0 });
    expect(chat.choices[0]!.text.length).toBeGreaterThan(0);
  });
});

describe('a generative reranker (Qwen3-Reranker layout) served as --reranking serves it', () => {
  it('scores P(yes) of its prompt, with the request\'s instruction or the default one, and names itself a generative reranker', async () => {
    const dir = join(tmp, 'qwen3-reranker');
    makeRandomCheckpoint({ arch: 'qwen3', tokenizer: 'qwen3', hidden: 64, layers: 2, heads: 4, kvHeads: 2, headDim: 16, intermediate: 128, seed: 9, tie: true }, dir);
    const logged: string[] = [];
    const reranker = await loadEmbedder({ modelDir: dir, gpu: await testGpu(), pooling: 'rank', batchSize: 256, log: (line) => logged.push(line) });
    expect(logged).toEqual([expect.stringMatching(/^reranker qwen3-reranker \(qwen3, \w+, generative: scores P\(yes\) of its yes\/no answer, query and document up to \d+ tokens\) from /)]);
    const app = await serve(new EmbeddingOnlyEngine(reranker, '--reranking', reranker.adapterDescription), {
      server: { reranker, generationDisabledBy: '--reranking' },
    });
    try {
      const docs = DOCUMENTS.slice(0, 3);
      for (const instruction of [undefined, 'Find the city']) {
        const prompts = docs.map((d) => reranker.tokenizer.encode(qwen3RerankPrompt(instruction ?? 'Given a web search query, retrieve relevant passages that answer the query', QUERY, d), false));
        const expected = (await reranker.rank(prompts)).map((x) => 1 / (1 + Math.exp(-x)));
        const { status, body } = await app.post('/v1/rerank', { query: QUERY, documents: docs, ...(instruction ? { instruction } : {}) });
        expect(status).toBe(200);
        for (const r of body.results as Array<{ index: number; relevance_score: number }>) expect(Math.abs(r.relevance_score - expected[r.index]!)).toBeLessThan(1e-6);
      }
    } finally {
      await app.close();
      await reranker.close();
    }
  });
});
