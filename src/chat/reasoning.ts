// Separates a reasoning block (<think>…</think> and its relatives) from the answer while
// the text streams. The block is reasoning only where a template puts it: opened by the
// generation prompt itself, or as the very first thing the model writes. Tags split across
// tokens are held back; the newlines around the tags are layout and are dropped.
import { partialSuffix } from './tool-calls/markers.js';
import type { ThinkTags } from './tool-calls/registry.js';

export interface ReasoningSplit {
  reasoning: string;
  content: string;
}

type State = 'start' | 'reasoning' | 'afterClose' | 'content';

/** Whether the rendered prompt leaves a reasoning block open for the model to continue. */
export function promptOpensReasoning(prompt: string, tags: ThinkTags): boolean {
  const open = prompt.lastIndexOf(tags.open);
  return open >= 0 && open > prompt.lastIndexOf(tags.close) && prompt.slice(open + tags.open.length).trim() === '';
}

export class ReasoningSplitter {
  private state: State;
  private buffer = '';
  /** Reasoning began (its leading layout is dropped until then). */
  private reasoningStarted = false;

  constructor(
    private readonly tags: ThinkTags,
    startsInside: boolean,
  ) {
    this.state = startsInside ? 'reasoning' : 'start';
  }

  /** The block was opened and not yet closed. */
  get inReasoning(): boolean {
    return this.state === 'reasoning';
  }

  push(text: string): ReasoningSplit {
    this.buffer += text;
    return this.drain(false);
  }

  /** `atLimit`: the generation stopped at its token limit, so a tag cut short is markup, not text. */
  finish(atLimit = false): ReasoningSplit {
    const out = this.drain(true, atLimit);
    if (this.state === 'reasoning') {
      // An unclosed block (max_tokens hit): its trailing layout goes with it.
      const cut = atLimit ? partialSuffix(this.buffer, [this.tags.close]) : 0;
      out.reasoning += this.reasoningText(this.buffer.slice(0, this.buffer.length - cut).trimEnd());
    } else {
      out.content += this.buffer;
    }
    this.buffer = '';
    return out;
  }

  private reasoningText(text: string): string {
    if (!this.reasoningStarted) {
      text = text.replace(/^\s+/, '');
      if (text) this.reasoningStarted = true;
    }
    return text;
  }

  private drain(final: boolean, atLimit = false): ReasoningSplit {
    const out: ReasoningSplit = { reasoning: '', content: '' };
    for (;;) {
      switch (this.state) {
        case 'start': {
          const trimmed = this.buffer.trimStart();
          if (trimmed.startsWith(this.tags.open)) {
            this.buffer = trimmed.slice(this.tags.open.length);
            this.state = 'reasoning';
            continue;
          }
          // Only whitespace or part of the tag so far: wait and see (cut short by the limit, it is dropped).
          if (this.tags.open.startsWith(trimmed)) {
            if (!final) return out;
            if (atLimit) {
              this.buffer = '';
              return out;
            }
          }
          this.state = 'content';
          continue;
        }
        case 'reasoning': {
          const close = this.buffer.indexOf(this.tags.close);
          if (close >= 0) {
            out.reasoning += this.reasoningText(this.buffer.slice(0, close).trimEnd());
            this.buffer = this.buffer.slice(close + this.tags.close.length);
            this.state = 'afterClose';
            continue;
          }
          if (final) return out;
          // Hold a partial closing tag, and trailing layout that may precede it.
          let keep = this.buffer.length - partialSuffix(this.buffer, [this.tags.close]);
          while (keep > 0 && /\s/.test(this.buffer[keep - 1]!)) keep--;
          out.reasoning += this.reasoningText(this.buffer.slice(0, keep));
          this.buffer = this.buffer.slice(keep);
          return out;
        }
        case 'afterClose': {
          this.buffer = this.buffer.replace(/^\s+/, '');
          if (this.buffer === '') return out;
          this.state = 'content';
          continue;
        }
        case 'content':
          out.content += this.buffer;
          this.buffer = '';
          return out;
      }
    }
  }
}
