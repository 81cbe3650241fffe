// A hybrid state-space model (a random Nemotron-H: Mamba-2, attention, Mamba-2, MLP, with
// stories260k's tokenizer and chat template; output projections of gain 1, so that greedy
// text repeats itself and prompt lookup drafts) through the real server and engine, its
// prompts prefilled in chunks of 8 tokens beside other sequences' decode steps. Each slot
// holds its own recurrent state: seeded n = 3 choices fork the first choice's state and are
// each what seed + i gets alone, and two concurrent conversations decode as each alone.
// Speculative decoding (prompt lookup) gives plain decode's tokens: the state goes back to
// its snapshot from before a verify round whose drafts are rejected, and the kept tokens are
// prefilled again. The prompt cache keeps state snapshots at the prompt's last block
// boundary and at the end of a finished sequence: the same prompt again resumes from the
// first, a second turn extending the first's tokens from the second, each equal to its cold
// output with cached_tokens reported; a slot file carries the end snapshot, and its
// restore reproduces the second turn. What a recurrent state cannot do is refused, never
// silently wrong: context shift answers 400, and a recurrent draft model stops the load.
// Request memory admission (every model; here this one's): the engine's budget is its
// weights plus ADMITTED bytes, which admits this file's requests (at most three choices of
// ~30 tokens: each 256 B of KV per token in the f32 KV cache this file configures, its one
// attention layer of four being the only one with KV, plus ~20 KiB of Mamba-2 state, and
// ~16 KiB of activations for a prefill chunk: ~100 KB) but not one whose max_tokens can
// fill the context (512 tokens of KV, ~165 KB with its state): that one answers 503
// request_memory_budget_exceeded, streamed or not, while the others are served; a budget
// below the weights stops the load.
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadEngine } from '../src/engine/load.js';
import { checkpointWeightBytes } from '../src/models/model.js';
import { KV_TEXEL_BYTES, KV_TEXTURE_WIDTH, kvTextureRows } from '../src/runtime/tensors.js';
import { useLive, useServer } from './helpers/live-server.js';
import { TEST_BACKEND } from './helpers/model-harness.js';
import { makeRandomCheckpoint, type RandomCheckpointOptions } from './helpers/random-checkpoint.js';

const model: RandomCheckpointOptions = { hidden: 64, layers: 4, heads: 4, kvHeads: 2, headDim: 16, intermediate: 128, arch: 'nemotron_h', tokenizer: 'stories', seed: 41, init: { outGain: 1 } };
const ADMITTED = 140_000;
const dir = makeRandomCheckpoint(model, mkdtempSync(join(tmpdir(), 'mlxcel-hybrid-'))).dir;
const budget = checkpointWeightBytes(dir) + ADMITTED;
const slotDir = mkdtempSync(join(tmpdir(), 'mlxcel-hybrid-slots-'));
const live = useLive({
  model: dir,
  engine: { parallel: 3, contextSize: 1536, batchSize: 8, warmup: false, requestMemoryBudget: budget, cacheTypeK: 'f32', cacheTypeV: 'f32' },
  server: { slotSavePath: slotDir, metrics: true },
});
const shifting = useServer(live, { server: { sampling: { context_shift: true } } });

const sampled = { temperature: 1, top_k: 0, top_p: 1, min_p: 0 };
const chat = (content: string, extra: Record<string, unknown> = {}) => ({ model: 'm', messages: [{ role: 'user' as const, content }], max_tokens: 10, ...sampled, ...extra });

describe('nemotron_h through the server', () => {
  it('n = 3 seeded choices fork the prompt\'s state: choice i is what seed + i gets alone', async () => {
    const res = await live.post('/v1/chat/completions', chat('Tell me a story about a cat and a dog', { n: 3, seed: 77 }));
    expect(res.status).toBe(200);
    const texts = res.body.choices.map((c: { message: { content: string } }) => c.message.content);
    expect(new Set(texts).size).toBeGreaterThan(1);
    for (const [i, text] of texts.entries()) {
      const alone = await live.post('/v1/chat/completions', chat('Tell me a story about a cat and a dog', { seed: 77 + i }));
      expect(alone.body.choices[0].message.content).toBe(text);
    }
  });

  it('two concurrent conversations decode as each alone', async () => {
    const greedy = (content: string) => chat(content, { temperature: 0 });
    const sea = await live.openai.chat.completions.create(greedy('Tell me about the sea.'));
    const count = await live.openai.chat.completions.create(greedy('Count to five, please.'));
    const together = await Promise.all([greedy('Tell me about the sea.'), greedy('Count to five, please.')].map((r) => live.openai.chat.completions.create(r)));
    expect(together.map((r) => r.choices[0]!.message.content)).toEqual([sea, count].map((r) => r.choices[0]!.message.content));
  });

  it('resumes a cached prefix from its state snapshot, as its cold output, and a slot file restores the snapshot', async () => {
    type Completion = { content: string; tokens: number[]; tokens_cached: number };
    const complete = async (body: Record<string, unknown>): Promise<Completion> => {
      const res = await live.post('/completion', { temperature: 0, n_predict: 8, return_tokens: true, ...body });
      expect(res.status).toBe(200);
      return res.body as Completion;
    };
    await live.post('/v1/cache/reset');
    const prompt = Array.from({ length: 40 }, (_, i) => 10 + ((i * 37) % 400));
    const first = await complete({ prompt, id_slot: 0 });
    expect(first.tokens).toHaveLength(8);
    // The same prompt resumes from its last block boundary before its last token.
    const again = await complete({ prompt, id_slot: 1 });
    expect([again.tokens_cached, again.content]).toEqual([32, first.content]);
    // A second turn extending what the first fed (its prompt and all but its last token) resumes at its end.
    const history = [...prompt, ...first.tokens.slice(0, -1)];
    const next = [...history, ...first.tokens.slice(-1), 20, 30, 40];
    const cold = await complete({ prompt: next, cache_prompt: false, id_slot: 2 });
    const warm = await complete({ prompt: next, id_slot: 2 });
    expect([warm.tokens_cached, warm.content]).toEqual([history.length, cold.content]);
    const stats = await (await fetch(`${live.server.url}/v1/cache/stats`)).json() as { enabled: boolean; entries: number; bytes: number; state_snapshots: number };
    expect(stats.enabled).toBe(true);
    expect(stats.state_snapshots).toBeGreaterThanOrEqual(2);
    // Slot 0's file: its history up to the end snapshot, with that state.
    const saved = await live.post('/slots/0?action=save', { filename: 'turn.bin' });
    expect(saved.body).toMatchObject({ n_saved: history.length });
    // Version 3: KV for the attention layer alone (M*M-: none, paged, none, none), then the state.
    const file = readFileSync(join(slotDir, 'turn.bin'));
    const jsonEnd = 16 + file.readUInt32LE(12);
    const header = JSON.parse(file.toString('utf8', 16, jsonEnd)) as { kv_layout: string; ring_tokens: number; state_bytes: number };
    expect([file.readUInt32LE(8), header.kv_layout, header.ring_tokens]).toEqual([3, '-p--', 0]);
    expect(header.state_bytes).toBeGreaterThan(0);
    expect(file.length).toBe(jsonEnd + history.length * (4 + 2 * model.kvHeads * model.headDim * 4) + header.state_bytes);
    await live.post('/v1/cache/reset');
    expect((await live.post('/slots/0?action=restore', { filename: 'turn.bin' })).body).toMatchObject({ n_restored: history.length });
    const restored = await complete({ prompt: next, id_slot: 2 });
    expect([restored.tokens_cached, restored.content]).toEqual([history.length, cold.content]);
  });

  it('refuses context shift (400) and a recurrent draft model (at load)', async () => {
    const shifted = await shifting.post('/v1/chat/completions', chat('Hello'));
    expect(shifted.status).toBe(400);
    expect(shifted.body.error.message).toMatch(/context shift .* cannot be applied to nemotron_h/);
    // A recurrent draft model stops the load (its own state would need rolling back).
    await expect(loadEngine({ modelDir: 'models/stories260k', backend: TEST_BACKEND, warmup: false, speculative: { kind: 'draft-model', draftModel: dir, nMax: 4, nMin: 0, ngram: 3, adaptive: false } }))
      .rejects.toThrow(/draft model .* \(nemotron_h\) has recurrent layers/);
    // The server goes on serving.
    expect((await live.post('/v1/chat/completions', chat('Hello'))).status).toBe(200);
  });

  it('admits each request against the memory budget: one that can fill the context gets 503 with its estimate, streamed or not, while others are served', async () => {
    const [refused, served, streamed] = await Promise.all([
      live.post('/v1/chat/completions', chat('Hello', { max_tokens: 10_000 })),
      live.post('/v1/chat/completions', chat('Hello')),
      live.request('/v1/chat/completions', chat('Hello', { max_tokens: 10_000, stream: true })),
    ]);
    expect(served.status).toBe(200);
    for (const [status, body] of [[refused.status, refused.body], [streamed.status, await streamed.json()]] as const) {
      expect(status).toBe(503);
      expect(body.error).toMatchObject({ type: 'request_memory_budget_exceeded', code: 'request_memory_budget_exceeded', budget_bytes: budget });
      expect(body.error.estimated_bytes).toBeGreaterThan(ADMITTED);
    }
    expect(streamed.headers.get('content-type')).toMatch(/application\/json/);
    const props = await (await fetch(`${live.server.url}/props`)).json() as { request_memory: { budget_bytes: number; in_use_bytes: number }; memory: { kv_cache_max_bytes: number; kv_cache_max_tokens: number } };
    expect(props.request_memory).toEqual({ budget_bytes: budget, in_use_bytes: checkpointWeightBytes(dir) });
    // The recurrent and MLP layers keep no KV: the one attention layer's keys and values are all of it (f32, kvHeads * headDim = 32 values a row).
    expect(props.memory.kv_cache_max_bytes).toBe(2 * KV_TEXTURE_WIDTH * kvTextureRows((props.memory.kv_cache_max_tokens * 32) / 4) * KV_TEXEL_BYTES.f32);
    const metrics = await (await fetch(`${live.server.url}/metrics`)).text();
    expect(metrics).toContain(`mlxcel_request_memory_budget_bytes ${budget}`);
    await expect(loadEngine({ modelDir: dir, backend: TEST_BACKEND, warmup: false, requestMemoryBudget: 1000 }))
      .rejects.toThrow(/the checkpoint's weights \(\d+ bytes.*do not fit the request memory budget of 1000 bytes/);
  });
});

describe('speculative decoding on nemotron_h', () => {
  const drafting = useLive({ model: dir, engine: { parallel: 1, contextSize: 256, batchSize: 16, warmup: false, speculative: { kind: 'prompt-lookup', nMax: 4, nMin: 0, ngram: 2, adaptive: false } } });

  it('gives plain decode\'s tokens, rejected drafts rolled back', async () => {
    const ask = chat('Tell me a story about a cat and a dog', { temperature: 0, max_tokens: 48 });
    const plain = await live.post('/v1/chat/completions', ask);
    const drafted = await drafting.post('/v1/chat/completions', ask);
    expect(drafted.body.choices[0].message.content).toBe(plain.body.choices[0].message.content);
    const { draft_tokens: drafts, draft_accepted_tokens: accepted } = drafting.engine.stats().counters;
    expect(accepted).toBeGreaterThan(0);
    expect(drafts).toBeGreaterThan(accepted);
  });
});
