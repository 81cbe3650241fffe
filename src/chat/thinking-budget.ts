// Caps reasoning at a number of tokens, as llama-server's reasoning budget does: the
// tokens inside the reasoning block are counted, and when the budget is spent the block
// is closed by forcing its closing tag (after an optional message) token by token. It is a
// TokenConstraint, so the engine needs nothing else: "forcing" is a mask that allows one
// token. Outside the forced stretch it allows everything.
import type { TokenConstraint } from '../engine/types.js';

export interface ThinkingBudgetOptions {
  /** Reasoning tokens allowed before the block is closed. */
  budget: number;
  /** Text that opens the block (it may also come from the prompt: `startsInside`). */
  open: string;
  /** Text that closes it; its appearance ends the counting. */
  close: string;
  /** Token ids forced when the budget is spent: the message, then the closing text. */
  forced: readonly number[];
  startsInside: boolean;
  vocabSize: number;
  /** One token's text, to see the tags whatever tokens spell them. */
  piece: (id: number) => string;
}

type State = 'before' | 'thinking' | 'forcing' | 'done';

/** Text kept to match tags across token boundaries. */
const TAIL = 64;

export class ThinkingBudget implements TokenConstraint {
  private state: State;
  private used = 0;
  private forcedAt = 0;
  private tail = '';

  constructor(private readonly options: ThinkingBudgetOptions) {
    this.state = options.startsInside ? 'thinking' : 'before';
  }

  /** Reasoning tokens counted so far. */
  get reasoningTokens(): number {
    return this.used;
  }

  allowed(): Uint32Array | undefined {
    if (this.state === 'thinking' && this.used >= this.options.budget) this.state = 'forcing';
    if (this.state !== 'forcing') return undefined;
    const id = this.options.forced[this.forcedAt]!;
    const mask = new Uint32Array(Math.ceil(this.options.vocabSize / 32));
    mask[id >>> 5] = 1 << (id & 31);
    return mask;
  }

  accept(token: number): void {
    this.tail = (this.tail + this.options.piece(token)).slice(-TAIL);
    switch (this.state) {
      case 'before':
        if (this.tail.includes(this.options.open)) {
          this.state = 'thinking';
          this.tail = this.tail.slice(this.tail.indexOf(this.options.open) + this.options.open.length);
        }
        return;
      case 'thinking':
        if (this.tail.includes(this.options.close)) this.state = 'done';
        else this.used++;
        return;
      case 'forcing':
        if (++this.forcedAt >= this.options.forced.length) this.state = 'done';
        return;
      case 'done':
        return;
    }
  }
}
