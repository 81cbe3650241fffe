// Server-side sampling policy without a GPU: loop-detection precedence (request fields >
// MLXCEL_LOOP_DETECTION > per-family default), the sampler and prompt-cache flags with
// their LLAMA_ARG_* variables, the cache_prompt shapes, and logprob chunks staying one per
// token when the tool-call filter suppresses markup (a scripted engine, real Qwen3 tokenizer).
import { beforeAll, describe, expect, it } from 'vitest';
import { CliError, HELP_TEXT, parseCli } from '../src/cli-options.js';
import { cachePromptFrom } from '../src/server/generation-params.js';
import { parseLoopPolicy, requestLoopDetection, serverLoopDetection, STANDARD_LOOP_THRESHOLDS } from '../src/server/loop-policy.js';
import { validUtf8Length } from '../src/server/token-pieces.js';
import { FakeEngine } from './helpers/fake-engine.js';
import { useServer } from './helpers/live-server.js';
import { tokenizerDir } from './helpers/random-checkpoint.js';
import { readSse } from './helpers/sse.js';

const GEMMA = { minPatternSize: 1, maxPatternSize: 20, minCount: 4 };

describe('loop-detection policy', () => {
  it('parses MLXCEL_LOOP_DETECTION', () => {
    expect(parseLoopPolicy('auto')).toBe('auto');
    expect(parseLoopPolicy('')).toBe('auto');
    for (const off of ['off', 'OFF', '0', 'false', 'none', 'disabled']) expect(parseLoopPolicy(off)).toBe('off');
    expect(parseLoopPolicy('on')).toEqual(STANDARD_LOOP_THRESHOLDS);
    expect(parseLoopPolicy('1,8,3')).toEqual({ minPatternSize: 1, maxPatternSize: 8, minCount: 3 });
    expect(parseLoopPolicy(' 2 , 10 , 5 ')).toEqual({ minPatternSize: 2, maxPatternSize: 10, minCount: 5 });
    // Values that cannot detect anything read as off.
    expect(parseLoopPolicy('1,0,3')).toBe('off');
    expect(parseLoopPolicy('1,8,1')).toBe('off');
    for (const bad of ['yes please', '1,2', '1,2,3,4', '-1,8,3', '9,8,3', 'a,b,c']) expect(() => parseLoopPolicy(bad)).toThrow(/MLXCEL_LOOP_DETECTION/);
  });

  it('defaults per family: on for Gemma 4, off elsewhere', () => {
    expect(serverLoopDetection('auto', 'gemma4')).toEqual(GEMMA);
    expect(serverLoopDetection('auto', 'gemma4_text')).toEqual(GEMMA);
    expect(serverLoopDetection('auto', 'llama')).toBeUndefined();
    expect(serverLoopDetection('auto', 'qwen3')).toBeUndefined();
  });

  it('lets the environment override the family default', () => {
    expect(serverLoopDetection('off', 'gemma4')).toBeUndefined();
    expect(serverLoopDetection({ minPatternSize: 1, maxPatternSize: 8, minCount: 3 }, 'llama')).toEqual({ minPatternSize: 1, maxPatternSize: 8, minCount: 3 });
    expect(serverLoopDetection({ minPatternSize: 1, maxPatternSize: 8, minCount: 3 }, 'gemma4')).toEqual({ minPatternSize: 1, maxPatternSize: 8, minCount: 3 });
  });

  it('lets any request field win over both', () => {
    const env = { minPatternSize: 2, maxPatternSize: 8, minCount: 3 };
    // No field: the policy.
    expect(requestLoopDetection({}, 'auto', 'gemma4')).toEqual(GEMMA);
    expect(requestLoopDetection({ max_pattern_size: null }, env, 'llama')).toEqual(env);
    // Explicit max_pattern_size 0 force-disables, whatever the policy.
    expect(requestLoopDetection({ max_pattern_size: 0 }, 'auto', 'gemma4')).toBeUndefined();
    expect(requestLoopDetection({ max_pattern_size: 0 }, env, 'llama')).toBeUndefined();
    // min_count below 2 disables, without an error.
    expect(requestLoopDetection({ min_count: 1 }, 'auto', 'gemma4')).toBeUndefined();
    expect(requestLoopDetection({ min_count: -3 }, env, 'llama')).toBeUndefined();
    // Fields the request leaves out come from the policy...
    expect(requestLoopDetection({ min_count: 6 }, 'auto', 'gemma4')).toEqual({ ...GEMMA, minCount: 6 });
    expect(requestLoopDetection({ max_pattern_size: 4 }, env, 'llama')).toEqual({ ...env, maxPatternSize: 4 });
    // ...or, with the policy off, from the standard thresholds: a request turns it on.
    expect(requestLoopDetection({ max_pattern_size: 8, min_count: 3 }, 'off', 'gemma4')).toEqual({ minPatternSize: 1, maxPatternSize: 8, minCount: 3 });
    expect(requestLoopDetection({ min_pattern_size: 0, max_pattern_size: 8, min_count: 3 }, 'auto', 'llama')).toEqual({ minPatternSize: 0, maxPatternSize: 8, minCount: 3 });
    expect(requestLoopDetection({ min_count: 5 }, 'off', 'llama')).toEqual({ minPatternSize: 1, maxPatternSize: 20, minCount: 5 });
  });
});

describe('CLI: sampler and prompt-cache flags', () => {
  const parse = (argv: string[], env: Record<string, string> = {}) => parseCli(argv, env, '/m');

  it('reads every sampler default flag', () => {
    const argv = [
      '--min-p', '0.1', '--repeat-penalty', '1.2', '--repeat-last-n', '-1', '--presence-penalty', '0.5', '--frequency-penalty', '-0.5',
      '--dry-multiplier', '0.8', '--dry-base', '2', '--dry-allowed-length', '3', '--dry-penalty-last-n', '128',
      '--xtc-probability', '0.5', '--xtc-threshold', '0.2',
    ];
    expect(parse(argv)).toMatchObject({
      options: {
        sampling: {
          min_p: 0.1, repeat_penalty: 1.2, repeat_last_n: -1, presence_penalty: 0.5, frequency_penalty: -0.5,
          dry_multiplier: 0.8, dry_base: 2, dry_allowed_length: 3, dry_penalty_last_n: 128, xtc_probability: 0.5, xtc_threshold: 0.2,
        },
      },
    });
  });

  it('reads their LLAMA_ARG_* variables; flags win', () => {
    const env = {
      LLAMA_ARG_MIN_P: '0.2', LLAMA_ARG_REPEAT_PENALTY: '1.1', LLAMA_ARG_REPEAT_LAST_N: '32', LLAMA_ARG_PRESENCE_PENALTY: '0.1',
      LLAMA_ARG_FREQUENCY_PENALTY: '0.2', LLAMA_ARG_DRY_MULTIPLIER: '1', LLAMA_ARG_DRY_BASE: '1.5', LLAMA_ARG_DRY_ALLOWED_LENGTH: '4',
      LLAMA_ARG_DRY_PENALTY_LAST_N: '0', LLAMA_ARG_XTC_PROBABILITY: '0.3', LLAMA_ARG_XTC_THRESHOLD: '0.15', LLAMA_ARG_TEMPERATURE: '0.3',
    };
    expect(parse([], env)).toMatchObject({
      options: {
        sampling: {
          min_p: 0.2, repeat_penalty: 1.1, repeat_last_n: 32, presence_penalty: 0.1, frequency_penalty: 0.2, dry_multiplier: 1,
          dry_base: 1.5, dry_allowed_length: 4, dry_penalty_last_n: 0, xtc_probability: 0.3, xtc_threshold: 0.15, temperature: 0.3,
        },
      },
    });
    expect(parse(['--min-p', '0'], env)).toMatchObject({ options: { sampling: { min_p: 0, repeat_penalty: 1.1 } } });
  });

  it('rejects values out of range', () => {
    expect(() => parse(['--min-p', '1.5'])).toThrow(/--min-p must be a number from 0 to 1/);
    expect(() => parse(['--repeat-penalty', '0'])).toThrow(/--repeat-penalty must be a number above 0/);
    expect(() => parse(['--repeat-last-n', '-2'])).toThrow(/--repeat-last-n must be an integer from -1/);
    expect(() => parse(['--presence-penalty', '3'])).toThrow(/--presence-penalty must be a number from -2 to 2/);
    expect(() => parse(['--dry-base', '0.5'])).toThrow(/--dry-base/);
    expect(() => parse(['--dry-allowed-length', '0'])).toThrow(/--dry-allowed-length/);
    expect(() => parse(['--xtc-threshold', '2'])).toThrow(/--xtc-threshold/);
  });

  it('reads the prompt-cache switch and bounds', () => {
    expect(parse(['--no-cache-prompt', '--cache-capacity-bytes', '65536', '--cache-max-entries', '8', '--cache-ttl-secs', '1'])).toMatchObject({
      options: { cachePrompt: false, cacheCapacityBytes: 65536, cacheMaxEntries: 8, cacheTtlSecs: 1 },
    });
    expect(parse([], { LLAMA_ARG_CACHE_PROMPT: 'false', LLAMA_ARG_CACHE_CAPACITY_BYTES: '1024', LLAMA_ARG_CACHE_MAX_ENTRIES: '2', LLAMA_ARG_CACHE_TTL_SECS: '0' })).toMatchObject({
      options: { cachePrompt: false, cacheCapacityBytes: 1024, cacheMaxEntries: 2, cacheTtlSecs: 0 },
    });
    expect(parse(['--cache-prompt'], { LLAMA_ARG_CACHE_PROMPT: '0' })).toMatchObject({ options: { cachePrompt: true } });
    const command = parse([]);
    if (command.kind !== 'serve') throw new Error(`expected a serve command, got ${command.kind}`);
    const { options } = command;
    for (const key of ['cachePrompt', 'cacheCapacityBytes', 'cacheMaxEntries', 'cacheTtlSecs', 'sampling'] as const) expect(options[key]).toBeUndefined();
    expect(() => parse(['--cache-ttl-secs', '-1'])).toThrow(CliError);
  });

  it('reads MLXCEL_LOOP_DETECTION into the loop_detection default', () => {
    expect(parse([], { MLXCEL_LOOP_DETECTION: 'off' })).toMatchObject({ options: { sampling: { loop_detection: 'off' } } });
    expect(parse(['--temp', '0'], { MLXCEL_LOOP_DETECTION: '1,8,3' })).toMatchObject({
      options: { sampling: { temperature: 0, loop_detection: { minPatternSize: 1, maxPatternSize: 8, minCount: 3 } } },
    });
    expect(() => parse([], { MLXCEL_LOOP_DETECTION: 'sometimes' })).toThrow(CliError);
  });

  it('documents the flags, their variables and MLXCEL_LOOP_DETECTION in --help', () => {
    for (const text of ['--min-p', 'LLAMA_ARG_MIN_P', '--repeat-penalty', 'LLAMA_ARG_REPEAT_LAST_N', '--dry-penalty-last-n', 'LLAMA_ARG_DRY_MULTIPLIER', '--xtc-threshold',
      'LLAMA_ARG_XTC_PROBABILITY', '--no-cache-prompt', 'LLAMA_ARG_CACHE_PROMPT', '--cache-capacity-bytes', 'LLAMA_ARG_CACHE_TTL_SECS', 'MLXCEL_LOOP_DETECTION', 'MIN,MAX,COUNT']) {
      expect(HELP_TEXT).toContain(text);
    }
  });
});

describe('request shapes', () => {
  it('reads cache_prompt at the root (flattened extra_body) or nested in extra_body; the root wins', () => {
    expect(cachePromptFrom({})).toBeUndefined();
    expect(cachePromptFrom({ cache_prompt: false })).toBe(false);
    expect(cachePromptFrom({ extra_body: { cache_prompt: false } })).toBe(false);
    expect(cachePromptFrom({ cache_prompt: true, extra_body: { cache_prompt: false } })).toBe(true);
    expect(cachePromptFrom({ cache_prompt: null, extra_body: { cache_prompt: false } })).toBe(false);
  });

  it('cuts an incomplete UTF-8 character off a token for llama-server', () => {
    expect(validUtf8Length(Uint8Array.of(0x61, 0xe2, 0x80))).toBe(1);
    expect(validUtf8Length(Uint8Array.of(0xe2, 0x80, 0x99))).toBe(3);
    expect(validUtf8Length(Uint8Array.of(0xf0, 0x9f, 0x98))).toBe(0);
    expect(validUtf8Length(Uint8Array.of(0x0a))).toBe(1);
  });
});

describe('logprob chunks around suppressed tool-call markup', () => {
  const REPLY = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';
  let engine: FakeEngine;
  let ids: number[];

  beforeAll(async () => {
    let script: number[] = [];
    engine = await FakeEngine.create({ tokenizerDir: tokenizerDir('qwen3'), contextSize: 4096, script: () => script });
    ids = script = engine.tokenizer.encode(REPLY, false);
  });

  const server = useServer({ get engine() { return engine; } });

  it('give every token its own chunk; suppressed ones carry empty content', async () => {
    const res = await server.request('/v1/chat/completions', {
      messages: [{ role: 'user', content: 'Weather in Paris?' }],
      tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }],
      stream: true,
      logprobs: true,
      top_logprobs: 2,
    });
    const chunks = ((await readSse(res)) as Array<{ choices: Array<{ delta: Record<string, unknown>; logprobs: { content: Array<{ token: string; top_logprobs: unknown[] }> } | null; finish_reason: string | null }> }>).slice(0, -1);
    const withLogprobs = chunks.filter((c) => c.choices[0]?.logprobs);
    // One chunk per generated token, in order, each with that token's entry.
    expect(withLogprobs.length).toBe(ids.length);
    const tokenTexts = withLogprobs.map((c) => c.choices[0]!.logprobs!.content.map((e) => e.token).join(''));
    expect(tokenTexts.join('')).toBe(REPLY);
    expect(withLogprobs.every((c) => c.choices[0]!.logprobs!.content.length === 1 && c.choices[0]!.logprobs!.content[0]!.top_logprobs.length === 2)).toBe(true);
    // The markup never reaches content: its tokens' chunks have content "" (or a tool-call delta).
    const content = chunks.map((c) => c.choices[0]?.delta.content ?? '').join('');
    expect(content).toBe('Let me check.');
    const toolCallId = ids.indexOf(engine.tokenizer.encode('<tool_call>', false)[0]!);
    expect(withLogprobs[toolCallId]!.choices[0]!.delta).toEqual({ content: '' });
    expect(withLogprobs[toolCallId]!.choices[0]!.logprobs!.content[0]!.token).toBe('<tool_call>');
    expect(chunks.at(-1)!.choices[0]!.finish_reason).toBe('tool_calls');
  });

  it('come back whole without streaming, through the openai client', async () => {
    const client = server.openai;
    const res = await client.chat.completions.create({
      model: 'q',
      messages: [{ role: 'user', content: 'Weather in Paris?' }],
      tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }],
      logprobs: true,
    });
    const content = res.choices[0]!.logprobs!.content!;
    expect(content.length).toBe(ids.length);
    expect(content.map((e) => e.token).join('')).toBe(REPLY);
    expect(content.every((e) => e.top_logprobs.length === 0 && e.logprob === -0.25)).toBe(true);
    expect(res.choices[0]!.message.tool_calls?.[0]).toMatchObject({ function: { name: 'get_weather' } });
  });
});
