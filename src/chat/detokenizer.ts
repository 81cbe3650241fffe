// Streams text for a growing token sequence. Decoding tokens one by one is wrong for
// most tokenizers (SentencePiece decoders strip a leading space of the whole string, byte
// tokens form characters only together), so every delta is the difference of two decodes
// over a short sliding window, the scheme vLLM and TGI use. Text ending in U+FFFD is an
// incomplete UTF-8 sequence and is held back until a later token completes it.

/** Prompt tokens kept as left context: enough for decoders that look at neighbours. */
const CONTEXT_TOKENS = 6;

export class IncrementalDetokenizer {
  private readonly tokens: number[];
  /** Start of the decode window. */
  private prefixOffset = 0;
  /** Tokens before this index have been emitted as text. */
  private readOffset: number;

  private readonly decode: (ids: number[]) => string;

  /**
   * `decode` must skip special tokens (or not) consistently. `context` is the prompt:
   * deltas are what its continuation adds, i.e. decode(context + ids) minus decode(context).
   */
  constructor(decode: (ids: number[]) => string, context: readonly number[] = []) {
    // tokenizers.js rejects an empty id list.
    this.decode = (ids) => (ids.length === 0 ? '' : decode(ids));
    let start = Math.max(0, context.length - CONTEXT_TOKENS);
    // A window that decodes to nothing (only special tokens) would make the decoder treat
    // the first generated token as the start of the text and strip its leading space.
    while (start > 0 && this.decode(context.slice(start)) === '') start--;
    this.tokens = context.slice(start);
    this.readOffset = this.tokens.length;
  }

  /** Adds one token; returns the text it completes (often "", never partial characters). */
  push(id: number): string {
    this.tokens.push(id);
    const prefixText = this.decode(this.tokens.slice(this.prefixOffset, this.readOffset));
    const text = this.decode(this.tokens.slice(this.prefixOffset));
    if (text.length <= prefixText.length || text.endsWith('\uFFFD')) return '';
    this.prefixOffset = this.readOffset;
    this.readOffset = this.tokens.length;
    return text.slice(prefixText.length);
  }

  /** Releases held-back text (a U+FFFD the model really produced, or a cut-off character). */
  flush(): string {
    const prefixText = this.decode(this.tokens.slice(this.prefixOffset, this.readOffset));
    const text = this.decode(this.tokens.slice(this.prefixOffset));
    this.prefixOffset = this.readOffset;
    this.readOffset = this.tokens.length;
    return text.slice(prefixText.length);
  }
}
