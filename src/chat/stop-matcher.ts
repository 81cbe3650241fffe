// Finds stop strings in streamed text whose pieces split a stop string anywhere. Text
// that could still be the start of a stop string is held back, so a client never sees
// part of a stop string; it is released as soon as the next text rules the stop out.

export interface StopMatch {
  /** Text that is now safe to emit. */
  text: string;
  /** The stop string found; the text after it (and itself) is dropped. */
  stop?: string;
}

export class StopMatcher {
  private readonly stops: string[];
  private held = '';

  constructor(stops: readonly string[]) {
    // An empty stop string would match at once; OpenAI and llama-server ignore it.
    this.stops = stops.filter((s) => s.length > 0);
  }

  push(piece: string): StopMatch {
    const buffer = this.held + piece;
    let first: { index: number; stop: string } | undefined;
    for (const stop of this.stops) {
      const index = buffer.indexOf(stop);
      if (index >= 0 && (first === undefined || index < first.index)) first = { index, stop };
    }
    if (first) {
      this.held = '';
      return { text: buffer.slice(0, first.index), stop: first.stop };
    }
    const keep = this.partialStopLength(buffer);
    this.held = buffer.slice(buffer.length - keep);
    return { text: buffer.slice(0, buffer.length - keep) };
  }

  /** At the end of generation held text was not a stop after all. */
  flush(): string {
    const text = this.held;
    this.held = '';
    return text;
  }

  /** Length of the longest suffix of `buffer` that is a proper prefix of some stop string. */
  private partialStopLength(buffer: string): number {
    let longest = 0;
    for (const stop of this.stops) {
      for (let n = Math.min(stop.length - 1, buffer.length); n > longest; n--) {
        if (buffer.endsWith(stop.slice(0, n))) {
          longest = n;
          break;
        }
      }
    }
    return longest;
  }
}
