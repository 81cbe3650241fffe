// The sampling surface through the real server and engine on the trained stories260k
// model: penalties and DRY visibly change a repeating greedy output, seeds reproduce alone
// and beside other requests, loop detection stops a forced repetition, logprobs have the
// OpenAI and llama-server shapes (streaming and not) and sane values, logit_bias forces or
// bans a token on every route that has it (OpenAI's map, llama-server's [id or text, bias]
// pairs and false), out-of-range values are 400s naming the field, and /props reports the
// command-line defaults.
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { parseCli } from '../src/cli-options.js';
import { useLive, useServer, type LiveServer } from './helpers/live-server.js';
import { readSse } from './helpers/sse.js';
import { storiesCase } from './helpers/stories-expected.js';

const TUNED_ARGV = [
  '--min-p', '0.1', '--repeat-penalty', '1.3', '--repeat-last-n', '32', '--presence-penalty', '0.2', '--frequency-penalty', '0.1',
  '--dry-multiplier', '0.5', '--dry-base', '2', '--dry-allowed-length', '3', '--dry-penalty-last-n', '16', '--xtc-probability', '0.25', '--xtc-threshold', '0.2',
];

const live = useLive({ model: 'models/stories260k', engine: { parallel: 4 } });
/** Started from command-line flags: sampler defaults and MLXCEL_LOOP_DETECTION=1,8,3. */
const tuned = useServer(live, { server: { sampling: tunedSampling() } });

function tunedSampling() {
  const cli = parseCli(TUNED_ARGV, { MLXCEL_LOOP_DETECTION: '1,8,3' }, 'models/stories260k');
  if (cli.kind !== 'serve') throw new Error('expected serve options');
  return cli.options.sampling;
}

/** /completion, greedy unless the body says otherwise. */
async function complete(body: Record<string, unknown>, on: LiveServer = live) {
  const res = await on.post('/completion', { temperature: 0, ...body });
  expect(res.status).toBe(200);
  return res.body as { content: string; tokens_predicted: number; stop_type: string; completion_probabilities?: any[] };
}

// Greedy, the model repeats itself: "She wanted to see what was inside." comes twice.
const REPEATING = 'Lily wanted to';
const REPEATED = 'She wanted to see what was inside.';
const count = (text: string, part: string) => text.split(part).length - 1;

describe('penalties', () => {
  it('each visibly change a repeating greedy output', async () => {
    const base = await complete({ prompt: REPEATING, n_predict: 64 });
    expect(base.content).toBe(storiesCase(REPEATING).expected_text);
    expect(count(base.content, REPEATED)).toBe(2);
    const variants: Array<Record<string, unknown>> = [
      { repeat_penalty: 1.5 },
      { repetition_penalty: 1.5, repetition_context_size: -1 },
      { frequency_penalty: 1 },
      { presence_penalty: 1.5 },
      { dry_multiplier: 1, dry_allowed_length: 2 },
    ];
    for (const v of variants) {
      const out = await complete({ prompt: REPEATING, n_predict: 64, ...v });
      expect(out.content, JSON.stringify(v)).not.toBe(base.content);
      expect(count(out.content, REPEATED), JSON.stringify(v)).toBeLessThan(2);
    }
    // A window of 0 tokens (llama-server's repeat_last_n 0) turns the penalty off.
    expect((await complete({ prompt: REPEATING, n_predict: 64, repeat_penalty: 1.5, repeat_last_n: 0 })).content).toBe(base.content);
    // DRY sequence breakers: every token breaks every match, so nothing is penalised.
    const all = Array.from({ length: 512 }, (_, i) => i);
    expect((await complete({ prompt: REPEATING, n_predict: 64, dry_multiplier: 1, dry_sequence_breakers: all })).content).toBe(base.content);
  });

  it('apply on chat completions through the openai client, and on the Responses pipeline', async () => {
    const messages = [{ role: 'user' as const, content: REPEATING }];
    const base = await live.openai.chat.completions.create({ model: 'm', messages, max_tokens: 64, temperature: 0 });
    const penalised = await live.openai.chat.completions.create({ model: 'm', messages, max_tokens: 64, temperature: 0, frequency_penalty: 1 });
    expect(count(base.choices[0]!.message.content!, REPEATED)).toBe(2);
    expect(count(penalised.choices[0]!.message.content!, REPEATED)).toBeLessThan(2);
    const extension = { repetition_penalty: 1.5, dry_multiplier: 1 } as Record<string, unknown>;
    const viaExtension = await live.openai.chat.completions.create({ model: 'm', messages, max_tokens: 64, temperature: 0, ...extension });
    expect(count(viaExtension.choices[0]!.message.content!, REPEATED)).toBeLessThan(2);
    const plain = await live.openai.responses.create({ model: 'm', input: REPEATING, max_output_tokens: 64, temperature: 0 });
    const responses = await live.openai.responses.create({ model: 'm', input: REPEATING, max_output_tokens: 64, temperature: 0, ...({ repetition_penalty: 1.5 } as object) });
    expect(plain.output_text).toBe(base.choices[0]!.message.content);
    expect(responses.output_text).not.toBe(plain.output_text);
  });
});

describe('logit_bias', () => {
  // "Lily" is one token of stories260k's vocabulary, read " Lily" after another token.
  const LILY = 317;
  const N = 6;
  const forced = ' Lily'.repeat(N);

  it('+100 forces a token every greedy step on completions, chat and /completion', async () => {
    const completion = await live.openai.completions.create({ model: 'm', prompt: REPEATING, max_tokens: N, temperature: 0, logit_bias: { [LILY]: 100 } });
    expect(completion.choices[0]!.text).toBe(forced);
    const messages = [{ role: 'user' as const, content: REPEATING }];
    const chat = await live.openai.chat.completions.create({ model: 'm', messages, max_tokens: N, temperature: 0, logit_bias: { [LILY]: 100 } });
    expect(chat.choices[0]!.message.content).toBe(forced);
    expect((await complete({ prompt: REPEATING, n_predict: N, logit_bias: [[LILY, 100]] })).content).toBe(forced);
    expect((await complete({ prompt: REPEATING, n_predict: N, logit_bias: [['Lily', 100]] })).content).toBe(forced);
    expect((await complete({ prompt: REPEATING, n_predict: N, logit_bias: { [LILY]: 100 } })).content).toBe(forced);
  });

  it('-100 and false ban the greedy token', async () => {
    const base = await complete({ prompt: REPEATING, n_predict: 16, n_probs: 1 });
    const ids = (r: { completion_probabilities?: any[] }) => r.completion_probabilities!.map((p) => p.id as number);
    const greedy = ids(base)[0]!;
    for (const logit_bias of [[[greedy, false]], [[greedy, -100]], { [greedy]: false }]) {
      const banned = await complete({ prompt: REPEATING, n_predict: 16, n_probs: 1, logit_bias });
      expect(banned.content, JSON.stringify(logit_bias)).not.toBe(base.content);
      expect(ids(banned), JSON.stringify(logit_bias)).not.toContain(greedy);
    }
    const plain = await live.openai.completions.create({ model: 'm', prompt: REPEATING, max_tokens: 16, temperature: 0 });
    const banned = await live.openai.completions.create({ model: 'm', prompt: REPEATING, max_tokens: 16, temperature: 0, logit_bias: { [greedy]: -100 } });
    expect(plain.choices[0]!.text).toBe(base.content);
    expect(banned.choices[0]!.text).not.toBe(base.content);
  });
});

describe('seeds', () => {
  const sampled = (seed: number, prompt = 'Once upon a time') =>
    live.openai.completions.create({ model: 'm', prompt, max_tokens: 32, temperature: 1, top_k: 0, top_p: 1, min_p: 0, seed } as OpenAI.CompletionCreateParamsNonStreaming);

  it('reproduce the same tokens at temperature 1, alone and beside other requests', async () => {
    const alone = (await sampled(42)).choices[0]!.text;
    expect((await sampled(42)).choices[0]!.text).toBe(alone);
    expect((await sampled(43)).choices[0]!.text).not.toBe(alone);
    // Batched with three others (different prompts and seeds, and an unseeded one).
    const [batched, ...others] = await Promise.all([sampled(42), sampled(7, 'Tom and Sam'), sampled(8, 'One day'), sampled(42, 'The cat')]);
    expect(batched.choices[0]!.text).toBe(alone);
    expect(others.every((o) => o.choices[0]!.text.length > 0)).toBe(true);
    // The same seed on /completion and chat (same prompt tokens) draws the same tokens.
    const native = await complete({ prompt: 'Once upon a time', n_predict: 32, temperature: 1, top_k: 0, top_p: 1, min_p: 0, seed: 42 });
    expect(native.content).toBe(alone);
  });
});

describe('loop detection', () => {
  // Greedy from this prompt, "The ball was very happy." comes three times in a row at token 40.
  const LOOPING = 'big big big big big big big big';

  it('stops a forced repetition early with finish_reason "stop"', async () => {
    const free = await live.openai.completions.create({ model: 'm', prompt: LOOPING, max_tokens: 100, temperature: 0 });
    expect(free.choices[0]!.finish_reason).toBe('length');
    expect(free.usage!.completion_tokens).toBe(100);
    const loop = { min_pattern_size: 1, max_pattern_size: 8, min_count: 3 };
    const stopped = await live.openai.completions.create({ model: 'm', prompt: LOOPING, max_tokens: 100, temperature: 0, ...loop } as OpenAI.CompletionCreateParamsNonStreaming);
    expect(stopped.choices[0]!.finish_reason).toBe('stop');
    expect(stopped.usage!.completion_tokens).toBeLessThan(60);
    // The third repeat of the 6-token pattern completes at "happy" and ends generation.
    expect(stopped.choices[0]!.text.endsWith('The ball was very happy. The ball was very happy. The ball was very happy')).toBe(true);
    expect(free.choices[0]!.text.startsWith(stopped.choices[0]!.text)).toBe(true);
    const chat = await live.openai.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: LOOPING }], max_tokens: 100, temperature: 0, ...loop });
    expect(chat.choices[0]!.finish_reason).toBe('stop');
    expect(chat.choices[0]!.message.content).toBe(stopped.choices[0]!.text);
    const native = await complete({ prompt: LOOPING, n_predict: 100, ...loop });
    expect(native.tokens_predicted).toBe(stopped.usage!.completion_tokens);
    expect(native.stop_type).toBe('eos');
  });

  it('follows the server policy unless a request field overrides it', async () => {
    // The tuned server runs with MLXCEL_LOOP_DETECTION=1,8,3 and penalties off for this check.
    const neutral = { repeat_penalty: 1, presence_penalty: 0, frequency_penalty: 0, dry_multiplier: 0, min_p: 0, xtc_probability: 0 };
    const policy = await complete({ prompt: LOOPING, n_predict: 100, ...neutral }, tuned);
    expect(policy.stop_type).toBe('eos');
    expect(policy.tokens_predicted).toBeLessThan(60);
    expect((await complete({ prompt: LOOPING, n_predict: 100, ...neutral, max_pattern_size: 0 }, tuned)).tokens_predicted).toBe(100);
    expect((await complete({ prompt: LOOPING, n_predict: 100, ...neutral, min_count: 1 }, tuned)).tokens_predicted).toBe(100);
    // A larger min_count from the request, the rest from the policy: a later stop.
    const later = await complete({ prompt: LOOPING, n_predict: 100, ...neutral, min_count: 4 }, tuned);
    expect(later.tokens_predicted).toBeGreaterThan(policy.tokens_predicted);
    // The default server (auto: off for llama) runs to the limit.
    expect((await complete({ prompt: LOOPING, n_predict: 100 })).tokens_predicted).toBe(100);
  });
});

type ChatEntry = { token: string; logprob: number; bytes: number[]; top_logprobs: Array<{ token: string; logprob: number; bytes: number[] }> };

function checkEntry(e: { logprob: number; top_logprobs: Array<{ logprob: number }> }, top: number): void {
  expect(e.logprob).toBeLessThanOrEqual(0);
  expect(e.top_logprobs.length).toBe(top);
  for (let i = 1; i < e.top_logprobs.length; i++) expect(e.top_logprobs[i]!.logprob).toBeLessThanOrEqual(e.top_logprobs[i - 1]!.logprob);
  expect(e.top_logprobs.reduce((s, t) => s + Math.exp(t.logprob), 0)).toBeLessThanOrEqual(1 + 1e-4);
}

describe('logprobs', () => {
  const messages = [{ role: 'user' as const, content: 'Once upon a time' }];

  it('chat: choices[].logprobs.content with token, logprob, bytes and sorted top_logprobs', async () => {
    const res = await live.openai.chat.completions.create({ model: 'm', messages, max_tokens: 24, temperature: 0, logprobs: true, top_logprobs: 20 });
    const content = res.choices[0]!.logprobs!.content! as ChatEntry[];
    expect(content.length).toBe(res.usage!.completion_tokens);
    expect(content.map((e) => e.token).join('')).toBe(res.choices[0]!.message.content);
    for (const e of content) {
      checkEntry(e, 20);
      expect(new TextDecoder().decode(Uint8Array.from(e.bytes))).toBe(e.token);
      // Greedy, no penalties: the chosen token is the most likely one.
      expect(e.top_logprobs[0]!.token).toBe(e.token);
      expect(e.top_logprobs[0]!.logprob).toBeCloseTo(e.logprob, 5);
      expect(Object.keys(e.top_logprobs[0]!).sort()).toEqual(['bytes', 'logprob', 'token']);
    }
    // logprobs alone: the chosen token's, no alternatives; no logprobs: null.
    const bare = await live.openai.chat.completions.create({ model: 'm', messages, max_tokens: 4, temperature: 0, logprobs: true });
    expect(bare.choices[0]!.logprobs!.content!.every((e) => e.top_logprobs.length === 0)).toBe(true);
    expect(bare.choices[0]!.logprobs!.content!.map((e) => e.logprob)).toEqual(content.slice(0, 4).map((e) => e.logprob));
    const none = await live.openai.chat.completions.create({ model: 'm', messages, max_tokens: 4, temperature: 0 });
    expect(none.choices[0]!.logprobs).toBeNull();
  });

  it('chat streaming: one entry per chunk, the same as without streaming', async () => {
    const whole = await live.openai.chat.completions.create({ model: 'm', messages, max_tokens: 24, temperature: 0, logprobs: true, top_logprobs: 3 });
    const stream = await live.openai.chat.completions.create({ model: 'm', messages, max_tokens: 24, temperature: 0, logprobs: true, top_logprobs: 3, stream: true });
    const entries: ChatEntry[] = [];
    let content = '';
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      if (!choice) continue;
      content += choice.delta.content ?? '';
      if (choice.logprobs?.content) {
        expect(choice.logprobs.content.length).toBe(1);
        entries.push(choice.logprobs.content[0] as ChatEntry);
      }
    }
    expect(content).toBe(whole.choices[0]!.message.content);
    expect(entries).toEqual(whole.choices[0]!.logprobs!.content);
  });

  it('chat streaming with a stop string still gives every generated token a chunk', async () => {
    const res = await fetch(`${live.url}/v1/chat/completions`, {
      method: 'POST',
      body: JSON.stringify({ messages, max_tokens: 40, temperature: 0, logprobs: true, stop: ['Lily'], stream: true, stream_options: { include_usage: true } }),
    });
    const chunks = ((await readSse(res)) as any[]).slice(0, -1);
    const usage = chunks.at(-1).usage;
    const withLogprobs = chunks.filter((c) => c.choices[0]?.logprobs);
    expect(withLogprobs.length).toBe(usage.completion_tokens);
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe(', there was a little girl named ');
  });

  it('completions: the legacy shape with text offsets, streaming and not', async () => {
    const res = await live.openai.completions.create({ model: 'm', prompt: 'Once upon a time', max_tokens: 24, temperature: 0, logprobs: 5 });
    const lp = res.choices[0]!.logprobs!;
    const text = res.choices[0]!.text;
    expect(lp.tokens!.length).toBe(24);
    expect(lp.tokens!.join('')).toBe(text);
    let offset = 0;
    lp.tokens!.forEach((token, i) => {
      expect(lp.text_offset![i]).toBe(offset);
      offset += token.length;
      expect(lp.token_logprobs![i]).toBeLessThanOrEqual(0);
      const top = lp.top_logprobs![i]!;
      expect(Object.keys(top).length).toBeGreaterThanOrEqual(5);
      expect(Object.keys(top).length).toBeLessThanOrEqual(6);
      // The chosen token is always among them.
      expect(top[token]).toBeCloseTo(lp.token_logprobs![i]!, 5);
      expect(Object.values(top).reduce((s, v) => s + Math.exp(v), 0)).toBeLessThanOrEqual(1 + 1e-4);
    });
    // The same prompt tokens through chat give the same logprobs.
    const chat = await live.openai.chat.completions.create({ model: 'm', messages, max_tokens: 24, temperature: 0, logprobs: true });
    expect(chat.choices[0]!.logprobs!.content!.map((e) => e.logprob)).toEqual(lp.token_logprobs);

    const stream = await live.openai.completions.create({ model: 'm', prompt: 'Once upon a time', max_tokens: 24, temperature: 0, logprobs: 5, stream: true });
    const tokens: string[] = [];
    const offsets: number[] = [];
    const logprobs: number[] = [];
    for await (const chunk of stream) {
      const l = chunk.choices[0]?.logprobs;
      if (!l) continue;
      tokens.push(...l.tokens!);
      offsets.push(...l.text_offset!);
      logprobs.push(...l.token_logprobs!);
    }
    expect(tokens).toEqual(lp.tokens);
    expect(offsets).toEqual(lp.text_offset);
    expect(logprobs).toEqual(lp.token_logprobs);
  });

  it('/completion n_probs: llama-server completion_probabilities, streaming and not', async () => {
    const res = await complete({ prompt: 'Once upon a time', n_predict: 16, n_probs: 3 });
    const probs = res.completion_probabilities!;
    expect(probs.length).toBe(res.tokens_predicted);
    expect(probs.map((p) => p.token).join('')).toBe(res.content);
    for (const p of probs) {
      expect(Object.keys(p).sort()).toEqual(['bytes', 'id', 'logprob', 'token', 'top_logprobs']);
      checkEntry(p, 3);
      expect(p.top_logprobs[0].id).toBe(p.id);
      for (const t of p.top_logprobs) expect(Object.keys(t).sort()).toEqual(['bytes', 'id', 'logprob', 'token']);
      expect(live.engine.tokenizer.decode([p.id])).toBe(p.token.trimStart());
    }
    const stream = await fetch(`${live.url}/completion`, { method: 'POST', body: JSON.stringify({ prompt: 'Once upon a time', n_predict: 16, n_probs: 3, temperature: 0, stream: true }) });
    const events = (await readSse(stream)) as any[];
    const streamed = events.flatMap((e) => e.completion_probabilities ?? []);
    expect(streamed).toEqual(probs);
    expect(events.slice(0, -1).every((e) => e.completion_probabilities.length === 1)).toBe(true);
    expect((await complete({ prompt: 'Once upon a time', n_predict: 4 })).completion_probabilities).toBeUndefined();
  });

  it('sampled tokens have logprobs at or below 0, in or out of the top list', async () => {
    const res = await live.openai.chat.completions.create({ model: 'm', messages, max_tokens: 24, temperature: 1.5, top_k: 0, seed: 3, logprobs: true, top_logprobs: 20 } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    for (const e of res.choices[0]!.logprobs!.content!) {
      checkEntry(e, 20);
      const listed = e.top_logprobs.find((t) => t.token === e.token);
      if (listed) expect(listed.logprob).toBeCloseTo(e.logprob, 5);
      else expect(e.logprob).toBeLessThanOrEqual(e.top_logprobs.at(-1)!.logprob);
    }
  });
});

describe('validation', () => {
  const chat = (extra: Record<string, unknown>) => ({ messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2, ...extra });
  const cases: Array<[string, string, Record<string, unknown>, RegExp]> = [
    ['/v1/chat/completions', 'top_k', chat({ top_k: -1 }), /top_k must be >= 0/],
    ['/v1/chat/completions', 'top_p', chat({ top_p: 0 }), /top_p must be > 0/],
    ['/v1/chat/completions', 'top_p', chat({ top_p: 1.5 }), /top_p must be <= 1/],
    ['/v1/chat/completions', 'temperature', chat({ temperature: -0.1 }), /temperature must be >= 0/],
    ['/v1/chat/completions', 'top_logprobs', chat({ logprobs: true, top_logprobs: 21 }), /top_logprobs must be <= 20/],
    ['/v1/chat/completions', 'top_logprobs', chat({ top_logprobs: 2 }), /top_logprobs requires logprobs/],
    ['/v1/chat/completions', 'top_logprobs', chat({ logprobs: false, top_logprobs: 2 }), /top_logprobs requires logprobs/],
    ['/v1/chat/completions', 'logprobs', chat({ logprobs: 5 }), /logprobs must be boolean/],
    ['/v1/chat/completions', 'dry_sequence_breakers', chat({ dry_sequence_breakers: [1, 2.5] }), /dry_sequence_breakers\[1\] must be integer/],
    ['/v1/chat/completions', 'dry_sequence_breakers', chat({ dry_sequence_breakers: ['\n'] }), /dry_sequence_breakers\[0\] must be integer/],
    ['/v1/chat/completions', 'max_pattern_size', chat({ max_pattern_size: -1 }), /max_pattern_size must be >= 0/],
    ['/v1/chat/completions', 'min_pattern_size', chat({ min_pattern_size: 9, max_pattern_size: 8 }), /min_pattern_size \(9\) must not exceed max_pattern_size/],
    ['/v1/chat/completions', 'min_p', chat({ min_p: 1.5 }), /min_p must be <= 1/],
    ['/v1/chat/completions', 'xtc_probability', chat({ xtc_probability: 2 }), /xtc_probability must be <= 1/],
    ['/v1/chat/completions', 'xtc_threshold', chat({ xtc_threshold: -0.1 }), /xtc_threshold must be >= 0/],
    ['/v1/chat/completions', 'repetition_penalty', chat({ repetition_penalty: 0 }), /repetition_penalty must be > 0/],
    ['/v1/chat/completions', 'frequency_penalty', chat({ frequency_penalty: 2.5 }), /frequency_penalty must be <= 2/],
    ['/v1/chat/completions', 'presence_penalty', chat({ presence_penalty: -3 }), /presence_penalty must be >= -2/],
    ['/v1/chat/completions', 'repetition_context_size', chat({ repetition_context_size: -2 }), /repetition_context_size must be >= -1/],
    ['/v1/chat/completions', 'dry_allowed_length', chat({ dry_allowed_length: 0 }), /dry_allowed_length must be >= 1/],
    ['/v1/chat/completions', 'seed', chat({ seed: 1.5 }), /seed must be integer/],
    ['/v1/chat/completions', 'cache_prompt', chat({ cache_prompt: 'no' }), /cache_prompt must be boolean/],
    ['/v1/chat/completions', 'extra_body.cache_prompt', chat({ extra_body: { cache_prompt: 0 } }), /extra_body\.cache_prompt must be boolean/],
    ['/v1/completions', 'logprobs', { prompt: 'Hi', logprobs: 21 }, /logprobs must be <= 20/],
    ['/v1/completions', 'logprobs', { prompt: 'Hi', logprobs: true }, /logprobs must be integer/],
    ['/v1/completions', 'top_k', { prompt: 'Hi', top_k: -5 }, /top_k must be >= 0/],
    ['/completion', 'n_probs', { prompt: 'Hi', n_probs: 21 }, /n_probs must be <= 20/],
    ['/completion', 'repeat_penalty', { prompt: 'Hi', repeat_penalty: -1 }, /repeat_penalty must be > 0/],
    ['/completion', 'repeat_last_n', { prompt: 'Hi', repeat_last_n: -2 }, /repeat_last_n must be >= -1/],
    ['/completion', 'dry_base', { prompt: 'Hi', dry_base: 0.5 }, /dry_base must be >= 1/],
    ['/completion', 'dry_penalty_last_n', { prompt: 'Hi', dry_penalty_last_n: -2 }, /dry_penalty_last_n must be >= -1/],
    ['/completion', 'p_less', { prompt: 'Hi', p_less: 1 }, /p_less must be boolean/],
    ['/v1/responses', 'min_p', { input: 'Hi', min_p: 2 }, /min_p must be <= 1/],
    ['/v1/chat/completions', 'logit_bias', chat({ logit_bias: { 5: 101 } }), /logit_bias\[5\] must be <= 100/],
    ['/v1/chat/completions', 'logit_bias', chat({ logit_bias: { Hi: 5 } }), /logit_bias must match pattern/],
    ['/v1/chat/completions', 'logit_bias', chat({ logit_bias: [[5, 1]] }), /logit_bias must be object/],
    ['/v1/completions', 'logit_bias', { prompt: 'Hi', logit_bias: { 5: false } }, /logit_bias\[5\] must be number/],
    ['/v1/completions', 'logit_bias', { prompt: 'Hi', logit_bias: { 512: 1 } }, /logit_bias token id 512 is out of vocabulary range/],
    ['/completion', 'logit_bias', { prompt: 'Hi', logit_bias: [[5]] }, /logit_bias\[0\] must NOT have fewer than 2 items/],
    ['/completion', 'logit_bias', { prompt: 'Hi', logit_bias: [[5, true]] }, /logit_bias\[0\]\[1\] must be number/],
    ['/completion', 'logit_bias', { prompt: 'Hi', logit_bias: [[-1, 1]] }, /logit_bias\[0\]\[0\] must be >= 0/],
    ['/completion', 'logit_bias', { prompt: 'Hi', logit_bias: [[512, false]] }, /logit_bias token id 512 is out of vocabulary range/],
    ['/completion', 'logit_bias', { prompt: 'Hi', logit_bias: 'Hi' }, /logit_bias must be object or array/],
  ];

  it.each(cases)('%s: bad %s is a 400 naming it', async (path, _field, body, message) => {
    const res = await live.post(path, body);
    expect(res.status).toBe(400);
    expect(res.body.error.type).toBe('invalid_request_error');
    expect(res.body.error.message).toMatch(message);
  });

  it('accepts min_count below 2 (detection off), top_k 0, and the boundary values', async () => {
    const ok = [
      chat({ min_count: 1, max_pattern_size: 4 }),
      chat({ min_count: 0 }),
      chat({ top_k: 0, top_p: 1, min_p: 0, temperature: 0 }),
      chat({ logprobs: true, top_logprobs: 20, top_p: 1e-9, xtc_probability: 1, xtc_threshold: 1, frequency_penalty: -2, presence_penalty: 2 }),
      chat({ dry_multiplier: 0.8, dry_sequence_breakers: [], dry_penalty_last_n: -1, seed: -1 }),
      chat({ cache_prompt: false, extra_body: { cache_prompt: true } }),
    ];
    for (const body of ok) expect((await live.post('/v1/chat/completions', body)).status, JSON.stringify(body)).toBe(200);
    expect((await live.post('/completion', { prompt: 'Hi', n_predict: 2, n_probs: 0, repeat_last_n: -1 })).status).toBe(200);
  });
});

describe('GET /props', () => {
  it('reports the sampler flags, XTC and the resolved loop-detection policy', async () => {
    const props = (await (await fetch(`${tuned.url}/props`)).json()) as { default_generation_settings: Record<string, unknown> };
    expect(props.default_generation_settings).toMatchObject({
      min_p: 0.1,
      repeat_penalty: 1.3,
      repeat_last_n: 32,
      presence_penalty: 0.2,
      frequency_penalty: 0.1,
      dry_multiplier: 0.5,
      dry_base: 2,
      dry_allowed_length: 3,
      dry_penalty_last_n: 16,
      xtc_probability: 0.25,
      xtc_threshold: 0.2,
      loop_detection: { min_pattern_size: 1, max_pattern_size: 8, min_count: 3 },
    });
    const plain = (await (await fetch(`${live.url}/props`)).json()) as { default_generation_settings: Record<string, unknown> };
    expect(plain.default_generation_settings).toMatchObject({ min_p: 0.05, xtc_probability: 0, xtc_threshold: 0.1, loop_detection: null });
  });

  it('and requests that omit a field get the flag', async () => {
    // The tuned server's penalties change the repeating greedy output.
    const plain = await complete({ prompt: REPEATING, n_predict: 64 });
    const tunedOut = await complete({ prompt: REPEATING, n_predict: 64, xtc_probability: 0 }, tuned);
    expect(tunedOut.content).not.toBe(plain.content);
    // ...and a request setting them all back gets the plain output.
    const neutral = { repeat_penalty: 1, presence_penalty: 0, frequency_penalty: 0, dry_multiplier: 0, max_pattern_size: 0 };
    expect((await complete({ prompt: REPEATING, n_predict: 64, ...neutral }, tuned)).content).toBe(plain.content);
  });
});
