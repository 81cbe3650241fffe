// Long request texts are tokenized on a worker thread (src/models/tokenizer-worker.ts):
// the same ids as inline, and the event loop keeps turning meanwhile.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TextTokenizer } from '../src/models/tokenizer.js';
import { WORKER_MIN_CHARS } from '../src/models/tokenizer-worker.js';
import { tokenizerDir } from './helpers/random-checkpoint.js';

let qwen: TextTokenizer;

beforeAll(async () => {
  qwen = await TextTokenizer.load(tokenizerDir('qwen3'));
});

afterAll(async () => {
  await qwen?.close();
});

describe('the tokenizer worker', () => {
  it('gives the same ids as inline tokenizing, specials included', async () => {
    const text = '<|im_start|>user\nÉtude: 日本語 👩‍👩‍👧 \n\n  indented\tcode();\n<|im_end|>\n'.repeat(2_000);
    expect(text.length).toBeGreaterThan(WORKER_MIN_CHARS);
    expect(await qwen.encodeAsync(text, false)).toEqual(qwen.encode(text, false));
    expect(await qwen.encodeAsync(text, true)).toEqual(qwen.encode(text, true));
  });

  it('keeps the event loop turning while it works', async () => {
    const text = 'All work and no play makes Jack a dull boy. '.repeat(10_000);
    let ticks = 0;
    const timer = setInterval(() => ticks++, 5);
    const ids = await qwen.encodeAsync(text, false);
    clearInterval(timer);
    expect(ids.length).toBeGreaterThan(80_000);
    // Tokenizing 440 KB takes a few hundred ms; inline, not one tick would fire meanwhile.
    expect(ticks).toBeGreaterThan(10);
  });

  it('serves texts one after another, and after close starts afresh', async () => {
    const texts = ['alpha beta '.repeat(5_000), 'gamma delta '.repeat(5_000), 'épsilon '.repeat(6_000)];
    const all = await Promise.all(texts.map((t) => qwen.encodeAsync(t, false)));
    all.forEach((ids, i) => expect(ids).toEqual(qwen.encode(texts[i]!, false)));
    await qwen.close();
    expect(await qwen.encodeAsync(texts[0]!, false)).toEqual(all[0]);
  });
});
