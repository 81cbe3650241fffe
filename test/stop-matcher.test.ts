import { describe, expect, it } from 'vitest';
import { StopMatcher } from '../src/chat/stop-matcher.js';

/** Feeds pieces; returns what was emitted and the stop found. */
function run(stops: string[], pieces: string[]): { emitted: string[]; stop?: string; rest: string } {
  const m = new StopMatcher(stops);
  const emitted: string[] = [];
  for (const piece of pieces) {
    const r = m.push(piece);
    emitted.push(r.text);
    if (r.stop !== undefined) return { emitted, stop: r.stop, rest: '' };
  }
  return { emitted, rest: m.flush() };
}

describe('StopMatcher', () => {
  it('passes text through when there are no stop strings', () => {
    expect(run([], ['a', 'b'])).toEqual({ emitted: ['a', 'b'], rest: '' });
  });

  it('finds a stop inside one piece and drops it and what follows', () => {
    expect(run(['STOP'], ['abcSTOPdef'])).toEqual({ emitted: ['abc'], stop: 'STOP', rest: '' });
  });

  it('finds a stop split across pieces without emitting any part of it', () => {
    const r = run(['little girl'], [' there was a lit', 'tle', ' gi', 'rl named']);
    expect(r.stop).toBe('little girl');
    expect(r.emitted.join('')).toBe(' there was a ');
    expect(r.emitted.join('')).not.toContain('lit');
  });

  it('holds a partial match back and releases it when it is not a stop', () => {
    const r = run(['\n\n'], ['one\n', 'two']);
    expect(r.emitted).toEqual(['one', '\ntwo']);
    expect(r.stop).toBeUndefined();
  });

  it('releases held text at the end of generation', () => {
    expect(run(['User:'], ['hello Us'])).toEqual({ emitted: ['hello '], rest: 'Us' });
  });

  it('picks the earliest of several stops', () => {
    expect(run(['world', 'lo'], ['hello world']).stop).toBe('lo');
    expect(run(['world', 'lo'], ['hello world']).emitted).toEqual(['hel']);
  });

  it('handles a stop string that repeats its own prefix ("aab" in "aaab")', () => {
    const r = run(['aab'], ['a', 'a', 'a', 'b']);
    expect(r.emitted.join('')).toBe('a');
    expect(r.stop).toBe('aab');
  });

  it('ignores empty stop strings', () => {
    expect(run([''], ['abc'])).toEqual({ emitted: ['abc'], rest: '' });
  });
});
