// Token masks. For a configuration, the allowed tokens are those whose bytes lead the
// automaton somewhere live. Walking the vocabulary trie from scratch each step is too slow
// (150k tokens), so the walk is split the way XGrammar splits it:
//  * per frame (the top of one stack: rule, node, counter) a walk finds the tokens the
//    frame accepts by itself (possibly calling deeper rules) and the trie nodes where the
//    frame can pop with bytes still to come ("dependent" nodes). That depends on the frame
//    alone, not on the stack below it, so it is cached in a global LRU and shared by every
//    grammar: keyed by rule shape, node, and the counter's distance to its bounds, capped
//    (a token cannot count more items than it has bytes);
//  * plain strings, the one place where most of the vocabulary is live, are walked once per
//    node and vocabulary without bounds, recording each token's character count; the frame
//    for any remaining length is then a filter over that list, not a walk;
//  * per step, the frame masks of the configuration's stacks are OR-ed, and only the
//    subtrees under dependent nodes are walked again, from the configuration after the pop
//    (for a string inside an object: the few tokens like `",` or `"}` that close it).
// Whole-step masks are cached per configuration as well.
import { EXIT, HAS_STACKS, universe as U, type Config, type Stack } from './automaton.js';
import { ByteLru } from './lru.js';
import type { Rule } from './nfa.js';
import type { Vocab } from './vocab.js';

/** Bytes of masks the caches may hold across all grammars. */
const CACHE_BUDGET = 128 * 1024 * 1024;

/** A counted rule's frame walked once without bounds: every token with its count. */
interface CountedInfo {
  /** Tokens that stay inside the frame, and the items (characters) each counts. */
  inTok: Int32Array;
  inCnt: Uint8Array;
  /** Tokens that end exactly where the frame pops, and the count there. */
  endTok: Int32Array;
  endCnt: Uint8Array;
  /** Dependent trie nodes, and the count where the frame pops. */
  deps: Int32Array;
  depCnt: Uint8Array;
}

interface FrameInfo {
  /** Tokens the frame accepts on its own: a bitmask, or (when few) a list of ids. */
  dense?: Uint32Array;
  sparse?: Int32Array;
  /** Trie nodes after which the frame can pop and more bytes may follow. */
  deps: Int32Array;
}

const cache = new ByteLru<FrameInfo | Uint32Array | CountedInfo>(CACHE_BUDGET);

/** Counters for tests and benches. */
export const matcherStats = { frameWalks: 0, frameWalkMs: 0, maskMisses: 0, maskHits: 0, maskMs: 0, fallbacks: 0 };

export class Matcher {
  private readonly st: Int32Array;
  private readonly eos: number[];

  constructor(
    readonly root: Rule,
    readonly vocab: Vocab,
    eosIds: readonly number[],
  ) {
    this.st = new Int32Array(vocab.maxTokenBytes + 2);
    this.eos = eosIds.filter((id) => id >= 0 && id < vocab.vocabSize);
  }

  initial(): Config {
    return U.closure([U.stack(this.root, 0, 0, U.bottom)]);
  }

  /** Allowed tokens in `cfg` (current epoch). The array is shared: never modify it. */
  mask(cfg: Config): Uint32Array {
    const key = `m${this.vocab.id}:${U.epoch}:${cfg.id}`;
    const hit = cache.get(key) as Uint32Array | undefined;
    if (hit) {
      matcherStats.maskHits++;
      return hit;
    }
    const t0 = performance.now();
    matcherStats.maskMisses++;
    const mask = new Uint32Array(this.vocab.words);
    for (const s of cfg.stacks) {
      const info = this.frame(s);
      if (info.dense) {
        const d = info.dense;
        for (let i = 0; i < d.length; i++) mask[i]! |= d[i]!;
      } else {
        for (const t of info.sparse!) mask[t >>> 5]! |= 1 << (t & 31);
      }
      if (info.deps.length === 0 || s.parent === U.bottom) continue;
      const after = U.popped(s);
      if (after.stacks.length === 0) continue;
      for (const n of info.deps) this.walk(after.id, n, mask, undefined);
    }
    if (cfg.exit) for (const id of this.eos) mask[id >>> 5]! |= 1 << (id & 31);
    if (cfg.literal) {
      for (const t of this.vocab.literalTokens) if (U.stepLiteral(cfg, t.bytes)) mask[t.id >>> 5]! |= 1 << (t.id & 31);
    }
    if (!mask.some((w) => w !== 0)) {
      // A dead end the compiler could not rule out (say, a pattern whose lengths skip the
      // bounds): end generation rather than sample from nothing.
      matcherStats.fallbacks++;
      for (const id of this.eos) mask[id >>> 5]! |= 1 << (id & 31);
    }
    cache.set(key, mask, mask.byteLength + 64);
    matcherStats.maskMs += performance.now() - t0;
    return mask;
  }

  /** Only the end-of-generation ids. */
  eosMask(): Uint32Array {
    const mask = new Uint32Array(this.vocab.words);
    for (const id of this.eos) mask[id >>> 5]! |= 1 << (id & 31);
    return mask;
  }

  /** The configuration after `token`, or undefined when the token is not allowed. */
  advance(cfg: Config, token: number): Config | undefined {
    const bytes = this.vocab.tokenBytes[token];
    if (bytes) {
      let id = cfg.id;
      for (let i = 0; i < bytes.length && id >= 0; i++) id = U.next(id, bytes[i]!);
      return id >= 0 ? U.configs[id] : undefined;
    }
    const literal = cfg.literal ? this.vocab.literalTokens.find((t) => t.id === token) : undefined;
    return literal ? U.stepLiteral(cfg, literal.bytes) : undefined;
  }

  private frame(s: Stack): FrameInfo {
    const r = s.rule!;
    const c = s.counter;
    const cap = this.vocab.maxTokenBytes + r.distCap + 2;
    const room = r.max === Infinity ? cap : Math.min(r.max - c, cap);
    const need = Math.min(Math.max(r.min - c, 0), cap);
    const key = `f${this.vocab.id}:${r.shape}:${s.node}:${room}:${need}`;
    const hit = cache.get(key) as FrameInfo | undefined;
    if (hit) return hit;
    const t0 = performance.now();
    const mask = new Uint32Array(this.vocab.words);
    const deps: number[] = [];
    if (r.counted) {
      // Derived from the counted walk: no trie walk per counter value.
      const counted = this.counted(r.counted, s.node);
      const { inTok, inCnt, endTok, endCnt, depCnt } = counted;
      for (let i = 0; i < inTok.length; i++) {
        if (inCnt[i]! <= room) mask[inTok[i]! >>> 5]! |= 1 << (inTok[i]! & 31);
      }
      for (let i = 0; i < endTok.length; i++) {
        const k = endCnt[i]!;
        if (k <= room && k >= need) mask[endTok[i]! >>> 5]! |= 1 << (endTok[i]! & 31);
      }
      counted.deps.forEach((n, i) => {
        if (depCnt[i]! <= room && depCnt[i]! >= need) deps.push(n);
      });
    } else {
      const start = U.closure([U.stack(r, s.node, c, U.bottom)]);
      if (start.exit) deps.push(0);
      this.walk(start.id, 0, mask, deps);
    }
    let count = 0;
    for (const w of mask) if (w) count += popcount(w);
    let info: FrameInfo;
    if (count < this.vocab.words) {
      const sparse = new Int32Array(count);
      let k = 0;
      for (let i = 0; i < mask.length; i++) {
        let w = mask[i]!;
        while (w) {
          const bit = 31 - Math.clz32(w & -w);
          sparse[k++] = i * 32 + bit;
          w &= w - 1;
        }
      }
      info = { sparse, deps: Int32Array.from(deps) };
    } else {
      info = { dense: mask, deps: Int32Array.from(deps) };
    }
    cache.set(key, info, (info.dense?.byteLength ?? info.sparse!.byteLength) + deps.length * 4 + 64);
    matcherStats.frameWalks++;
    matcherStats.frameWalkMs += performance.now() - t0;
    return info;
  }

  /**
   * The frame (twin, node) walked with counter 0 and no bounds, recording what each token
   * counts. Valid for rules whose counted edges all lead where the rule can still finish
   * with no further count (plain strings): a token then fits exactly when its count fits.
   */
  private counted(twin: Rule, node: number): CountedInfo {
    const key = `c${this.vocab.id}:${twin.shape}:${node}`;
    const hit = cache.get(key) as CountedInfo | undefined;
    if (hit) return hit;
    const { byte, depth, end, tokStart, tokIds } = this.vocab;
    const inTok: number[] = [];
    const inCnt: number[] = [];
    const endTok: number[] = [];
    const endCnt: number[] = [];
    const deps: number[] = [];
    const depCnt: number[] = [];
    const st = this.st;
    const cnt = new Int32Array(st.length);
    const start = U.closure([U.stack(twin, node, 0, U.bottom)]);
    if (start.exit) {
      deps.push(0);
      depCnt.push(0);
    }
    st[0] = start.id;
    cnt[0] = 0;
    let n = 1;
    while (n < this.vocab.nodes) {
      const d = depth[n]!;
      const c = U.next(st[d - 1]!, byte[n]!);
      if (c < 0) {
        n = end[n]!;
        continue;
      }
      const cfg = U.configs[c]!;
      const inside = cfg.stacks.length > 0;
      const k = inside ? Math.min(...cfg.stacks.map((x) => x.counter)) : cnt[d - 1]!;
      for (let t = tokStart[n]!, e = tokStart[n + 1]!; t < e; t++) {
        (inside ? inTok : endTok).push(tokIds[t]!);
        (inside ? inCnt : endCnt).push(k);
      }
      if (cfg.exit && end[n]! > n + 1) {
        deps.push(n);
        depCnt.push(k);
      }
      if (!inside) {
        n = end[n]!;
        continue;
      }
      st[d] = c;
      cnt[d] = k;
      n++;
    }
    const info: CountedInfo = {
      inTok: Int32Array.from(inTok),
      inCnt: Uint8Array.from(inCnt),
      endTok: Int32Array.from(endTok),
      endCnt: Uint8Array.from(endCnt),
      deps: Int32Array.from(deps),
      depCnt: Uint8Array.from(depCnt),
    };
    cache.set(key, info, inTok.length * 5 + endTok.length * 5 + deps.length * 5 + 64);
    return info;
  }

  /**
   * Walks the trie below node `root` from configuration `startId` (the state after root's
   * bytes), setting the bits of tokens that stay live. With `deps`, records nodes whose
   * configuration can exit while the subtree goes on.
   */
  private walk(startId: number, root: number, mask: Uint32Array, deps: number[] | undefined): void {
    const { byte, depth, end, tokStart, tokIds, tokAt } = this.vocab;
    const st = this.st;
    const base = depth[root]!;
    st[base] = startId;
    const stop = end[root]!;
    let n = root + 1;
    let trans = U.trans;
    let flags = U.flags;
    // The configuration of the node just visited: usually the parent of the next one.
    let prev = startId;
    let prevDepth = base;
    while (n < stop) {
      const d = depth[n]!;
      const from = d === prevDepth + 1 ? prev : st[d - 1]!;
      const b = byte[n]!;
      let c = trans[from * 256 + b]!;
      if (c === -2) {
        c = U.computeNext(from, b);
        // Interning may have grown the tables.
        trans = U.trans;
        flags = U.flags;
      }
      if (c < 0) {
        n = end[n]!;
        continue;
      }
      const t = tokAt[n]!;
      if (t >= 0) mask[t >>> 5]! |= 1 << (t & 31);
      else if (t === -2) {
        for (let k = tokStart[n]!, e = tokStart[n + 1]!; k < e; k++) {
          const id = tokIds[k]!;
          mask[id >>> 5]! |= 1 << (id & 31);
        }
      }
      const f = flags[c]!;
      if (deps !== undefined && (f & EXIT) !== 0 && end[n]! > n + 1) deps.push(n);
      if ((f & HAS_STACKS) === 0) {
        n = end[n]!;
        continue;
      }
      st[d] = c;
      prev = c;
      prevDepth = d;
      n++;
    }
  }
}

function popcount(w: number): number {
  w = w - ((w >>> 1) & 0x55555555);
  w = (w & 0x33333333) + ((w >>> 2) & 0x33333333);
  return (((w + (w >>> 4)) & 0x0f0f0f0f) * 0x01010101) >>> 24;
}
