// POST /slots/:id?action=save|restore|erase through the real server and engine on
// stories260k (llama-server's request and response shapes): a slot's tokens and KV go to a
// file under --slot-save-path and come back, reproducing the same continuation from the
// restored prefix (cached_tokens shows it was used); erase clears the slot's cache; a file
// of another model, or a damaged one, is refused; file names stay inside the directory;
// without --slot-save-path the actions answer 501 naming it.
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/engine/engine.js';
import { loadEngine } from '../src/engine/load.js';
import type { PromptCacheStats } from '../src/engine/prompt-cache.js';
import { startServer, type RunningServer } from '../src/server/server.js';
import { storiesCases } from './helpers/stories-expected.js';

const STORY = storiesCases[0]!.expected_token_ids;
const prompt = (from: number, n: number) => [1, ...STORY.slice(from, from + n)];

let engine: Engine;
let server: RunningServer;
let bare: RunningServer;
let dir: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'mlxcel-slots-'));
  engine = await loadEngine({ modelDir: 'models/stories260k', parallel: 1 });
  server = await startServer(engine, { host: '127.0.0.1', port: 0, slotSavePath: dir });
  bare = await startServer(engine, { host: '127.0.0.1', port: 0 });
});

afterAll(async () => {
  await server?.close();
  await bare?.close();
  await engine?.close();
  rmSync(dir, { recursive: true, force: true });
});

async function post(url: string, path: string, body?: unknown): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${url}${path}`, { method: 'POST', ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

async function complete(body: Record<string, unknown>): Promise<{ content: string; tokens_cached: number; timings: { prompt_n: number } }> {
  const res = await post(server.url, '/completion', { temperature: 0, n_predict: 16, ...body });
  expect(res.status).toBe(200);
  return res.body as never;
}

async function stats(): Promise<PromptCacheStats> {
  return (await (await fetch(`${server.url}/v1/cache/stats`)).json()) as PromptCacheStats;
}

describe('slot save, erase, restore', () => {
  it('reproduces the same continuation from the restored slot, whose prefix is served from the file', async () => {
    await post(server.url, '/v1/cache/reset');
    const p = prompt(0, 50); // 51 tokens
    const original = await complete({ prompt: p });
    const written = p.length + 15; // the prompt and the generated tokens fed back

    const saved = await post(server.url, '/slots/0?action=save', { filename: 'story.bin' });
    expect(saved.status).toBe(200);
    const size = statSync(join(dir, 'story.bin')).size;
    expect(saved.body).toEqual({ id_slot: 0, filename: 'story.bin', n_saved: written, n_written: size, timings: { save_ms: expect.any(Number) } });
    // Header, token ids, and f32 keys and values of 5 layers x 32 dims per position.
    expect(size).toBeGreaterThan(written * (4 + 5 * 2 * 32 * 4));

    expect((await post(server.url, '/slots/0?action=erase')).body).toEqual({ id_slot: 0, n_erased: written });
    expect((await stats()).entries).toBe(0);
    expect((await post(server.url, '/slots/0?action=erase')).body).toEqual({ id_slot: 0, n_erased: 0 });

    const restored = await post(server.url, '/slots/0?action=restore', { filename: 'story.bin' });
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
  });

  it('refuses a file of another model or a damaged one with 400, and restores nothing', async () => {
    await complete({ prompt: prompt(10, 30) });
    expect((await post(server.url, '/slots/0?action=save', { filename: 'good.bin' })).status).toBe(200);
    const good = readFileSync(join(dir, 'good.bin'));
    // Another model: the identity in the header differs (same length, one hex digit changed).
    const text = good.toString('latin1');
    const at = text.indexOf('"model":"') + 9;
    const other = Buffer.from(good);
    other[at] = other[at] === 0x30 ? 0x31 : 0x30;
    writeFileSync(join(dir, 'other.bin'), other);
    writeFileSync(join(dir, 'short.bin'), good.subarray(0, good.length - 8));
    writeFileSync(join(dir, 'junk.bin'), 'not a slot file');
    await post(server.url, '/v1/cache/reset');
    const cases: Array<[string, RegExp]> = [
      ['other.bin', /saved from another model/],
      ['short.bin', /truncated/],
      ['junk.bin', /not a slot file/],
      ['missing.bin', /no slot file "missing.bin"/],
    ];
    for (const [filename, message] of cases) {
      const res = await post(server.url, '/slots/0?action=restore', { filename });
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
      ['/slots/1?action=save', { filename: 'x.bin' }, 'Invalid slot ID'],
      ['/slots/x?action=erase', undefined, 'Invalid slot ID'],
      ['/slots/0?action=load', { filename: 'x.bin' }, 'Invalid action: action must be save, restore or erase'],
      ['/slots/0', { filename: 'x.bin' }, 'Invalid action: action must be save, restore or erase'],
    ];
    for (const [path, body, message] of bad) {
      const res = await post(server.url, path, body);
      expect(res.status, path).toBe(400);
      expect(res.body, path).toEqual({ error: { message, type: 'invalid_request_error', code: null } });
    }
  });
});

describe('without --slot-save-path', () => {
  it('answers 501 naming the flag, for every action', async () => {
    for (const action of ['save', 'restore', 'erase']) {
      const res = await post(bare.url, `/slots/0?action=${action}`, { filename: 'x.bin' });
      expect(res.status).toBe(501);
      expect(res.body).toEqual({ error: { message: 'This server does not support slots action. Start it with `--slot-save-path`', type: 'not_supported_error', code: null } });
    }
    // GET /slots is on all the same.
    expect((await fetch(`${bare.url}/slots`)).status).toBe(200);
  });
});
