// GET /slots, /props and /metrics through the real server and engine on stories260k,
// with servers configured from command lines (parseCli), as mlxcel-server builds them.
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseCli, type ServeOptions } from '../src/cli-options.js';
import { serve as serveOn, useModel, type LiveServer } from './helpers/live-server.js';
import { countState, getSlots, holdSlot, parseMetrics, waitFor, type HeldRequest } from './helpers/server-load.js';
import { storiesCase } from './helpers/stories-expected.js';

const MODEL = 'models/stories260k';
const onceUponATime = storiesCase('Once upon a time');

/** Completion params plus llama-server's `top_k`, which this server takes and the SDK does not declare. */
type TopKCompletionParams = OpenAI.CompletionCreateParamsNonStreaming & { top_k?: number };

const live = useModel({ model: MODEL, engine: { parallel: 2 } });
const servers: LiveServer[] = [];

/** A server on the shared engine, configured by mlxcel-server command-line flags. */
async function serve(argv: string[]): Promise<LiveServer & { options: ServeOptions }> {
  const command = parseCli(['--port', '0', ...argv], {}, MODEL);
  if (command.kind !== 'serve') throw new Error('expected a serve command');
  const server = await serveOn(live.engine, { server: command.options });
  servers.push(server);
  return Object.assign(server, { options: command.options });
}

let plain: Awaited<ReturnType<typeof serve>>; // --metrics, default sampling
let tuned: Awaited<ReturnType<typeof serve>>; // --metrics-port, --no-slots, sampling flags

beforeAll(async () => {
  plain = await serve(['--metrics']);
  tuned = await serve(['--metrics-port', '0', '--no-slots', '--temp', '0', '-n', '12', '--seed', '5', '--top-k', '7', '--top-p', '0.5']);
});

afterAll(async () => {
  for (const s of servers) await s.close();
});

const idle = () => waitFor(() => live.engine.stats().activeSequences === 0 && live.engine.stats().queueDepth === 0, 10_000, 'engine idle');

/** Two requests in the two slots and a third queued behind them. */
async function saturate(url: string): Promise<HeldRequest[]> {
  const held = [holdSlot(url), holdSlot(url)];
  await waitFor(() => live.engine.stats().activeSequences === 2, 10_000, 'both slots busy');
  held.push(holdSlot(url));
  await waitFor(() => live.engine.stats().queueDepth === 1, 10_000, 'one queued');
  return held;
}

async function release(held: HeldRequest[]): Promise<void> {
  for (const h of held) h.abort();
  await Promise.all(held.map((h) => h.done));
  await idle();
}

describe('GET /slots', () => {
  it('lists every slot, then every queued request', async () => {
    const { url } = plain.server;
    // A running request holds KV blocks; an idle slot and a queued request hold none.
    const entry = (id: number, state: string) => ({
      id,
      state,
      model: 'stories260k',
      context_size: 512,
      n_ctx: 512,
      is_processing: state === 'decoding',
      kv_blocks: state === 'decoding' ? expect.any(Number) : 0,
    });
    expect(await getSlots(url)).toEqual([entry(0, 'idle'), entry(1, 'idle')]);
    // context_size is the per-slot value /health reports.
    expect(((await (await fetch(`${url}/health`)).json()) as { context_size: number }).context_size).toBe(512);

    const held = await saturate(url);
    expect(await getSlots(url)).toEqual([entry(0, 'decoding'), entry(1, 'decoding'), entry(2, 'queued')]);
    await release(held);
    await waitFor(async () => countState(await getSlots(url), 'idle') === 2, 5_000, 'slots idle');
  });

  it('answers 501 naming --slots with --no-slots', async () => {
    const res = await fetch(`${tuned.server.url}/slots`);
    expect(res.status).toBe(501);
    expect(await res.json()).toEqual({ error: { type: 'not_supported_error', code: null, message: 'This server does not support slots endpoint. Start it with `--slots`' } });
  });
});

describe('GET /props', () => {
  it('reports the built-in defaults, the unset seed as u64::MAX, and the slot count', async () => {
    const res = await fetch(`${plain.server.url}/props`);
    expect(res.status).toBe(200);
    const text = await res.text();
    // The exact digits: a JS number would print 18446744073709552000.
    expect(text).toContain('"seed":18446744073709551615');
    expect(JSON.parse(text)).toEqual({
      default_generation_settings: {
        n_predict: -1,
        temperature: 0.8,
        top_k: 40,
        top_p: 0.95,
        min_p: 0.05,
        repeat_penalty: 1,
        repeat_last_n: 64,
        seed: 18446744073709551615,
        frequency_penalty: 0,
        presence_penalty: 0,
        dry_multiplier: 0,
        dry_base: 1.75,
        dry_allowed_length: 2,
        dry_penalty_last_n: 0,
        xtc_probability: 0,
        xtc_threshold: 0.1,
        loop_detection: null,
        n_keep: 0,
        context_shift: false,
        // llama-server's slot fields: the context, and a request's generation_settings.
        n_ctx: 512,
        params: expect.objectContaining({ n_predict: -1, temperature: 0.8, top_k: 40, seed: 4294967295 }),
      },
      total_slots: 2,
      // Request memory admission: the budget, and the weights plus the requests in flight.
      request_memory: { budget_bytes: expect.any(Number), in_use_bytes: expect.any(Number) },
      is_sleeping: false,
      memory: {
        weights_bytes: live.engine.stats().memory.weights,
        kv_cache_bytes: expect.any(Number),
        kv_cache_max_bytes: expect.any(Number),
        kv_cache_tokens: expect.any(Number),
        // Two slots of 512 positions, and as many for the prompt cache.
        kv_cache_max_tokens: 2048,
        other_bytes: expect.any(Number),
      },
      speculative: null,
      model_path: expect.stringMatching(/stories260k$/),
      // What the server serves: a chat model only here.
      capabilities: ['completion'],
    });
  });

  it('follows the command-line flags', async () => {
    expect(tuned.options.sampling).toEqual({ temperature: 0, n_predict: 12, seed: 5, top_k: 7, top_p: 0.5 });
    const body = (await (await fetch(`${tuned.server.url}/props`)).json()) as { default_generation_settings: Record<string, number> };
    expect(body.default_generation_settings).toMatchObject({ temperature: 0, n_predict: 12, seed: 5, top_k: 7, top_p: 0.5, min_p: 0.05 });
  });

  it('reports the defaults requests actually get', async () => {
    const { openai: client, server } = tuned;
    // --temp 0 makes an unspecified temperature greedy; -n 12 is the budget of a request
    // that sets none (the REST reference's default), not a cap on one that sets more.
    const res = await client.completions.create({ model: 'm', prompt: onceUponATime.prompt });
    expect(res.usage?.completion_tokens).toBe(12);
    expect(res.choices[0]!.finish_reason).toBe('length');
    expect(onceUponATime.expected_text.startsWith(res.choices[0]!.text)).toBe(true);
    const more = await client.completions.create({ model: 'm', prompt: onceUponATime.prompt, max_tokens: 30 });
    expect(more.usage?.completion_tokens).toBe(30);
    const fewer = await client.completions.create({ model: 'm', prompt: onceUponATime.prompt, max_tokens: 3 });
    expect(fewer.usage?.completion_tokens).toBe(3);
    const native = await fetch(`${server.url}/completion`, { method: 'POST', body: JSON.stringify({ prompt: 'Hi', n_predict: -1 }) });
    expect(((await native.json()) as { tokens_predicted: number }).tokens_predicted).toBe(12);
    // --seed 5 seeds a sampled request that sets no seed.
    const sampled = (seed?: number) => {
      const params: TopKCompletionParams = { model: 'm', prompt: 'Lily', temperature: 1.5, top_k: 0, top_p: 1, ...(seed === undefined ? {} : { seed }) };
      return client.completions.create(params);
    };
    const [a, b, c] = await Promise.all([sampled(), sampled(), sampled(5)]);
    expect(a.choices[0]!.text).toBe(b.choices[0]!.text);
    expect(a.choices[0]!.text).toBe(c.choices[0]!.text);
    await idle();
  });
});

const METRICS: Array<[name: string, type: string, help: string]> = [
  ['mlxcel_requests_total', 'counter', 'Total number of completed generation requests; chat completion streams cancelled by the client are excluded'],
  ['mlxcel_prompt_tokens_total', 'counter', 'Total prompt tokens processed'],
  ['mlxcel_completion_tokens_total', 'counter', 'Total completion tokens of the requests counted in mlxcel_requests_total'],
  ['mlxcel_generation_time_seconds_total', 'counter', 'Total generation time in seconds'],
  ['mlxcel_slots_total', 'gauge', 'Total number of parallel slots'],
  ['mlxcel_slots_available', 'gauge', 'Available parallel slots'],
  ['mlxcel_queue_depth', 'gauge', 'Current prefill queue depth'],
  ['mlxcel_batch_sequences_started', 'counter', 'Total sequences that entered prefill'],
  ['mlxcel_batch_sequences_completed', 'counter', 'Total sequences that completed generation'],
  ['mlxcel_batch_prefill_tokens_total', 'counter', 'Cumulative prefill tokens processed'],
  ['mlxcel_batch_decode_tokens_total', 'counter', 'Cumulative decode tokens generated'],
  ['mlxcel_speculative_draft_tokens_total', 'counter', 'Tokens drafted for speculative decoding'],
  ['mlxcel_speculative_accepted_tokens_total', 'counter', 'Drafted tokens the target model accepted'],
  ['mlxcel_batch_current_size', 'gauge', 'Current active batch size'],
  ['mlxcel_cache_pool_active', 'gauge', 'Active cache entries'],
  ['mlxcel_memory_weights_bytes', 'gauge', 'GPU bytes of the model weights'],
  ['mlxcel_memory_kv_cache_bytes', 'gauge', 'GPU bytes of the KV cache allocated now'],
  ['mlxcel_memory_kv_cache_max_bytes', 'gauge', 'GPU bytes the KV cache may grow to'],
  ['mlxcel_memory_other_bytes', 'gauge', 'GPU bytes of the other buffers: activations, batch metadata, kernel parameters'],
  ['mlxcel_request_memory_budget_bytes', 'gauge', 'Request memory budget in bytes'],
  ['mlxcel_request_memory_in_use_bytes', 'gauge', 'Request memory in use in bytes: the weights and the reservations of the requests in flight'],
  ['mlxcel_kv_cache_usage_ratio', 'gauge', 'Fraction of the KV cache blocks held by running requests (1 = full)'],
  ['mlxcel_kv_cache_config_info', 'gauge', 'The KV cache layout: tokens per block and the blocks the pool may grow to'],
  ['vllm:num_requests_running', 'gauge', 'Number of requests in model execution batches'],
  ['vllm:num_requests_waiting', 'gauge', 'Number of requests waiting to be processed'],
  ['vllm:kv_cache_usage_perc', 'gauge', 'KV-cache usage. 1 means 100 percent usage'],
  ['vllm:cache_config_info', 'gauge', 'Information of the LLMEngine CacheConfig'],
  ['vllm:lora_requests_info', 'gauge', 'Running stats on lora requests.'],
];
const INFO_GAUGES = ['mlxcel_kv_cache_config_info', 'vllm:cache_config_info', 'vllm:lora_requests_info'];

async function scrape(url: string) {
  const res = await fetch(`${url}/metrics`);
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/plain/);
  return parseMetrics(await res.text());
}

describe('GET /metrics', () => {
  it('has every metric of the reference with its type and HELP text', async () => {
    const { values, help, type } = await scrape(plain.server.url);
    for (const [name, kind, text] of METRICS) {
      expect(type.get(name), name).toBe(kind);
      expect(help.get(name), name).toBe(text);
      if (!INFO_GAUGES.includes(name)) expect(values.has(name), name).toBe(true);
    }
    expect([...values.keys()].sort()).toEqual(METRICS.map(([n]) => n).filter((n) => !INFO_GAUGES.includes(n)).sort());
    // The memory gauges are the engine's figures, as /props reports them.
    const m = live.engine.stats().memory;
    expect(['weights', 'kv_cache', 'kv_cache_max', 'other'].map((n) => values.get(`mlxcel_memory_${n}_bytes`))).toEqual([m.weights, m.kv, m.kvMax, m.other]);
    expect(m.weights).toBeGreaterThan(0);
    expect(m.other).toBeGreaterThan(0);
    expect(m.kv).toBeLessThanOrEqual(m.kvMax);
  });

  it('counts finished chat completions once, streamed or not, and leaves out cancelled chat streams and streaming completions', async () => {
    const { openai: client, server } = plain;
    const { url } = server;
    const before = (await scrape(url)).values;
    const chat = { model: 'm', messages: [{ role: 'user' as const, content: 'Once upon a time' }], temperature: 0 };
    let prompt = 0;
    let completion = 0;

    const whole = await client.chat.completions.create({ ...chat, max_tokens: 10 });
    prompt += whole.usage!.prompt_tokens;
    completion += whole.usage!.completion_tokens;

    const stream = await client.chat.completions.create({ ...chat, max_tokens: 7, stream: true, stream_options: { include_usage: true } });
    for await (const chunk of stream) {
      if (chunk.usage) {
        prompt += chunk.usage.prompt_tokens;
        completion += chunk.usage.completion_tokens;
      }
    }

    // A chat stream the client cancels: not counted.
    const controller = new AbortController();
    const cancelled = await client.chat.completions.create({ ...chat, max_tokens: 400, stream: true }, { signal: controller.signal });
    let chunks = 0;
    for await (const _chunk of cancelled) if (++chunks === 3) controller.abort();
    await idle();

    // Streaming completions, OpenAI and native: not counted.
    for await (const _chunk of await client.completions.create({ model: 'm', prompt: 'Lily', max_tokens: 6, stream: true }));
    const nativeStream = await fetch(`${url}/completion`, { method: 'POST', body: JSON.stringify({ prompt: 'Lily', n_predict: 6, stream: true }) });
    await nativeStream.text();

    // The same, not streamed: counted.
    const text = await client.completions.create({ model: 'm', prompt: 'Lily', max_tokens: 5 });
    prompt += text.usage!.prompt_tokens;
    completion += text.usage!.completion_tokens;
    const native = (await (await fetch(`${url}/completion`, { method: 'POST', body: JSON.stringify({ prompt: 'Lily', n_predict: 4 }) })).json()) as {
      tokens_evaluated: number;
      tokens_predicted: number;
    };
    prompt += native.tokens_evaluated;
    completion += native.tokens_predicted;
    expect(completion).toBe(10 + 7 + 5 + 4);
    await idle();

    const after = (await scrape(url)).values;
    const delta = (name: string) => after.get(name)! - before.get(name)!;
    expect(delta('mlxcel_requests_total')).toBe(4);
    expect(delta('mlxcel_completion_tokens_total')).toBe(completion);
    expect(delta('mlxcel_prompt_tokens_total')).toBe(prompt);
    expect(delta('mlxcel_generation_time_seconds_total')).toBeGreaterThan(0);
    // Every sequence counts in the engine's own counters, cancelled and streamed ones too.
    expect(delta('mlxcel_batch_sequences_started')).toBe(7);
    expect(delta('mlxcel_batch_sequences_completed')).toBe(6);
    const { counters } = live.engine.stats();
    expect(after.get('mlxcel_batch_sequences_started')).toBe(counters.sequences_started);
    expect(after.get('mlxcel_batch_sequences_completed')).toBe(counters.sequences_completed);
    expect(after.get('mlxcel_batch_prefill_tokens_total')).toBe(counters.total_prefill_tokens);
    expect(after.get('mlxcel_batch_decode_tokens_total')).toBe(counters.total_decode_tokens);
  });

  it('mirrors the engine load in its gauges', async () => {
    const { url } = plain.server;
    const gauges = (v: Map<string, number>) =>
      ['mlxcel_slots_total', 'mlxcel_slots_available', 'mlxcel_queue_depth', 'mlxcel_batch_current_size', 'mlxcel_cache_pool_active'].map((n) => v.get(n));
    expect(gauges((await scrape(url)).values)).toEqual([2, 2, 0, 0, 0]);
    const held = await saturate(url);
    expect(gauges((await scrape(url)).values)).toEqual([2, 0, 1, 2, 2]);
    await release(held);
    expect(gauges((await scrape(url)).values)).toEqual([2, 2, 0, 0, 0]);
  });

  it("serves the endpoint picker's gauges (vLLM names and mlxcel twins) in agreement with /slots and /v1/cache/stats", async () => {
    const { url } = plain.server;
    const cacheStats = (await (await fetch(`${url}/v1/cache/stats`)).json()) as { block_size: number };
    const picker = async () => {
      const { values, samples } = await scrape(url);
      const info = (name: string) => samples.filter((x) => x.name === name).map(({ labels, value }) => ({ labels, value }));
      return {
        running: values.get('vllm:num_requests_running')!,
        waiting: values.get('vllm:num_requests_waiting')!,
        usage: values.get('vllm:kv_cache_usage_perc')!,
        info: info('vllm:cache_config_info'),
        lora: info('vllm:lora_requests_info'),
        twins: [values.get('mlxcel_batch_current_size'), values.get('mlxcel_queue_depth'), values.get('mlxcel_kv_cache_usage_ratio'), info('mlxcel_kv_cache_config_info')],
      };
    };
    const idleScrape = await picker();
    expect(idleScrape.info).toHaveLength(1);
    const [{ labels, value }] = idleScrape.info;
    expect(value).toBe(1);
    expect(Number(labels.block_size)).toBe(cacheStats.block_size);
    const blocks = Number(labels.num_gpu_blocks);
    expect(blocks).toBe(live.engine.stats().kv!.blocks);
    // The pool's capacity: the blocks it may grow to, not those its textures hold now.
    expect(blocks * cacheStats.block_size).toBe(live.engine.stats().memory.kvMaxTokens);
    expect([idleScrape.running, idleScrape.waiting, idleScrape.usage]).toEqual([0, 0, 0]);
    // No LoRA adapters, stamped with the scrape's time.
    const [lora] = idleScrape.lora;
    expect(lora!.labels).toEqual({ max_lora: '0', running_lora_adapters: '', waiting_lora_adapters: '' });
    expect(Math.abs(lora!.value - Date.now() / 1000)).toBeLessThan(60);

    const held = await saturate(url);
    // Decoding grows the running requests' blocks: compare a scrape taken between two
    // /slots reads that agree.
    let agreed = false;
    for (let i = 0; i < 50 && !agreed; i++) {
      const before = await getSlots(url);
      const scraped = await picker();
      const after = await getSlots(url);
      const held = (slots: typeof before) => slots.reduce((sum, s) => sum + s.kv_blocks, 0);
      if (held(before) !== held(after)) continue;
      agreed = true;
      expect(scraped.running).toBe(countState(before, 'decoding'));
      expect(scraped.waiting).toBe(countState(before, 'queued'));
      expect([scraped.running, scraped.waiting]).toEqual([2, 1]);
      expect(held(before)).toBeGreaterThan(0);
      expect(scraped.usage).toBeCloseTo(held(before) / blocks, 12);
      expect(scraped.twins).toEqual([scraped.running, scraped.waiting, scraped.usage, scraped.info]);
    }
    expect(agreed, 'a scrape between two agreeing /slots reads').toBe(true);
    await release(held);
    const after = await picker();
    expect([after.running, after.waiting, after.usage]).toEqual([0, 0, 0]);
  });

  it('is absent without --metrics, and --metrics-port serves it on its own listener', async () => {
    const { server, openai: client } = tuned;
    const missing = await fetch(`${server.url}/metrics`);
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as { error: { type: string } }).error.type).toBe('not_found_error');

    expect(server.metricsUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(server.metricsUrl).not.toBe(server.url);
    const before = (await scrape(server.metricsUrl!)).values;
    const plainBefore = (await scrape(plain.server.url)).values;
    await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 3 });
    const after = (await scrape(server.metricsUrl!)).values;
    expect(after.get('mlxcel_requests_total')! - before.get('mlxcel_requests_total')!).toBe(1);
    expect(after.get('mlxcel_completion_tokens_total')! - before.get('mlxcel_completion_tokens_total')!).toBe(3);
    // Each server has its own registry: the other one did not count it.
    expect((await scrape(plain.server.url)).values.get('mlxcel_requests_total')).toBe(plainBefore.get('mlxcel_requests_total'));
    // The metrics listener serves nothing else.
    expect((await fetch(`${server.metricsUrl}/health`)).status).toBe(404);
    expect((await fetch(`${server.metricsUrl}/v1/models`)).status).toBe(404);
  });

  it('needs the API key on both listeners, like every route but /health', async () => {
    const { server } = await serve(['--metrics', '--metrics-port', '0', '--api-key', 'secret']);
    for (const url of [`${server.url}/metrics`, `${server.metricsUrl}/metrics`, `${server.url}/slots`, `${server.url}/props`]) {
      expect((await fetch(url)).status, url).toBe(401);
      expect((await fetch(url, { headers: { Authorization: 'Bearer secret' } })).status, url).toBe(200);
    }
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
  });
});

describe('liveness, readiness and draining', () => {
  const status = async (url: string) => {
    const res = await fetch(url);
    return [res.status, await res.json()];
  };

  it('GET /live and GET /ready answer ready once loaded, and /ready is 503 while the model loads', async () => {
    expect(await status(`${plain.server.url}/live`)).toEqual([200, { status: 'alive' }]);
    expect(await status(`${plain.server.url}/ready`)).toEqual([200, { status: 'ready' }]);
    const loading = await serveOn(new Promise<never>(() => {}));
    servers.push(loading);
    expect(await status(`${loading.url}/live`)).toEqual([200, { status: 'alive' }]);
    expect(await status(`${loading.url}/ready`)).toEqual([503, { status: 'loading model' }]);
  });

  it('a drain refuses new work with 503 and Retry-After, lets an admitted stream finish, and ends the rest with an error event when the grace runs out', async () => {
    const draining = await serve([]);
    // Admitted before the drain: a short stream that finishes in time, and four requests that cannot.
    const short = draining.postSse('/v1/chat/completions', { model: 'm', messages: [{ role: 'user', content: 'Lily' }], max_tokens: 6, stream: true });
    const chat = draining.request('/v1/chat/completions', { model: 'm', messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 480, stream: true });
    const responses = draining.request('/v1/responses', { model: 'm', input: 'Once upon a time', max_output_tokens: 480, stream: true });
    const messages = draining.request('/v1/messages', { model: 'm', messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 480, stream: true });
    const whole = draining.request('/v1/chat/completions', { model: 'm', messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 480 });
    await waitFor(() => live.engine.stats().activeSequences + live.engine.stats().queueDepth === 5, 10_000, 'all five admitted');
    const drained = draining.server.drain(1000);

    expect(await status(`${draining.url}/ready`)).toEqual([503, { status: 'draining' }]);
    const refused = await draining.request('/v1/chat/completions', { model: 'm', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2 });
    expect(refused.status).toBe(503);
    expect(refused.headers.get('retry-after')).toBe('1');
    expect(((await refused.json()) as { error: { type: string; message: string } }).error).toMatchObject({
      type: 'server_busy',
      message: 'The server is shutting down and takes no new requests; retry on another replica.',
    });
    // Reads keep answering.
    expect((await fetch(`${draining.url}/v1/models`)).status).toBe(200);

    const events = await short;
    expect(events.at(-1)).toBe('[DONE]');
    expect(events.at(-2).choices[0].finish_reason).toBe('length');

    const grace = /did not finish within its 1 s grace period \(--shutdown-grace-secs\)/;
    const chatText = await (await chat).text();
    expect(chatText).toMatch(/"type":"server_busy"/);
    expect(chatText).toMatch(grace);
    expect(chatText.trimEnd().endsWith('data: [DONE]')).toBe(true);
    const responsesText = await (await responses).text();
    expect(responsesText).toMatch(/event: response\.failed\n/);
    expect(responsesText).toMatch(grace);
    const messagesText = await (await messages).text();
    expect(messagesText).toMatch(/event: error\n/);
    expect(messagesText).toMatch(grace);
    const wholeAnswer = await whole;
    expect(wholeAnswer.status).toBe(503);
    expect(((await wholeAnswer.json()) as { error: { message: string } }).error.message).toMatch(grace);
    expect(await drained).toBe(false);
    await idle();
  });
});
