// Prompt lookup: the cheapest drafter. When the last few tokens of a sequence occurred
// before in it (the prompt or the text generated so far), the tokens that followed them
// then are a guess at what follows now. Text that copies from its prompt (a rewrite, a
// quote, code being edited) continues along such matches for many tokens at a time.

/**
 * Up to `max` tokens drafted after `tokens`: what followed the most recent earlier
 * occurrence of its longest suffix of `ngram` down to `minNgram` tokens. [] when no suffix recurs.
 */
export function promptLookup(tokens: readonly number[], ngram: number, minNgram: number, max: number): number[] {
  const len = tokens.length;
  for (let n = Math.min(ngram, len - 1); n >= minNgram; n--) {
    const tail = len - n;
    // Most recent first: the freshest context is the likeliest to continue the same way.
    for (let start = tail - 1; start >= 0; start--) {
      let k = 0;
      while (k < n && tokens[start + k] === tokens[tail + k]) k++;
      if (k < n) continue;
      return tokens.slice(start + n, Math.min(start + n + max, len));
    }
  }
  return [];
}
