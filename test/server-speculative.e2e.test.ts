// Speculative decoding on the wire (stories260k, prompt lookup): chat completions and
// completions carry a top-level `timings` with the draft counters on the non-streaming body
// and on the chunk with finish_reason only; /completion puts them on its timings; /props
// reports the drafter; /metrics counts drafted and accepted tokens; a server without
// speculation sends no `timings` on chat. A draft model (stories260k drafting for itself)
// reports itself in the same places.
import { resolve } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/engine/engine.js';
import { loadEngine } from '../src/engine/load.js';
import type { SpeculativeOptions } from '../src/engine/speculative.js';
import { startServer, type RunningServer } from '../src/server/server.js';
import { TEST_BACKEND } from './helpers/model-harness.js';
import { STORIES_DIR, storiesCases } from './helpers/stories-expected.js';

interface Served {
  engine: Engine;
  server: RunningServer;
  client: OpenAI;
}

async function serve(speculative?: SpeculativeOptions): Promise<Served> {
  const engine = await loadEngine({ modelDir: STORIES_DIR, backend: TEST_BACKEND, parallel: 2, ...(speculative ? { speculative } : {}) });
  const server = await startServer(engine, { host: '127.0.0.1', port: 0, metrics: true });
  return { engine, server, client: new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 }) };
}

let spec: Served;
let plain: Served;
beforeAll(async () => {
  // Not adaptive: whether drafting pays depends on measured step times, which a loaded
  // machine skews; these tests are about what the wire reports once rounds have run.
  spec = await serve({ kind: 'prompt-lookup', nMax: 8, nMin: 0, ngram: 3, adaptive: false });
  plain = await serve();
});
afterAll(async () => {
  for (const s of [spec, plain]) {
    await s?.server.close();
    await s?.engine.close();
  }
});

/** Text stories260k partly repeats: its own greedy story. */
const STORY = storiesCases[0]!.expected_text;
const DRAFT_FIELDS = ['draft_n', 'draft_n_accepted', 'draft_rounds', 'draft_kind'];

interface DraftTimings {
  predicted_n: number;
  draft_n: number;
  draft_n_accepted: number;
  draft_rounds: number;
  draft_kind: string;
}

function expectDraftTimings(timings: DraftTimings | undefined, kind = 'prompt-lookup'): void {
  expect(timings).toMatchObject({ draft_kind: kind });
  expect(timings!.predicted_n).toBeGreaterThan(0);
  expect(timings!.draft_rounds).toBeGreaterThan(0);
  expect(timings!.draft_n).toBeGreaterThanOrEqual(timings!.draft_rounds);
  expect(timings!.draft_n_accepted).toBeLessThanOrEqual(timings!.draft_n);
}

describe('speculative decoding on the wire', () => {
  it('chat completions: timings on the body and on the finishing chunk only', async () => {
    const request = { model: 'm', messages: [{ role: 'user' as const, content: STORY }], max_tokens: 64, temperature: 0 };
    const body = (await spec.client.chat.completions.create(request)) as OpenAI.ChatCompletion & { timings?: DraftTimings };
    expectDraftTimings(body.timings);
    // Plain decode gives the same text and no timings.
    const alone = (await plain.client.chat.completions.create(request)) as OpenAI.ChatCompletion & { timings?: unknown };
    expect(alone.choices[0]!.message.content).toBe(body.choices[0]!.message.content);
    expect(alone.timings).toBeUndefined();

    const chunks: Array<OpenAI.ChatCompletionChunk & { timings?: DraftTimings }> = [];
    for await (const chunk of await spec.client.chat.completions.create({ ...request, stream: true })) chunks.push(chunk);
    const finishing = chunks.filter((c) => c.choices[0]?.finish_reason);
    expect(finishing).toHaveLength(1);
    expectDraftTimings(finishing[0]!.timings);
    expect(chunks.filter((c) => c.timings)).toHaveLength(1);
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe(body.choices[0]!.message.content);
  });

  it('completions and /completion carry the draft counters', async () => {
    const body = (await spec.client.completions.create({ model: 'm', prompt: `${STORY}\n`, max_tokens: 64, temperature: 0 })) as OpenAI.Completion & { timings?: DraftTimings };
    expectDraftTimings(body.timings);
    const chunks: Array<OpenAI.Completion & { timings?: DraftTimings }> = [];
    for await (const chunk of await spec.client.completions.create({ model: 'm', prompt: `${STORY}\n`, max_tokens: 64, temperature: 0, stream: true })) chunks.push(chunk);
    expect(chunks.filter((c) => c.timings).map((c) => c.choices[0]?.finish_reason)).toEqual(['length']);

    const native = await fetch(`${spec.server.url}/completion`, { method: 'POST', body: JSON.stringify({ prompt: `${STORY}\n`, n_predict: 64, temperature: 0 }) });
    const json = (await native.json()) as { content: string; timings: DraftTimings & { cache_n: number } };
    expectDraftTimings(json.timings);
    expect(json.content).toBe(body.choices[0]!.text);
    const plainNative = await fetch(`${plain.server.url}/completion`, { method: 'POST', body: JSON.stringify({ prompt: `${STORY}\n`, n_predict: 64, temperature: 0 }) });
    const plainTimings = ((await plainNative.json()) as { timings: Record<string, unknown> }).timings;
    for (const field of DRAFT_FIELDS) expect(plainTimings).not.toHaveProperty(field);
  });

  it('/props reports the drafter and /metrics counts drafted and accepted tokens', async () => {
    const props = (await (await fetch(`${spec.server.url}/props`)).json()) as { speculative: unknown };
    expect(props.speculative).toEqual({ draft_model: null, kind: 'prompt-lookup', n_max: 8 });
    expect(((await (await fetch(`${plain.server.url}/props`)).json()) as { speculative: unknown }).speculative).toBeNull();
    const text = await (await fetch(`${spec.server.url}/metrics`)).text();
    const value = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1]);
    const counters = spec.engine.stats().counters;
    expect(value('mlxcel_speculative_draft_tokens_total')).toBe(counters.draft_tokens);
    expect(value('mlxcel_speculative_accepted_tokens_total')).toBe(counters.draft_accepted_tokens);
    expect(counters.draft_accepted_tokens).toBeGreaterThan(0);
  });

  it('a draft model: its kind in the timings, its directory in /props', async () => {
    const draft = await serve({ kind: 'draft-model', nMax: 4, nMin: 0, ngram: 3, draftModel: STORIES_DIR, adaptive: false });
    try {
      const request = { model: 'm', messages: [{ role: 'user' as const, content: 'Tell me a story.' }], max_tokens: 48, temperature: 0 };
      const body = (await draft.client.chat.completions.create(request)) as OpenAI.ChatCompletion & { timings?: DraftTimings };
      expectDraftTimings(body.timings, 'draft-model');
      const alone = await plain.client.chat.completions.create(request);
      expect(body.choices[0]!.message.content).toBe(alone.choices[0]!.message.content);
      const props = (await (await fetch(`${draft.server.url}/props`)).json()) as { speculative: unknown };
      expect(props.speculative).toEqual({ draft_model: resolve(STORIES_DIR), kind: 'draft-model', n_max: 4 });
    } finally {
      await draft.server.close();
      await draft.engine.close();
    }
  });
});
