// The prompt cache through the real server and engine on stories260k: a shared prefix is
// reused to the token and only the suffix prefilled (timings.prompt_n / cache_n, usage
// cached_tokens, /v1/cache/stats), as llama-server counts it (an identical prompt reuses
// all but its last token), greedy output with a hit equals the cold output, the bounds (entries,
// bytes, TTL) evict, reset frees and is idempotent, concurrent requests share a prefix, a
// cancelled request donates only the blocks it completed, the KV pool grows and shrinks
// under the cache without changing what it serves, and --no-cache-prompt gives the
// fixed disabled payload that cache_prompt: true cannot change.
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import type { EngineOptions } from '../src/engine/engine.js';
import type { PromptCacheStats } from '../src/engine/prompt-cache.js';
import { useLive, useStartLive } from './helpers/live-server.js';
import { waitFor } from './helpers/server-load.js';
import { storiesCases } from './helpers/stories-expected.js';

/** 200 tokens of greedy story (expected.json case 0): prompts cut from it share prefixes. */
const STORY = storiesCases[0]!.expected_token_ids;
const BLOCK = 16;
/** KV bytes of one 16-token block of stories260k: 5 layers x (K, V) x 16 x 4 heads x 8 dims x f16 (the default cache type). */
const BLOCK_BYTES = 5 * 2 * 16 * 4 * 8 * 2;
const prompt = (from: number, n: number) => [1, ...STORY.slice(from, from + n)];

const main = useLive({ model: 'models/stories260k', engine: { parallel: 2 } });
const start = useStartLive();
const serve = (options: Partial<EngineOptions> = {}) => start({ model: 'models/stories260k', engine: { parallel: 2, ...options } });

interface NativeResult {
  content: string;
  stop_type: string;
  stopping_word: string;
  tokens_evaluated: number;
  tokens_cached: number;
  timings: { cache_n: number; prompt_n: number };
}

async function complete(url: string, body: Record<string, unknown>): Promise<NativeResult> {
  const res = await fetch(`${url}/completion`, { method: 'POST', body: JSON.stringify({ temperature: 0, n_predict: 16, ...body }) });
  expect(res.status).toBe(200);
  return (await res.json()) as NativeResult;
}

async function stats(url: string): Promise<PromptCacheStats> {
  const res = await fetch(`${url}/v1/cache/stats`);
  expect(res.status).toBe(200);
  return (await res.json()) as PromptCacheStats;
}

async function reset(url: string): Promise<PromptCacheStats> {
  const res = await fetch(`${url}/v1/cache/reset`, { method: 'POST' });
  expect(res.status).toBe(200);
  return (await res.json()) as PromptCacheStats;
}

const STATS_FIELDS = [
  'enabled', 'apc_enabled', 'block_size', 'hash', 'entries', 'bytes', 'capacity_bytes', 'max_entries', 'hits', 'lookups', 'hit_rate', 'inserts',
  'evictions_lru', 'evictions_ttl', 'rejections_oversized', 'total_blocks_stored', 'unique_block_hashes', 'apc_active_entries',
];

describe('prefix reuse', () => {
  it('a second request sharing a long prefix hits and prefills only the suffix', async () => {
    const { url } = main.server;
    await reset(url);
    const before = await stats(url);
    expect(Object.keys(before).sort()).toEqual([...STATS_FIELDS].sort());
    expect(before).toMatchObject({ enabled: true, apc_enabled: false, block_size: 16, hash: 'sha256', entries: 0 });

    const first = prompt(0, 99); // 100 tokens
    const cold = await complete(url, { prompt: first });
    expect(cold.timings).toMatchObject({ cache_n: 0, prompt_n: 100 });
    expect(cold.tokens_cached).toBe(0);
    const afterFirst = await stats(url);
    expect(afterFirst.inserts - before.inserts).toBe(Math.ceil((100 + 16 - 1) / BLOCK)); // prompt + 15 fed tokens, the last block partly
    expect(afterFirst.entries).toBe(afterFirst.inserts - before.inserts);
    expect(afterFirst.bytes).toBe(afterFirst.entries * BLOCK_BYTES);

    // A different continuation after the first 100 tokens: all 100 come back, 96 in whole
    // blocks and 4 copied from the block the first request's generation continued.
    const second = [...first, 7, 8, 9, ...STORY.slice(150, 170)];
    const hit = await complete(url, { prompt: second });
    expect(hit.timings.cache_n).toBe(100);
    expect(hit.tokens_cached).toBe(100);
    expect(hit.timings.prompt_n).toBe(second.length - 100);
    expect(hit.tokens_evaluated).toBe(second.length);
    const afterHit = await stats(url);
    expect(afterHit.hits - before.hits).toBe(1);
    expect(afterHit.lookups - before.lookups).toBe(2);
    expect(afterHit.hit_rate).toBeCloseTo(afterHit.hits / afterHit.lookups, 10);
  });

  it('reuses to the token: an identical 77-token prompt all but its last token, an extension all 77', async () => {
    await reset(main.server.url);
    const client = main.openai;
    const p = prompt(20, 76); // 77 tokens: 4 whole blocks and 13 tokens
    const run = async (tokens: number[], cache = true) => {
      const r = await client.completions.create({ model: 'm', prompt: tokens, max_tokens: 8, temperature: 0, ...(cache ? {} : { cache_prompt: false }) } as OpenAI.CompletionCreateParamsNonStreaming);
      return { text: r.choices[0]!.text, cached: r.usage!.prompt_tokens_details!.cached_tokens! };
    };
    const cold = await run(p);
    expect(cold.cached).toBe(0);
    // llama-server's count: the whole prompt matches, and the last token is evaluated again for its logits.
    const again = await run(p);
    expect(again.cached).toBe(76);
    expect(again.text).toBe(cold.text);
    const extended = [...p, 3, 4, 5];
    const warm = await run(extended);
    expect(warm.cached).toBe(77);
    expect(warm.text).toBe((await run(extended, false)).text);
    // The native route shows the prefill saved: only the uncached tokens are evaluated.
    const native = await complete(main.server.url, { prompt: [...p, 3, 4, 5, 6], n_predict: 4 });
    expect(native.timings.cache_n).toBe(80);
    expect(native.timings.prompt_n).toBe(1);
  });

  it('reports cached_tokens in chat usage through the openai client', async () => {
    await reset(main.server.url);
    const client = main.openai;
    const story = main.engine.tokenizer.decode(STORY.slice(0, 120));
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: story }];
    const first = await client.chat.completions.create({ model: 'm', messages, max_tokens: 8, temperature: 0 });
    expect(first.usage!.prompt_tokens_details!.cached_tokens).toBe(0);
    messages.push({ role: 'assistant', content: first.choices[0]!.message.content! }, { role: 'user', content: 'The end.' });
    const second = await client.chat.completions.create({ model: 'm', messages, max_tokens: 8, temperature: 0 });
    const cached = second.usage!.prompt_tokens_details!.cached_tokens!;
    expect(cached).toBeGreaterThanOrEqual(first.usage!.prompt_tokens);
    expect(second.usage!.prompt_tokens).toBeGreaterThan(cached);
    // Streaming completions report it in the usage chunk too.
    const stream = await client.completions.create({ model: 'm', prompt: story, max_tokens: 4, temperature: 0, stream: true, stream_options: { include_usage: true } });
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) usage = chunk.usage ?? usage;
    expect(usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThan(0);
  });

  it('reports the cached prompt tokens when a stop string ends the generation', async () => {
    const { url } = main.server;
    await reset(url);
    const base = prompt(3, 70);
    const first = await complete(url, { prompt: base, n_predict: 24 });
    const stop = first.content.slice(10, 16);
    expect(stop.length).toBe(6);
    // Same prompt again: its full blocks come from the cache, and the stop string ends it.
    const hit = await complete(url, { prompt: base, n_predict: 24, stop: [stop] });
    expect(hit.stop_type).toBe('word');
    expect(hit.stopping_word).toBe(stop);
    expect(hit.tokens_cached).toBe(base.length - 1);
    expect(hit.timings.cache_n).toBe(hit.tokens_cached);
    expect(hit.timings.prompt_n).toBe(base.length - hit.tokens_cached);
    // What a request ended by a stop string leaves in the cache serves the next ones: the
    // same prompt, and the prompt extended by the text it generated.
    expect((await complete(url, { prompt: base, n_predict: 4, stop: [stop] })).tokens_cached).toBe(base.length - 1);
    const reply = main.engine.tokenizer.encode(hit.content, false);
    const extended = await complete(url, { prompt: [...base, ...reply], n_predict: 4 });
    expect(extended.tokens_cached).toBeGreaterThanOrEqual(base.length);
  });

  it('greedy output with a hit equals the cold output (cache_prompt: false) for several prompts', async () => {
    const { url } = main.server;
    for (let i = 0; i < 8; i++) {
      const from = i * 9;
      const base = prompt(from, 40 + ((i * 13) % 90));
      const longer = [...base, ...STORY.slice(from + base.length + 3, from + base.length + 10)];
      await complete(url, { prompt: base, n_predict: 24 });
      const warm = await complete(url, { prompt: longer, n_predict: 32 });
      const cold = await complete(url, { prompt: longer, n_predict: 32, cache_prompt: false });
      expect(warm.timings.cache_n, `prompt ${i}`).toBeGreaterThan(0);
      expect(cold.timings).toMatchObject({ cache_n: 0, prompt_n: longer.length });
      expect(warm.content, `prompt ${i}`).toBe(cold.content);
    }
  });

  it('cache_prompt: false, at the root or in extra_body, neither reuses nor donates', async () => {
    const { url } = main.server;
    await reset(url);
    const p = prompt(10, 80);
    const before = await stats(url);
    for (const body of [{ cache_prompt: false }, { extra_body: { cache_prompt: false } }]) {
      const r = await complete(url, { prompt: p, ...body });
      expect(r.timings.cache_n).toBe(0);
    }
    const after = await stats(url);
    expect(after.inserts).toBe(before.inserts);
    expect(after.lookups).toBe(before.lookups);
    expect(after.entries).toBe(0);
    // Chat routes read it the same way.
    const chat = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      body: JSON.stringify({ messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 4, extra_body: { cache_prompt: false } }),
    });
    expect(chat.status).toBe(200);
    expect((await stats(url)).lookups).toBe(before.lookups);
  });

  it('concurrent requests share a cached prefix and match their cold outputs', async () => {
    const { url } = main.server;
    await reset(url);
    const base = prompt(0, 80); // 81 tokens: 5 full blocks and one of a single token
    await complete(url, { prompt: base, n_predict: 1 });
    const before = await stats(url);
    const prompts = [0, 1, 2, 3].map((k) => [...base, ...STORY.slice(120 + 10 * k, 128 + 10 * k)]);
    const warm = await Promise.all(prompts.map((p) => complete(url, { prompt: p, n_predict: 24 })));
    const after = await stats(url);
    expect(after.hits - before.hits).toBe(4);
    for (const r of warm) expect(r.timings.cache_n).toBe(81);
    const cold = await Promise.all(prompts.map((p) => complete(url, { prompt: p, n_predict: 24, cache_prompt: false })));
    expect(warm.map((r) => r.content)).toEqual(cold.map((r) => r.content));
  });

  it('a cancelled request donates only the blocks it completed', async () => {
    const { url } = main.server;
    await reset(url);
    const health = async () => (await (await fetch(`${url}/health`)).json()) as { batch: { active_sequences: number }; observability: { total_decode_tokens: number } };
    const decodedBefore = (await health()).observability.total_decode_tokens;
    const before = await stats(url);
    const p = prompt(0, 99); // 100 tokens
    const controller = new AbortController();
    const res = await fetch(`${url}/completion`, {
      method: 'POST',
      body: JSON.stringify({ prompt: p, n_predict: 400, temperature: 0, stream: true }),
      signal: controller.signal,
    });
    const reader = res.body!.getReader();
    let events = 0;
    while (events < 6) {
      const { value, done } = await reader.read();
      if (done) break;
      events += new TextDecoder().decode(value).split('data: ').length - 1;
    }
    expect(events).toBeGreaterThanOrEqual(6);
    controller.abort();
    await waitFor(async () => (await health()).batch.active_sequences === 0, 5000, 'the sequence to end');
    await waitFor(async () => (await stats(url)).inserts > before.inserts, 5000, 'the donation');
    const generated = (await health()).observability.total_decode_tokens - decodedBefore;
    expect(generated).toBeLessThan(400);
    const inserted = (await stats(url)).inserts - before.inserts;
    // KV was written for the prompt and the tokens fed back: the last sampled token's KV
    // was written only if a step was in flight when the abort landed.
    const written = [100 + generated - 1, 100 + generated];
    expect(written.map((n) => Math.ceil(n / BLOCK))).toContain(inserted);
    // The donated blocks are good: a request over the same text reuses every written
    // position and matches cold.
    const next = [...p, ...STORY.slice(99, 99 + generated), 5, 6, 7];
    const warm = await complete(url, { prompt: next, n_predict: 16 });
    expect(written).toContain(warm.timings.cache_n);
    expect(warm.content).toBe((await complete(url, { prompt: next, n_predict: 16, cache_prompt: false })).content);
  });
});

describe('reset', () => {
  it('frees every cached block, returns the snapshot it cleared, and is idempotent', async () => {
    const { url } = main.server;
    await reset(url);
    await complete(url, { prompt: prompt(5, 70) });
    const full = await stats(url);
    expect(full.entries).toBeGreaterThan(0);
    // One instant's snapshot: the contents it cleared and the running counters at that moment.
    const freed = await reset(url);
    expect(Object.keys(freed).sort()).toEqual([...STATS_FIELDS].sort());
    expect(freed).toEqual(full);
    // The counters keep running; only the contents are gone.
    expect(await stats(url)).toMatchObject({ entries: 0, bytes: 0, total_blocks_stored: 0, unique_block_hashes: 0, inserts: full.inserts, hits: full.hits, lookups: full.lookups });
    expect(await reset(url)).toMatchObject({ enabled: true, entries: 0, bytes: 0 });
    // Nothing left to hit.
    expect((await complete(url, { prompt: prompt(5, 70) })).timings.cache_n).toBe(0);
  });
});

describe('reset during a request', () => {
  it('drops the blocks a running request borrowed from lookups; the request finishes as cold', async () => {
    const { url } = main.server;
    await reset(url);
    const p = prompt(30, 60);
    await complete(url, { prompt: p, n_predict: 2 });
    const longer = [...p, 9, 8, 7];
    const cold = await complete(url, { prompt: longer, n_predict: 48, cache_prompt: false });
    const { hits } = await stats(url);
    const running = complete(url, { prompt: longer, n_predict: 48 });
    await waitFor(async () => (await stats(url)).hits > hits, 5000, 'the request to borrow');
    expect((await reset(url)).entries).toBeGreaterThan(0);
    expect((await stats(url)).entries).toBe(0);
    const warm = await running;
    expect(warm.timings.cache_n).toBe(p.length);
    expect(warm.content).toBe(cold.content);
    // Its blocks followed a cleared prefix: none is cached, and the pool has them all back.
    expect((await stats(url)).entries).toBe(0);
    const again = await complete(url, { prompt: longer, n_predict: 48 });
    expect(again.timings.cache_n).toBe(0);
    expect(again.content).toBe(cold.content);
  });
});

describe('bounds', () => {
  it('--cache-max-entries keeps at most that many blocks, evicting LRU', async () => {
    const { server } = await serve({ cacheMaxEntries: 4 });
    await complete(server.url, { prompt: prompt(0, 120), n_predict: 8 }); // 128 tokens written: 8 blocks
    const s = await stats(server.url);
    expect(s).toMatchObject({ max_entries: 4, entries: 4, inserts: 8, evictions_lru: 4 });
  });

  it('--cache-capacity-bytes evicts LRU past the byte bound and rejects an oversized donation', async () => {
    const { server } = await serve({ cacheCapacityBytes: 4 * BLOCK_BYTES });
    const { url } = server;
    await complete(url, { prompt: prompt(0, 40), n_predict: 8 }); // 48 written: 3 blocks
    expect(await stats(url)).toMatchObject({ capacity_bytes: 4 * BLOCK_BYTES, entries: 3, inserts: 3, evictions_lru: 0 });
    await complete(url, { prompt: prompt(60, 40), n_predict: 8 }); // 3 more: one over
    const s = await stats(url);
    expect(s).toMatchObject({ entries: 4, inserts: 6, evictions_lru: 2 });
    expect(s.bytes).toBeLessThanOrEqual(4 * BLOCK_BYTES);
    // The most recent prompt still hits, all 41 of its tokens.
    expect((await complete(url, { prompt: [...prompt(60, 40), 9, 9] })).timings.cache_n).toBe(41);
    // Seven fresh blocks at once (98 written) do not fit at all.
    await complete(url, { prompt: prompt(100, 90), n_predict: 8 });
    expect((await stats(url)).rejections_oversized).toBe(1);
  });

  it('--cache-ttl-secs drops blocks unused for that long', async () => {
    const { server } = await serve({ cacheTtlSecs: 1 });
    const { url } = server;
    const p = prompt(0, 60);
    await complete(url, { prompt: p });
    expect((await complete(url, { prompt: [...p, 4] })).timings.cache_n).toBeGreaterThan(0);
    await new Promise((r) => setTimeout(r, 1300));
    // Expiry runs at the next lookup: this request finds nothing.
    expect((await complete(url, { prompt: [...p, 4] })).timings.cache_n).toBe(0);
    const s = await stats(url);
    expect(s.evictions_ttl).toBeGreaterThan(0);
  });
});

describe('the KV pool', () => {
  it('grows as sequences and cached prompts fill it, and shrinks back when idle, moving the cached blocks it keeps', async () => {
    // 64 positions (4 blocks) at load; at most 8 cached blocks, so a second prompt evicts the first.
    const { server } = await serve({ kvInitialTokens: 64, kvShrinkIdleMs: 1000, cacheMaxEntries: 8 });
    const { url } = server;
    const kvTokens = async () => ((await (await fetch(`${url}/props`)).json()) as { memory: { kv_cache_tokens: number; kv_cache_max_tokens: number } }).memory;
    // Two slots of 512 positions and 8 blocks of prompt cache at most.
    expect(await kvTokens()).toMatchObject({ kv_cache_tokens: 64, kv_cache_max_tokens: 2 * 512 + 8 * BLOCK });
    await complete(url, { prompt: prompt(0, 99) }); // 115 written: 8 blocks, kept by the cache
    expect((await kvTokens()).kv_cache_tokens).toBe(128);
    // Another 8 blocks: the pool doubles rather than evict, then the cache drops the first prompt's.
    const second = [1, 9, ...STORY.slice(100, 198)];
    await complete(url, { prompt: second });
    expect((await kvTokens()).kv_cache_tokens).toBe(256);
    expect(await stats(url)).toMatchObject({ entries: 8, evictions_lru: 8 });
    // Idle: back to the 8 blocks the cache holds, its blocks moved down into them.
    await waitFor(async () => (await kvTokens()).kv_cache_tokens === 128, 10_000, 'the pool shrank');
    const extended = [...second, 5, 6];
    const hit = await complete(url, { prompt: extended });
    expect(hit.timings.cache_n).toBe(100);
    expect(hit.content).toBe((await complete(url, { prompt: extended, cache_prompt: false })).content);
  });
});

describe('--no-cache-prompt', () => {
  it('serves the fixed disabled payload, and cache_prompt: true does not turn the cache on', async () => {
    const { server } = await serve({ cachePrompt: false });
    const { url } = server;
    const disabled = {
      enabled: false, apc_enabled: false, block_size: 16, hash: 'sha256', entries: 0, bytes: 0, capacity_bytes: 0, max_entries: 0, hits: 0, lookups: 0,
      hit_rate: 0, inserts: 0, evictions_lru: 0, evictions_ttl: 0, rejections_oversized: 0, total_blocks_stored: 0, unique_block_hashes: 0, apc_active_entries: 0,
    };
    expect(await stats(url)).toEqual(disabled);
    const p = prompt(0, 80);
    for (let i = 0; i < 2; i++) {
      const r = await complete(url, { prompt: p, cache_prompt: true });
      expect(r.timings).toMatchObject({ cache_n: 0, prompt_n: 81 });
    }
    expect(await stats(url)).toEqual(disabled);
    expect(await reset(url)).toEqual(disabled);
    expect(await reset(url)).toEqual(disabled);
  });
});
