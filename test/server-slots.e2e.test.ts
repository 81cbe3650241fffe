// POST /slots/:id?action=save|restore|erase through the real server and engine on
// stories260k (llama-server's request and response shapes): a slot's tokens and KV go to a
// file under --slot-save-path and come back, reproducing the same continuation from the
// restored prefix (cached_tokens shows it was used), from a version 1 file (f32 KV,
// converted to the f16 cache) as well; erase clears the slot's cache; a file of another
// model, a damaged one or one of a later version is refused; file names stay inside the directory;
// without --slot-save-path the actions answer 501 naming it. A request's id_slot runs it in
// that slot (queued until the slot is free), so the actions act on what it left there.
// A slot also owns its sliding-window layers' rings (a Mistral checkpoint below, served with
// and without --swa-full): what they hold decides which cached prefix a request in the slot
// may start from, and slot files carry their last window.
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { PromptCacheStats } from '../src/engine/prompt-cache.js';
import { f16ToF32 } from '../src/models/half.js';
import { useLive, useServer, type LiveServer } from './helpers/live-server.js';
import { TEST_BACKEND } from './helpers/model-harness.js';
import { ORACLE_STORY } from './helpers/oracle-cases.js';
import { makeRandomCheckpoint, type RandomCheckpointOptions } from './helpers/random-checkpoint.js';
import { waitFor } from './helpers/server-load.js';
import { storiesCases } from './helpers/stories-expected.js';

const STORY = storiesCases[0]!.expected_token_ids;
const prompt = (from: number, n: number) => [1, ...STORY.slice(from, from + n)];

const dir = mkdtempSync(join(tmpdir(), 'mlxcel-slots-'));
const live = useLive({ model: 'models/stories260k', engine: { parallel: 2 }, server: { slotSavePath: dir } });
const bare = useServer(live);

afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

async function complete(body: Record<string, unknown>): Promise<{ content: string; tokens_cached: number; timings: { prompt_n: number } }> {
  const res = await live.post('/completion', { temperature: 0, n_predict: 16, ...body });
  expect(res.status).toBe(200);
  return res.body as never;
}

/** A slot file of f16 keys and values (a transformer's: every layer paged, no state) rewritten as version 1 (one f32 dtype for both). */
function asVersion1(file: Buffer): Buffer {
  const jsonEnd = 16 + file.readUInt32LE(12);
  const { k_dtype, v_dtype, ...header } = JSON.parse(file.toString('utf8', 16, jsonEnd)) as Record<string, unknown>;
  expect([k_dtype, v_dtype]).toEqual(['f16', 'f16']);
  const json = Buffer.from(JSON.stringify({ ...header, dtype: 'f32' }));
  const head = Buffer.alloc(16);
  file.copy(head, 0, 0, 8);
  head.writeUInt32LE(1, 8);
  head.writeUInt32LE(json.length, 12);
  const ids = file.subarray(jsonEnd, jsonEnd + 4 * (header.tokens as number));
  const halves = new Uint8Array(file.subarray(jsonEnd + ids.length));
  const kv = f16ToF32(new Uint16Array(halves.buffer));
  return Buffer.concat([head, json, ids, Buffer.from(kv.buffer)]);
}

async function stats(): Promise<PromptCacheStats> {
  return (await (await fetch(`${live.url}/v1/cache/stats`)).json()) as PromptCacheStats;
}

describe('slot save, erase, restore', () => {
  it('reproduces the same continuation from the restored slot, whose prefix is served from the file', async () => {
    await live.post('/v1/cache/reset');
    const p = prompt(0, 50); // 51 tokens
    const original = await complete({ prompt: p });
    const written = p.length + 15; // the prompt and the generated tokens fed back

    const saved = await live.post('/slots/0?action=save', { filename: 'story.bin' });
    expect(saved.status).toBe(200);
    const size = statSync(join(dir, 'story.bin')).size;
    expect(saved.body).toEqual({ id_slot: 0, filename: 'story.bin', n_saved: written, n_written: size, timings: { save_ms: expect.any(Number) } });
    // Header, token ids, and f16 keys and values (the default cache type) of 5 layers x 32 dims per position.
    expect(size).toBeGreaterThan(written * (4 + 5 * 2 * 32 * 2));
    expect(size).toBeLessThan(written * (4 + 5 * 2 * 32 * 4));

    expect((await live.post('/slots/0?action=erase')).body).toEqual({ id_slot: 0, n_erased: written });
    expect((await stats()).entries).toBe(0);
    expect((await live.post('/slots/0?action=erase')).body).toEqual({ id_slot: 0, n_erased: 0 });

    const restored = await live.post('/slots/0?action=restore', { filename: 'story.bin' });
    expect(restored.status).toBe(200);
    expect(restored.body).toEqual({ id_slot: 0, filename: 'story.bin', n_restored: written, n_read: size, timings: { restore_ms: expect.any(Number) } });
    expect((await stats()).entries).toBe(Math.ceil(written / 16));

    // The same request: every prompt token but the last comes from the restored KV.
    const again = await complete({ prompt: p });
    expect(again.tokens_cached).toBe(p.length - 1);
    expect(again.timings.prompt_n).toBe(1);
    expect(again.content).toBe(original.content);
    // An extension of it reuses the whole prompt, and matches its cold output.
    const extended = [...p, 5, 6, 7];
    const warm = await complete({ prompt: extended });
    expect(warm.tokens_cached).toBe(p.length);
    expect(warm.content).toBe((await complete({ prompt: extended, cache_prompt: false })).content);

    // The same slot as a version 1 file (f32 keys and values): converted to the f16 cache on
    // restore, exactly the KV the f16 file held.
    writeFileSync(join(dir, 'story-v1.bin'), asVersion1(readFileSync(join(dir, 'story.bin'))));
    await live.post('/v1/cache/reset');
    expect((await live.post('/slots/0?action=restore', { filename: 'story-v1.bin' })).body).toMatchObject({ n_restored: written });
    const fromV1 = await complete({ prompt: p });
    expect(fromV1.tokens_cached).toBe(p.length - 1);
    expect(fromV1.content).toBe(original.content);
  });

  it('refuses a file of another model or a damaged one with 400, and restores nothing', async () => {
    await complete({ prompt: prompt(10, 30) });
    expect((await live.post('/slots/0?action=save', { filename: 'good.bin' })).status).toBe(200);
    const good = readFileSync(join(dir, 'good.bin'));
    // Another model: the identity in the header differs (same length, one hex digit changed).
    const text = good.toString('latin1');
    const at = text.indexOf('"model":"') + 9;
    const other = Buffer.from(good);
    other[at] = other[at] === 0x30 ? 0x31 : 0x30;
    writeFileSync(join(dir, 'other.bin'), other);
    writeFileSync(join(dir, 'short.bin'), good.subarray(0, good.length - 8));
    writeFileSync(join(dir, 'junk.bin'), 'not a slot file');
    const future = Buffer.from(good);
    future.writeUInt32LE(9, 8);
    writeFileSync(join(dir, 'future.bin'), future);
    await live.post('/v1/cache/reset');
    const cases: Array<[string, RegExp]> = [
      ['other.bin', /saved from another model/],
      ['short.bin', /truncated/],
      ['junk.bin', /not a slot file/],
      ['future.bin', /slot file version 9, this server reads 1 to 3/],
      ['missing.bin', /no slot file "missing.bin"/],
    ];
    for (const [filename, message] of cases) {
      const res = await live.post('/slots/0?action=restore', { filename });
      expect(res.status, filename).toBe(400);
      expect((res.body.error as { type: string; message: string }).type).toBe('invalid_request_error');
      expect((res.body.error as { message: string }).message, filename).toMatch(message);
    }
    expect((await stats()).entries).toBe(0);
  });

  it('keeps file names inside the directory and checks the slot, the action and the body', async () => {
    const bad: Array<[string, unknown, string]> = [
      ['/slots/0?action=save', { filename: '../escape.bin' }, 'Invalid filename'],
      ['/slots/0?action=save', { filename: 'a/b.bin' }, 'Invalid filename'],
      ['/slots/0?action=restore', { filename: 'a\\b.bin' }, 'Invalid filename'],
      ['/slots/0?action=save', { filename: '..' }, 'Invalid filename'],
      ['/slots/0?action=save', { filename: '' }, 'Invalid filename'],
      ['/slots/0?action=save', {}, 'filename is required'],
      ['/slots/0?action=save', { filename: 7 }, 'filename must be string'],
      ['/slots/2?action=save', { filename: 'x.bin' }, 'Invalid slot ID'],
      ['/slots/x?action=erase', undefined, 'Invalid slot ID'],
      ['/slots/0?action=load', { filename: 'x.bin' }, 'Invalid action: action must be save, restore or erase'],
      ['/slots/0', { filename: 'x.bin' }, 'Invalid action: action must be save, restore or erase'],
    ];
    for (const [path, body, message] of bad) {
      const res = await live.post(path, body);
      expect(res.status, path).toBe(400);
      expect(res.body, path).toEqual({ error: { message, type: 'invalid_request_error', code: null } });
    }
  });
});

describe('id_slot', () => {
  /** The tokens a slot's cache holds, as a save reports them. */
  const held = async (slot: number) => (await live.post(`/slots/${slot}?action=save`, { filename: `held-${slot}.bin` })).body.n_saved;
  const slotStates = async () => ((await (await fetch(`${live.url}/slots`)).json()) as Array<{ state: string }>).map((s) => s.state);

  it('runs the request in the slot it names, on every route that has it, so save and erase act on what it left (llama-server)', async () => {
    await live.post('/v1/cache/reset');
    for (const slot of [0, 1]) await live.post(`/slots/${slot}?action=erase`);
    // The prompt and every generated token but the last have KV in the slot's cache.
    await complete({ prompt: prompt(0, 20), n_predict: 8, id_slot: 1 });
    expect(await held(0)).toBe(0);
    expect(await held(1)).toBe(21 + 7);
    expect((await live.post('/slots/1?action=erase')).body).toEqual({ id_slot: 1, n_erased: 28 });
    // -1, as absent, is any slot: the first free one.
    await complete({ prompt: prompt(30, 10), n_predict: 4, id_slot: -1 });
    expect([await held(0), await held(1)]).toEqual([11 + 3, 0]);
    // The OpenAI routes take it as an extension field (the SDK's extra body).
    const text = await live.openai.completions.create({ model: 'stories260k', prompt: prompt(40, 12), max_tokens: 5, temperature: 0, id_slot: 1 } as OpenAI.CompletionCreateParamsNonStreaming);
    expect(text.usage?.completion_tokens).toBe(5);
    expect(await held(1)).toBe(13 + 4);
    const chat = await live.openai.chat.completions.create({ model: 'stories260k', messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 3, temperature: 0, id_slot: 1 } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    expect(await held(1)).toBe(chat.usage!.prompt_tokens + 2);
    const response = await live.openai.responses.create({ model: 'stories260k', input: 'Lily wanted to', max_output_tokens: 2, temperature: 0, id_slot: 1 } as OpenAI.Responses.ResponseCreateParamsNonStreaming);
    expect(await held(1)).toBe(response.usage!.input_tokens + 1);
    expect(await held(0)).toBe(11 + 3);
    // Erased, then restored from its file, slot 1 serves the same prompt from its KV again.
    const p = prompt(100, 14);
    await complete({ prompt: p, n_predict: 2, id_slot: 1 });
    expect(await held(1)).toBe(16);
    expect((await live.post('/slots/1?action=erase')).body).toMatchObject({ n_erased: 16 });
    expect((await live.post('/slots/1?action=restore', { filename: 'held-1.bin' })).body).toMatchObject({ id_slot: 1, n_restored: 16 });
    expect((await complete({ prompt: p, n_predict: 2, id_slot: 1 })).tokens_cached).toBe(14);
  });

  it('n_cmpl 2: the first completion runs in the named slot, the other in a free one (llama-server\'s child tasks)', async () => {
    for (const slot of [0, 1]) await live.post(`/slots/${slot}?action=erase`);
    const res = await live.post('/completion', { prompt: prompt(60, 9), n_predict: 4, temperature: 0, n_cmpl: 2, id_slot: 1 });
    expect(res.status).toBe(200);
    expect(res.body).toHaveLength(2);
    expect([await held(0), await held(1)]).toEqual([10 + 3, 10 + 3]);
  });

  it('waits for a busy slot while the other slot serves others; a cancelled waiting request leaves nothing behind', async () => {
    // A long generation holds slot 1.
    const long = new AbortController();
    const running = await fetch(`${live.url}/completion`, {
      method: 'POST',
      body: JSON.stringify({ prompt: prompt(0, 8), n_predict: 400, ignore_eos: true, temperature: 0, stream: true, id_slot: 1 }),
      signal: long.signal,
    });
    const reader = running.body!.getReader();
    await reader.read();
    expect(await slotStates()).toEqual(['idle', 'decoding']);
    // A request for slot 1 queues behind it...
    const waiting = live.post('/completion', { prompt: prompt(70, 6), n_predict: 3, temperature: 0, id_slot: 1 });
    await waitFor(async () => (await slotStates()).length === 3, 10_000, 'the request for slot 1 queued');
    expect(await slotStates()).toEqual(['idle', 'decoding', 'queued']);
    // ...while one that names no slot runs in slot 0 at once.
    expect((await live.post('/completion', { prompt: prompt(80, 6), n_predict: 2, temperature: 0 })).status).toBe(200);
    // A second waiting request, cancelled by its client, leaves the queue.
    const gone = new AbortController();
    const cancelled = fetch(`${live.url}/completion`, { method: 'POST', body: JSON.stringify({ prompt: prompt(90, 6), n_predict: 3, id_slot: 1 }), signal: gone.signal }).catch((e: Error) => e.name);
    await waitFor(async () => (await slotStates()).length === 4, 10_000, 'the second request for slot 1 queued');
    gone.abort();
    expect(await cancelled).toBe('AbortError');
    await waitFor(async () => (await slotStates()).length === 3, 10_000, 'the cancelled request left the queue');
    // The long one ends; the waiting one takes slot 1 and completes, and every slot is free again.
    long.abort();
    await reader.cancel().catch(() => {});
    expect((await waiting).status).toBe(200);
    await waitFor(async () => (await slotStates()).every((s) => s === 'idle'), 10_000, 'every slot idle');
    expect(await held(1)).toBe(7 + 2);
  });

  it('refuses a slot the server does not have, or an id_slot that is not an integer >= -1, in each API\'s envelope', async () => {
    const cases: Array<[string, Record<string, unknown>]> = [
      ['/completion', { prompt: 'Once upon a time', n_predict: 2 }],
      ['/completions', { prompt: 'Once upon a time', n_predict: 2 }],
      ['/v1/completions', { prompt: 'Once upon a time', max_tokens: 2 }],
      ['/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2 }],
      ['/v1/responses', { input: 'Hi', max_output_tokens: 2 }],
    ];
    const refusals: Array<[unknown, string]> = [
      [2, 'id_slot 2 does not exist: the slots are 0 to 1 (-1 for any)'],
      [1.5, 'id_slot must be integer'],
      ['1', 'id_slot must be integer'],
      [-2, 'id_slot must be >= -1'],
    ];
    for (const [path, body] of cases) {
      for (const [idSlot, message] of refusals) {
        const res = await live.post(path, { ...body, id_slot: idSlot });
        expect(res.status, `${path} ${idSlot}`).toBe(400);
        expect(res.body.error, `${path} ${idSlot}`).toMatchObject({ message, type: 'invalid_request_error' });
      }
    }
    const infill = await live.post('/infill', { input_prefix: 'a', id_slot: 0.5 });
    expect(infill.body.error).toMatchObject({ message: 'Invalid infill request: id_slot must be integer' });
    expect(await slotStates()).toEqual(['idle', 'idle']);
  });
});

describe('without --slot-save-path', () => {
  it('answers 501 naming the flag, for every action', async () => {
    for (const action of ['save', 'restore', 'erase']) {
      const res = await bare.post(`/slots/0?action=${action}`, { filename: 'x.bin' });
      expect(res.status).toBe(501);
      expect(res.body).toEqual({ error: { message: 'This server does not support slots action. Start it with `--slot-save-path`', type: 'not_supported_error', code: null } });
    }
    // GET /slots is on all the same.
    expect((await fetch(`${bare.url}/slots`)).status).toBe(200);
  });
});

// The engine's ring layout through the server: a Mistral checkpoint (window 8) served twice
// from one directory with --batch-size 4, so each layer keeps a ring of 11 positions per
// slot, and with --swa-full, every position. Each request runs several windows past the
// ring, and both servers must answer with the same tokens: after the prompt cache reused a
// prefix longer than the window, through speculative rounds whose rejected drafts overwrote
// ring rows, for n > 1 forks, after a context shift, and from a restored slot file.
describe('ring KV layers through the server', () => {
  const WINDOW = 8;
  const CHUNK = 4;
  const base: RandomCheckpointOptions = { arch: 'mistral', tokenizer: 'stories', hidden: 64, layers: 2, heads: 4, kvHeads: 2, headDim: 16, intermediate: 128, seed: 12 };
  const model = mkdtempSync(join(tmpdir(), 'mlxcel-ring-'));
  const slots = mkdtempSync(join(tmpdir(), 'mlxcel-ring-slots-'));
  const drafter = mkdtempSync(join(tmpdir(), 'mlxcel-ring-drafter-'));
  makeRandomCheckpoint({ ...base, extraConfig: { sliding_window: WINDOW } }, model);
  // A draft model of other random weights: most of its drafts are rejected.
  makeRandomCheckpoint({ ...base, seed: 13 }, drafter);
  const engine = { backend: TEST_BACKEND, parallel: 2, batchSize: CHUNK, contextSize: 2 * 64, speculative: { kind: 'draft-model', draftModel: drafter, nMax: 3, nMin: 0, ngram: 3, adaptive: false } } as const;
  const server = { slotSavePath: slots, sampling: { context_shift: true } };
  const ring = useLive({ model, engine, server });
  const full = useLive({ model, engine: { ...engine, swaFull: true }, server });
  const both = [ring, full];
  afterAll(() => {
    for (const d of [model, drafter, slots]) rmSync(d, { recursive: true, force: true });
  });

  /** /completion on `live`, greedy: its body. */
  const complete = async (live: LiveServer, body: Record<string, unknown>) => {
    const res = await live.post('/completion', { temperature: 0, return_tokens: true, ...body });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return res.body as { tokens: number[]; tokens_cached: number; truncated: boolean; timings: { draft_n: number; draft_n_accepted: number } };
  };
  let story: number[];
  beforeAll(async () => {
    story = (await ring.post('/tokenize', { content: ORACLE_STORY, add_special: true })).body.tokens;
  });

  it('the prompt cache reuses a prefix past the window in the slot whose rings hold it', async () => {
    const first = await Promise.all(both.map((live) => complete(live, { prompt: story, n_predict: 12, id_slot: 0 })));
    expect(first[0]!.tokens).toEqual(first[1]!.tokens);
    const next = [...story, ...first[0]!.tokens, ...story.slice(1, 9)];
    const again = await Promise.all(both.map((live) => complete(live, { prompt: next, n_predict: 8, id_slot: 0 })));
    expect(again[0]!.tokens).toEqual(again[1]!.tokens);
    expect(again[0]!.tokens_cached).toBeGreaterThan(story.length);
    // Slot 1's rings hold nothing of it: the whole prompt is prefilled, to the same tokens.
    const other = await complete(ring, { prompt: next, n_predict: 8, id_slot: 1 });
    expect(other.tokens_cached).toBe(0);
    expect(other.tokens).toEqual(again[0]!.tokens);
  });

  it('speculative rounds, n > 1 forks and a context shift give the same tokens', async () => {
    const spec = await Promise.all(both.map((live) => complete(live, { prompt: story, n_predict: 16, cache_prompt: false })));
    expect(spec[0]!.tokens).toEqual(spec[1]!.tokens);
    expect(spec[0]!.timings.draft_n).toBeGreaterThan(spec[0]!.timings.draft_n_accepted);
    const forks = await Promise.all(both.map(async (live) => (await live.post('/v1/completions', { prompt: story, n: 2, max_tokens: 12, temperature: 1, seed: 7 })).body.choices.map((c: { text: string }) => c.text)));
    expect(forks[0]).toEqual(forks[1]);
    const shifted = await Promise.all(both.map((live) => complete(live, { prompt: story, n_predict: 40, cache_prompt: false })));
    expect(shifted[0]!.truncated).toBe(true);
    expect(shifted[0]!.tokens).toEqual(shifted[1]!.tokens);
  });

  it('a slot file restores the rings, and one saved with every position kept (or as version 2) restores into them', async () => {
    const prompt = story;
    const [saved] = await Promise.all(both.map((live) => complete(live, { prompt, n_predict: 10, id_slot: 0 })));
    const next = [...prompt, ...saved!.tokens, ...story.slice(1, 6)];
    const expected = await complete(full, { prompt: next, n_predict: 8, cache_prompt: false, id_slot: 1 });
    expect((await ring.post('/slots/0?action=save', { filename: 'ring.bin' })).status).toBe(200);
    expect((await full.post('/slots/0?action=save', { filename: 'full.bin' })).status).toBe(200);
    const header = (file: string) => {
      const data = readFileSync(join(slots, file));
      return { version: data.readUInt32LE(8), json: JSON.parse(data.toString('utf8', 16, 16 + data.readUInt32LE(12))) as Record<string, unknown> };
    };
    expect(header('ring.bin')).toMatchObject({ version: 3, json: { kv_layout: 'rr', ring_tokens: WINDOW } });
    expect(header('full.bin')).toMatchObject({ version: 3, json: { kv_layout: 'pp', ring_tokens: 0 } });
    writeFileSync(join(slots, 'v2.bin'), asVersion2(readFileSync(join(slots, 'full.bin'))));
    for (const file of ['ring.bin', 'full.bin', 'v2.bin']) {
      // Another prompt overwrites slot 0's rings and the cache's copy of the saved one.
      await complete(ring, { prompt: story.slice(0, 30).reverse(), n_predict: 4, id_slot: 0 });
      expect((await ring.post('/slots/0?action=erase')).status).toBe(200);
      expect((await ring.post('/slots/0?action=restore', { filename: file })).body).toMatchObject({ n_restored: prompt.length + saved!.tokens.length - 1 });
      const restored = await complete(ring, { prompt: next, n_predict: 8, id_slot: 0 });
      expect(restored.tokens_cached, file).toBeGreaterThan(prompt.length);
      expect(restored.tokens, file).toEqual(expected.tokens);
    }
  });
});

/** A version 3 slot file of paged layers as version 2 wrote it: the same bytes, a header without the layout fields. */
function asVersion2(v3: Buffer): Buffer {
  const jsonEnd = 16 + v3.readUInt32LE(12);
  const { kv_layout: _layout, ring_tokens: _rings, ...header } = JSON.parse(v3.toString('utf8', 16, jsonEnd)) as Record<string, unknown>;
  const json = Buffer.from(JSON.stringify(header));
  const head = Buffer.from(v3.subarray(0, 16));
  head.writeUInt32LE(2, 8);
  head.writeUInt32LE(json.length, 12);
  return Buffer.concat([head, json, v3.subarray(jsonEnd)]);
}
