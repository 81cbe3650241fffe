// A draft model: a smaller model with the target's tokenizer, run by the same engine on a
// KV pool of its own. A round drafts for every drafting sequence at once, one pass per
// draft token: the first pass feeds each sequence the tokens its draft KV lacks (the whole
// prompt the first time, then what the last round kept plus its correction) and samples
// the first draft; each later pass feeds the draft before and samples the next. Drafts
// are greedy (the draft model's argmax under the request's penalties), so the target's
// verification is the deterministic drafter's exact rule. After verification a sequence's
// draft KV is cut back to the positions whose tokens were kept; later rounds overwrite the rest.
import type { ForwardRunner, SampleInput, SeqChunk } from '../forward.js';
import { BlockAllocator } from '../kv-cache.js';
import type { LoadedModel } from '../../models/model.js';
import type { TextTokenizer } from '../../models/tokenizer.js';

/** One sequence's request for drafts this round. */
export interface DraftRequest {
  /** The sequence (its draft KV is kept under this key between rounds). */
  key: object;
  /** Its tokens so far; the last one has no KV yet. */
  tokens: readonly number[];
  /** Drafts wanted. */
  k: number;
  /** The sampler input after `drafted` more tokens (greedy). */
  sample: (drafted: number[]) => SampleInput;
}

interface DraftSeq {
  /** Draft KV blocks, in position order. */
  table: number[];
  /** Leading positions whose draft KV holds the sequence's tokens. */
  written: number;
}

export class DraftModel {
  readonly model: LoadedModel;
  private readonly blocks: BlockAllocator;
  private readonly seqs = new Map<object, DraftSeq>();
  /** Decayed mean of a one-token draft pass's time (ms), once one has run. */
  private passMs: number | undefined;

  constructor(private readonly runner: ForwardRunner) {
    this.model = runner.model;
    const { kv } = runner.model;
    this.blocks = new BlockAllocator(kv.blocks, kv.blockSize);
  }

  /**
   * Each request's drafts (fewer than k, or none, when the first pass has no room for
   * its catch-up or its draft KV runs out).
   */
  async draft(requests: DraftRequest[]): Promise<Map<object, number[]>> {
    const drafts = new Map<object, number[]>();
    let budget = this.runner.model.maxTokens;
    const first: SeqChunk[] = [];
    let drafting: DraftRequest[] = [];
    for (const r of requests) {
      if (budget === 0) break;
      const s = this.state(r.key);
      const start = Math.min(s.written, r.tokens.length - 1);
      const behind = r.tokens.length - start;
      // The last draft is sampled, never fed.
      if (behind > budget || !this.blocks.ensure(s.table, r.tokens.length + r.k - 1)) {
        // Catch up as far as the pass has room; draft in a later round.
        const n = Math.min(budget, behind - 1);
        if (n > 0 && this.blocks.ensure(s.table, start + n)) {
          first.push({ tokens: r.tokens.slice(start, start + n), startPos: start, table: s.table });
          s.written = start + n;
          budget -= n;
        }
        continue;
      }
      first.push({ tokens: r.tokens.slice(start), startPos: start, table: s.table, sample: r.sample([]) });
      s.written = r.tokens.length;
      budget -= behind;
      drafting.push(r);
      drafts.set(r.key, []);
    }
    if (first.length === 0) return drafts;
    let sampled = await this.runner.run(first);
    // Pass `step` feeds draft step - 1 (at position length + step - 1) and samples draft `step`.
    for (let step = 1; ; step++) {
      drafting.forEach((r, i) => drafts.get(r.key)!.push(sampled[i]!.token));
      drafting = drafting.filter((r) => r.k > step);
      if (drafting.length === 0) return drafts;
      const t0 = performance.now();
      sampled = await this.runner.run(drafting.map((r) => {
        const d = drafts.get(r.key)!;
        const s = this.state(r.key);
        s.written++;
        return { tokens: [d[step - 1]!], startPos: r.tokens.length + step - 1, table: s.table, sample: r.sample(d) };
      }));
      const ms = performance.now() - t0;
      this.passMs = this.passMs === undefined ? ms : 0.9 * this.passMs + 0.1 * ms;
    }
  }

  /** What a draft pass costs (ms), once measured: the drafting policy weighs it against a plain step. */
  passCost(): number | undefined {
    return this.passMs;
  }

  /** A verify round over `length` tokens and drafts kept its first `kept` drafts. */
  keep(key: object, length: number, kept: number): void {
    const s = this.seqs.get(key);
    if (s) s.written = Math.min(s.written, length + kept);
  }

  /** The sequence's tokens from `length` on changed (a context shift moved them). */
  truncate(key: object, length: number): void {
    const s = this.seqs.get(key);
    if (s) s.written = Math.min(s.written, length);
  }

  /** The sequence left: its draft KV is free. */
  release(key: object): void {
    const s = this.seqs.get(key);
    if (!s) return;
    this.blocks.release(s.table);
    this.seqs.delete(key);
  }

  private state(key: object): DraftSeq {
    let s = this.seqs.get(key);
    if (!s) this.seqs.set(key, (s = { table: [], written: 0 }));
    return s;
  }
}

/**
 * Why a draft model cannot draft for a target, or undefined when it can: drafts are token
 * ids, so both must number the same vocabulary the same way, special tokens included.
 */
export function tokenizerMismatch(target: TextTokenizer, targetVocab: number, draft: TextTokenizer, draftVocab: number): string | undefined {
  if (draftVocab !== targetVocab) return `its vocabulary has ${draftVocab} tokens, the target's ${targetVocab}`;
  if (draft.vocabSize !== target.vocabSize) return `its tokenizer has ${draft.vocabSize} tokens, the target's ${target.vocabSize}`;
  for (let id = 0; id < target.vocabSize; id++) {
    const [a, b] = [target.idToToken(id), draft.idToToken(id)];
    if (a !== b) return `token ${id} is ${JSON.stringify(b)} in its tokenizer, ${JSON.stringify(a)} in the target's`;
    if (target.isSpecial(id) !== draft.isSpecial(id)) return `token ${id} (${JSON.stringify(a)}) is special in one tokenizer only`;
  }
  return undefined;
}
