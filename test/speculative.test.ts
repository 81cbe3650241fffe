// Speculative decoding with prompt lookup changes speed, never output: greedy requests get
// plain decode's tokens alone and inside a batch of sequences that draft and sequences that
// do not (stories260k, and a random-weight Qwen3); a seeded sampled request gets the same
// tokens too, since every kept position draws from the request's stream as plain decode
// does; and without a seed the sampled token at a verified position follows the target
// distribution (chi-square against the logits read back). A draft model (the target itself,
// or another random model with the same tokenizer) changes nothing either, and one with
// another tokenizer is refused at load.
// One plain stories260k engine is the reference for the whole file, and each request's plain
// tokens are decoded once; the random checkpoints are written once and shared.
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/engine/engine.js';
import type { ForwardRunner } from '../src/engine/forward.js';
import { loadEngine } from '../src/engine/load.js';
import { promptLookup } from '../src/engine/drafters/prompt-lookup.js';
import { Speculation, type SpeculativeOptions } from '../src/engine/speculative.js';
import type { DraftStats, GenerationRequest, SamplingParams, TokenConstraint } from '../src/engine/types.js';
import { chiSquare } from './helpers/chi-square.js';
import { openRunner, TEST_BACKEND } from './helpers/model-harness.js';
import { makeRandomCheckpoint, type RandomCheckpointOptions } from './helpers/random-checkpoint.js';
import { STORIES_DIR, storiesCases } from './helpers/stories-expected.js';

// Not adaptive: whether a round drafts must not depend on the step costs measured on a busy
// machine. The policy has its own tests below, and the draft model's adaptive run checks it
// keeps plain decode's tokens.
const SPEC: SpeculativeOptions = { kind: 'prompt-lookup', nMax: 8, nMin: 0, ngram: 3, adaptive: false };
const GREEDY: SamplingParams = { temperature: 0, topK: 0, topP: 1 };

interface Run {
  tokens: number[];
  draft?: DraftStats;
  shifted?: boolean;
}

async function run(engine: Engine, req: GenerationRequest): Promise<Run> {
  const tokens: number[] = [];
  let draft: DraftStats | undefined;
  let shifted = false;
  for await (const ev of engine.generate(req)) {
    if (ev.type === 'token') tokens.push(ev.id);
    if (ev.type === 'done' && ev.timings.draft_rounds !== undefined) {
      const { draft_n, draft_n_accepted, draft_rounds, draft_kind } = ev.timings;
      draft = { draft_n: draft_n!, draft_n_accepted: draft_n_accepted!, draft_rounds, draft_kind: draft_kind! };
    }
    if (ev.type === 'done') shifted = ev.contextShifted === true;
  }
  return { tokens, ...(draft ? { draft } : {}), ...(shifted ? { shifted } : {}) };
}

describe('prompt lookup', () => {
  it('drafts what followed the latest earlier occurrence of the longest matching tail', () => {
    expect(promptLookup([1, 2, 3, 9, 1, 2, 3, 7, 5, 2, 3], 3, 2, 4)).toEqual([7, 5, 2, 3]);
    expect(promptLookup([4, 1, 2, 3, 8, 1, 2, 3], 3, 2, 2)).toEqual([8, 1]);
    expect(promptLookup([1, 2, 3, 4], 3, 2, 4)).toEqual([]);
    expect(promptLookup([5, 6, 5, 6], 3, 2, 8)).toEqual([5, 6]);
  });
});

/** A prompt that stories260k continues partly by repeating it: its own greedy story. */
function copyPrompt(engine: Engine): number[] {
  return engine.tokenizer.encode(`${storiesCases[0]!.expected_text}\n`, true);
}

describe('the drafting policy', () => {
  const options = (kind: SpeculativeOptions['kind'], adaptive = true): SpeculativeOptions => ({ kind, nMax: 8, nMin: 0, ngram: 3, adaptive });

  it('drafts while drafted tokens are kept and cheap, and stops when a drafted token costs a plain step', () => {
    const cheap = new Speculation(options('draft-model'));
    const dear = new Speculation(options('draft-model'));
    let generated = 0;
    for (let round = 0; round < 5; round++) {
      const k = cheap.draftLength(generated, 0.1 + 0.05, 100);
      expect(k).toBeGreaterThan(0);
      cheap.record(k, k);
      generated += k + 1;
    }
    // Every draft kept, but each costs as much as the step it would save (a draft pass as
    // long as a plain step, plus its verification): plain decode wins, and probes back off.
    dear.record(4, 4);
    const asked: number[] = [];
    for (let generated = 0; generated < 200; generated++) asked.push(dear.draftLength(generated, 0.1 + 1, 100));
    expect(asked.every((k) => k === 0)).toBe(true);
    // Off: every round drafts the most allowed, as llama-server does.
    expect(new Speculation(options('draft-model', false)).draftLength(0, 0.1 + 1, 100)).toBe(8);
  });

  it('stops where drafts are rejected, and probes again after a back-off that doubles', () => {
    const spec = new Speculation(options('prompt-lookup'));
    let generated = 0;
    const rounds: number[] = [];
    while (generated < 400) {
      const k = spec.draftLength(generated, 0.2, 100);
      if (k > 0) {
        rounds.push(generated);
        spec.record(k, 0);
      }
      generated += 1;
    }
    // A few rounds learn that nothing is kept; then only probes, ever further apart.
    const gaps = rounds.slice(1).map((g, i) => g - rounds[i]!).filter((g) => g > 1);
    expect(gaps.length).toBeGreaterThan(1);
    for (let i = 1; i < gaps.length; i++) expect(gaps[i]!).toBeGreaterThan(gaps[i - 1]!);
  });
});

/**
 * Every stories260k engine here has 16 slots of 512 tokens (the model's trained length), so
 * the statistical tests run many requests per step.
 */
const STORIES_PARALLEL = 16;
/** Requests in flight at once in the statistical tests: the slots, and a queue behind them. */
const IN_FLIGHT = 64;

const tmp = mkdtempSync(join(tmpdir(), 'spec-'));
const checkpoints = new Map<string, string>();
/** A random checkpoint, written on first use and shared by the tests that name it. */
function checkpoint(name: string, options: RandomCheckpointOptions): string {
  let dir = checkpoints.get(name);
  if (!dir) {
    dir = join(tmp, name);
    makeRandomCheckpoint(options, dir);
    checkpoints.set(name, dir);
  }
  return dir;
}
/** A random model with stories260k's tokenizer, of another shape. */
const randomStories = () => checkpoint('stories-random', { arch: 'llama', tokenizer: 'stories', hidden: 32, layers: 1, heads: 2, kvHeads: 1, headDim: 16, intermediate: 64, seed: 3 });
/** A small random Qwen3: a draft model for the random Qwen3 target, another tokenizer for stories260k. */
const smallQwen3 = () => checkpoint('qwen3-small', { arch: 'qwen3', tokenizer: 'qwen3', hidden: 32, layers: 1, heads: 2, kvHeads: 1, headDim: 16, intermediate: 64, seed: 8 });

/** stories260k with plain decode: the reference every drafter is held to. */
let plain: Engine;
let runner: Promise<ForwardRunner> | undefined;
beforeAll(async () => {
  plain = await loadEngine({ modelDir: STORIES_DIR, backend: TEST_BACKEND, parallel: STORIES_PARALLEL });
});
afterAll(async () => {
  await plain?.close();
  rmSync(tmp, { recursive: true, force: true });
});

/** The stories260k requests every drafter must decode as plain decode does. */
function storiesRequests(): GenerationRequest[] {
  return [
    { promptTokens: copyPrompt(plain), maxTokens: 80, sampling: GREEDY },
    ...storiesCases.map((c) => ({ promptTokens: c.prompt_token_ids, maxTokens: c.max_tokens, sampling: GREEDY })),
    // Penalties read the drafted tokens as history at each verified position.
    { promptTokens: copyPrompt(plain), maxTokens: 60, sampling: { ...GREEDY, repetitionPenalty: 1.3, frequencyPenalty: 0.2 } },
    // Past the 512-token context (the story twice is 405 tokens): rounds stop short of the
    // end, and the shift re-prefills.
    { promptTokens: [...copyPrompt(plain), ...copyPrompt(plain).slice(1)], maxTokens: 160, sampling: GREEDY, contextShift: { keep: 8 } },
  ];
}

let storiesExpected: Promise<number[][]> | undefined;
/** Plain decode's tokens for storiesRequests(), each request alone; run once for the file. */
function expectedStories(): Promise<number[][]> {
  storiesExpected ??= (async () => {
    const expected: number[][] = [];
    for (const req of storiesRequests()) expected.push((await run(plain, req)).tokens);
    return expected;
  })();
  return storiesExpected;
}

/** `count` runs of one request, IN_FLIGHT at a time. */
async function runMany(engine: Engine, req: GenerationRequest, count: number): Promise<Run[]> {
  const runs: Run[] = [];
  for (let i = 0; i < count; i += IN_FLIGHT) {
    runs.push(...(await Promise.all(Array.from({ length: Math.min(IN_FLIGHT, count - i) }, () => run(engine, req)))));
  }
  return runs;
}

/** stories260k's logits after `context`, read below the engine (one forward pass). */
async function logitsAfter(context: number[]): Promise<number[]> {
  const r = await (runner ??= openRunner(STORIES_DIR));
  const table = Array.from({ length: r.model.kv.blocks }, (_, i) => i);
  await r.run([{ tokens: context, startPos: 0, table, sample: { temperature: 0, topK: 0, topP: 1, minP: 0, pLess: false, xtcThreshold: 0, u: 0 } }]);
  return Array.from(await r.readLogits(1));
}

/**
 * The second tokens of `given` (runs after `context` whose second token was sampled in a
 * verify round of one draft) follow the sampler's distribution after `context` at
 * `temperature` (chi-square), and that round's draft was kept in some runs and rejected
 * in others.
 */
async function expectTargetDistribution(given: Run[], context: number[], temperature: number): Promise<void> {
  const logits = await logitsAfter(context);
  const max = Math.max(...logits);
  const e = logits.map((l) => Math.exp((l - max) / temperature));
  const z = e.reduce((a, b) => a + b, 0);
  const counts = new Array<number>(e.length).fill(0);
  for (const r of given) counts[r.tokens[1]!]!++;
  const fit = chiSquare(counts, e.map((x) => x / z), 0.001);
  expect(fit.stat).toBeLessThan(fit.critical);
  const kept = given.filter((r) => r.draft!.draft_n_accepted === 1).length;
  expect(kept).toBeGreaterThan(0);
  expect(kept).toBeLessThan(given.length);
}

describe('stories260k', () => {
  let spec: Engine;
  beforeAll(async () => {
    spec = await loadEngine({ modelDir: STORIES_DIR, backend: TEST_BACKEND, parallel: STORIES_PARALLEL, speculative: SPEC });
  });
  afterAll(async () => {
    await spec?.close();
  });

  it('greedy output is plain decode token for token, alone and batched', async () => {
    const requests = storiesRequests();
    const expected = await expectedStories();
    // Alone.
    const alone: Run[] = [];
    for (const req of requests) alone.push(await run(spec, req));
    expect(alone.map((r) => r.tokens)).toEqual(expected);
    expect(alone.filter((r) => r.shifted)).toHaveLength(1);
    // The copying prompt drafts, and most of its drafts are kept.
    const copy = alone[0]!.draft!;
    expect(copy.draft_kind).toBe('prompt-lookup');
    expect(copy.draft_rounds).toBeGreaterThan(0);
    expect(copy.draft_n_accepted).toBeGreaterThan(copy.draft_n / 3);
    // Batched: all at once, drafting and plain sequences in the same steps.
    const batched = await Promise.all(requests.map((req) => run(spec, req)));
    expect(batched.map((r) => r.tokens)).toEqual(expected);
    const counters = spec.stats().counters;
    expect(counters.draft_tokens).toBeGreaterThan(0);
    expect(counters.draft_accepted_tokens).toBeGreaterThan(0);
  });

  it('a seeded sampled request gets the same tokens as plain decode', async () => {
    const prompt = copyPrompt(spec);
    for (const seed of [1, 2, 3]) {
      const req = { promptTokens: prompt, maxTokens: 60, sampling: { temperature: 0.8, topK: 40, topP: 0.95, seed } };
      const [a, b] = [await run(plain, req), await run(spec, req)];
      expect(b.tokens).toEqual(a.tokens);
      expect(b.draft?.draft_rounds).toBeGreaterThan(0);
    }
  });

  it("the token sampled at a verified position follows the target's distribution", async () => {
    // The prompt repeats "Tom had a" after the model's likeliest next token t*, so when the
    // first sampled token is t* the tail recurs and the second token is sampled inside a
    // verify round (three tokens: a round drafts only what leaves room for its last
    // sample). Condition on the commonest first token among the runs that drafted, and
    // compare the second token's counts with the sampler's distribution after it.
    const head = spec.tokenizer.encode('Tom had a', true);
    const first = await logitsAfter(head);
    const top = first.indexOf(Math.max(...first));
    const prompt = [...head, top, ...spec.tokenizer.encode('. Tom had a', false)];
    const temperature = 0.6;
    const eager = await loadEngine({ modelDir: STORIES_DIR, backend: TEST_BACKEND, parallel: STORIES_PARALLEL, speculative: SPEC });
    let runs: Run[];
    try {
      runs = await runMany(eager, { promptTokens: prompt, maxTokens: 3, sampling: { temperature, topK: 0, topP: 1 } }, 1500);
    } finally {
      await eager.close();
    }
    const drafted = new Map<number, number>();
    for (const r of runs) if (r.draft) drafted.set(r.tokens[0]!, (drafted.get(r.tokens[0]!) ?? 0) + 1);
    const t1 = [...drafted].sort((a, b) => b[1] - a[1])[0]![0];
    const given = runs.filter((r) => r.tokens[0] === t1);
    // Drafting depends only on the tokens: every run with this first token verified its second.
    expect(given.every((r) => r.draft?.draft_rounds === 1)).toBe(true);
    expect(given.length).toBeGreaterThan(300);
    await expectTargetDistribution(given, [...prompt, t1], temperature);
  });
});

/** A constraint that allows every token: its request decodes plainly (a grammar never drafts). */
const ANYTHING: TokenConstraint = { allowed: () => undefined, accept: () => {} };
/** Drafting every round, so each test's rounds happen whatever a draft pass costs here. */
const draftModel = (dir: string, adaptive = false): SpeculativeOptions => ({ kind: 'draft-model', nMax: 4, nMin: 0, ngram: 3, draftModel: dir, adaptive });

describe('draft model, stories260k', () => {
  let self: Engine;
  let random: Engine;
  beforeAll(async () => {
    self = await loadEngine({ modelDir: STORIES_DIR, backend: TEST_BACKEND, parallel: STORIES_PARALLEL, speculative: draftModel(STORIES_DIR) });
    random = await loadEngine({ modelDir: STORIES_DIR, backend: TEST_BACKEND, parallel: STORIES_PARALLEL, speculative: draftModel(randomStories()) });
  });
  afterAll(async () => {
    for (const e of [self, random]) await e?.close();
  });

  it('greedy output is plain decode token for token, alone and batched with plain sequences', async () => {
    // And one that decodes plainly in the same steps.
    const unconstrained: GenerationRequest = { promptTokens: storiesCases[0]!.prompt_token_ids, maxTokens: 40, sampling: GREEDY, constraint: ANYTHING };
    const requests = [...storiesRequests(), unconstrained];
    const expected = [...(await expectedStories()), (await run(plain, unconstrained)).tokens];
    for (const spec of [self, random]) {
      const alone: Run[] = [];
      for (const req of requests) alone.push(await run(spec, req));
      expect(alone.map((r) => r.tokens)).toEqual(expected);
      expect(alone.filter((r) => r.shifted)).toHaveLength(1);
      expect(alone.at(-1)!.draft).toBeUndefined();
      const first = alone[0]!.draft!;
      expect(first.draft_kind).toBe('draft-model');
      expect(first.draft_rounds).toBeGreaterThan(0);
      // Batched once, with the draft model that disagrees with the model at times.
      if (spec !== random) continue;
      const batched = await Promise.all(requests.map((req) => run(spec, req)));
      expect(batched.map((r) => r.tokens)).toEqual(expected);
    }
    // The target drafting for itself: nearly every draft is kept (kernels of other batch
    // shapes may round a near tie the other way).
    const { draft_tokens, draft_accepted_tokens } = self.stats().counters;
    expect(draft_accepted_tokens).toBeGreaterThan(0.9 * draft_tokens);
    expect(random.stats().counters.draft_tokens).toBeGreaterThan(0);
  });

  it('adaptive, keeps plain decode\'s tokens with its own draft pass costs measured', async () => {
    // Itself as the draft model: every draft is kept, but each costs a pass about as long
    // as a plain step, so the policy drafts little or nothing once it has measured that.
    const adaptive = await loadEngine({ modelDir: STORIES_DIR, backend: TEST_BACKEND, parallel: 1, speculative: draftModel(STORIES_DIR, true) });
    try {
      const req = { promptTokens: copyPrompt(adaptive), maxTokens: 120, sampling: GREEDY };
      const expected = (await run(plain, req)).tokens;
      for (let i = 0; i < 2; i++) {
        const got = await run(adaptive, req);
        expect(got.draft?.draft_kind ?? 'draft-model').toBe('draft-model');
        expect(got.tokens).toEqual(expected);
        // Whether it drafts depends on the measured costs (./the drafting policy above);
        // what it keeps is plain decode's either way.
      }
    } finally {
      await adaptive.close();
    }
  });

  it('a seeded sampled request gets the same tokens as plain decode', async () => {
    for (const seed of [1, 2]) {
      const req = { promptTokens: copyPrompt(self), maxTokens: 60, sampling: { temperature: 0.8, topK: 40, topP: 0.95, seed } };
      const expected = (await run(plain, req)).tokens;
      for (const spec of [self, random]) {
        const got = await run(spec, req);
        expect(got.tokens).toEqual(expected);
        expect(got.draft?.draft_rounds).toBeGreaterThan(0);
      }
    }
  });

  it("the token sampled at a verified position follows the target's distribution", async () => {
    // With three tokens to generate the second is sampled in a verify round of one draft,
    // in every run. Condition on the commonest first token and compare the second's counts
    // with the sampler's distribution after it.
    const prompt = self.tokenizer.encode('Tom had a', true);
    const temperature = 0.6;
    const runs = await runMany(self, { promptTokens: prompt, maxTokens: 3, sampling: { temperature, topK: 0, topP: 1 } }, 1000);
    expect(runs.every((r) => r.tokens.length < 2 || r.draft?.draft_rounds === 1)).toBe(true);
    const firsts = new Map<number, number>();
    for (const r of runs) firsts.set(r.tokens[0]!, (firsts.get(r.tokens[0]!) ?? 0) + 1);
    const t1 = [...firsts].sort((a, b) => b[1] - a[1])[0]![0];
    const given = runs.filter((r) => r.tokens[0] === t1 && r.tokens.length >= 2);
    expect(given.length).toBeGreaterThan(300);
    await expectTargetDistribution(given, [...prompt, t1], temperature);
  });

  it('refuses a draft model with another tokenizer at load', async () => {
    await expect(loadEngine({ modelDir: STORIES_DIR, backend: TEST_BACKEND, parallel: 1, speculative: draftModel(smallQwen3()) }))
      .rejects.toThrow(/does not share the tokenizer .*: its vocabulary has \d+ tokens, the target's 512/);
    // Same size, one piece spelled otherwise.
    const renamed = join(tmp, 'stories-renamed');
    cpSync(randomStories(), renamed, { recursive: true });
    const path = join(renamed, 'tokenizer.json');
    const json = JSON.parse(readFileSync(path, 'utf8')) as { model: { vocab: Record<string, number> } };
    const piece = Object.keys(json.model.vocab).find((p) => json.model.vocab[p] === 300)!;
    json.model.vocab['renamed'] = 300;
    delete json.model.vocab[piece];
    writeFileSync(path, JSON.stringify(json));
    await expect(loadEngine({ modelDir: STORIES_DIR, backend: TEST_BACKEND, parallel: 1, speculative: draftModel(renamed) }))
      .rejects.toThrow(/token 300 is "renamed" in its tokenizer/);
  });
});

describe('random Qwen3', () => {
  // Qwen3's layers and a 151k vocabulary: token ids past 16 bits through drafts and verify rounds.
  const target = () => checkpoint('qwen3-target', { arch: 'qwen3', tokenizer: 'qwen3', hidden: 64, layers: 2, heads: 4, kvHeads: 2, headDim: 16, intermediate: 128, seed: 7 });
  const options = () => ({ modelDir: target(), backend: TEST_BACKEND, parallel: 4, contextSize: 4 * 512 });
  let qwenPlain: Engine;
  let requests: GenerationRequest[];
  let expected: number[][];
  beforeAll(async () => {
    qwenPlain = await loadEngine(options());
    const text = 'The quick brown fox jumps over the lazy dog. '.repeat(6);
    // Greedy, greedy, seeded, and one that decodes plainly in the same steps.
    requests = ['', 'Hello', 'Copy this: ', 'Plain: '].map((p, i) => ({
      promptTokens: qwenPlain.tokenizer.encode(p + text, false),
      maxTokens: 16,
      sampling: i === 2 ? { temperature: 0.9, topK: 20, topP: 1, seed: 5 } : GREEDY,
      ...(i === 3 ? { constraint: ANYTHING } : {}),
    }));
    expected = [];
    for (const req of requests) expected.push((await run(qwenPlain, req)).tokens);
  });
  afterAll(async () => {
    await qwenPlain?.close();
  });

  it('prompt lookup: greedy and seeded output is plain decode token for token, batched with a plain sequence', async () => {
    const spec = await loadEngine({ ...options(), speculative: SPEC });
    try {
      const batched = await Promise.all(requests.map((req) => run(spec, req)));
      expect(batched.map((r) => r.tokens)).toEqual(expected);
      expect(spec.stats().counters.draft_tokens).toBeGreaterThan(0);
      expect(batched[3]!.draft).toBeUndefined();
    } finally {
      await spec.close();
    }
  });

  it('a draft model (another random Qwen3): greedy and seeded output is plain decode token for token, batched with a plain sequence', async () => {
    const draft = smallQwen3();
    const spec = await loadEngine({ ...options(), speculative: draftModel(draft) });
    try {
      const batched = await Promise.all(requests.map((req) => run(spec, req)));
      expect(batched.map((r) => r.tokens)).toEqual(expected);
      expect(batched[0]!.draft?.draft_kind).toBe('draft-model');
      expect(batched[3]!.draft).toBeUndefined();
      expect(spec.info.speculative).toMatchObject({ kind: 'draft-model', draftModel: draft });
    } finally {
      await spec.close();
    }
  });
});
