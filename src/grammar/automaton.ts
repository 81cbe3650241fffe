// Running the rules: a pushdown automaton over bytes, determinised lazily. A stack is a
// persistent list of frames (rule, node, counter), interned so equal stacks are one object.
// A configuration is the set of stacks the input so far can be in (anyOf branches, optional
// properties and shared key prefixes make it a set), closed under epsilon moves, calls and
// returns, keeping only stacks that can consume a byte next, plus an `exit` flag: the bottom
// frame can pop (the document, or the frame a mask walk started from, is complete). A stack
// another one subsumes is dropped (see prune): an ambiguous item under a counted repetition
// would otherwise keep one stack per reachable count alive.
// Configurations are interned too and get integer ids; next(id, byte) is memoised in a flat
// table, so once seen, a step is one array read. One universe serves every grammar (rules
// carry their own ids); when it grows past its budget it starts over, and the
// configurations still held are re-interned on their next use.
import type { Rule } from './nfa.js';

export const DEAD = -1;
const UNKNOWN = -2;

/** Configurations before the tables start over (about 1 KiB of transitions each). */
const MAX_CONFIGS = 60_000;

export class Stack {
  /** Closure visit stamp. */
  mark = 0;
  /** The configuration after this frame pops (closure of the parent), once computed. */
  popped: Config | undefined;
  /** Interned id of the stack with every counter at or past its rule's min blanked (see prune); -1 until needed. */
  blank = -1;

  constructor(
    readonly rule: Rule | null,
    readonly node: number,
    readonly counter: number,
    readonly parent: Stack | null,
    readonly id: number,
    readonly epoch: number,
  ) {}
}

export class Config {
  constructor(
    readonly id: number,
    /** Stacks that can consume a byte, sorted by id. */
    readonly stacks: Stack[],
    /** The bottom frame can pop: complete. */
    readonly exit: boolean,
    /** Some stack is inside a literal prefix/suffix. */
    readonly literal: boolean,
    readonly epoch: number,
  ) {}
}

/** Config flags for the hot loops. */
export const HAS_STACKS = 1;
export const EXIT = 2;

export class Universe {
  epoch = 0;
  /** The empty stack: popping to it ends the document (or the walked frame). */
  readonly bottom = new Stack(null, 0, 0, null, 0, -1);
  private stackMap = new Map<string, Stack>();
  private nextStackId = 1;
  configs: Config[] = [];
  private configMap = new Map<string, Config>();
  private blankMap = new Map<string, number>();
  trans = new Int32Array(256 * 1024).fill(UNKNOWN);
  flags = new Uint8Array(1024);
  private stamp = 0;

  stack(rule: Rule, node: number, counter: number, parent: Stack): Stack {
    const key = `${rule.id},${node},${counter},${parent.id}`;
    let s = this.stackMap.get(key);
    if (!s) {
      s = new Stack(rule, node, counter, parent, this.nextStackId++, this.epoch);
      this.stackMap.set(key, s);
    }
    return s;
  }

  /** Interns a configuration from distinct consuming stacks. */
  config(consuming: Stack[], exit: boolean): Config {
    const stacks = this.prune(consuming);
    stacks.sort((a, b) => a.id - b.id);
    let key = exit ? 'e' : '';
    for (const s of stacks) key += `${s.id},`;
    let c = this.configMap.get(key);
    if (c) return c;
    const literal = stacks.some((s) => s.rule!.literal[s.node] === 1);
    c = new Config(this.configs.length, stacks, exit, literal, this.epoch);
    this.configs.push(c);
    this.configMap.set(key, c);
    if (this.trans.length < this.configs.length * 256) {
      const grown = new Int32Array(this.trans.length * 2).fill(UNKNOWN);
      grown.set(this.trans);
      this.trans = grown;
      const flags = new Uint8Array(this.flags.length * 2);
      flags.set(this.flags);
      this.flags = flags;
    }
    this.flags[c.id] = (stacks.length > 0 ? HAS_STACKS : 0) | (exit ? EXIT : 0);
    return c;
  }

  /**
   * Drops every stack that another one subsumes: the same frames (rules, nodes) with the
   * counters equal except where both are at or past their rule's min, and there no larger.
   * Past min, OP_MIN passes for both and a smaller counter has at least the room, so the
   * smaller stack accepts everything the larger one does.
   */
  private prune(stacks: Stack[]): Stack[] {
    if (stacks.length < 2) return stacks;
    const groups = new Map<number, Stack[]>();
    for (const s of stacks) {
      const key = this.blankId(s);
      const g = groups.get(key);
      if (g) g.push(s);
      else groups.set(key, [s]);
    }
    if (groups.size === stacks.length) return stacks;
    const out: Stack[] = [];
    for (const g of groups.values()) {
      for (const s of g) if (!g.some((o) => o !== s && noLarger(o, s) && (!noLarger(s, o) || o.id < s.id))) out.push(s);
    }
    return out;
  }

  private blankId(s: Stack): number {
    const fresh: Stack[] = [];
    let f = s;
    while (f !== this.bottom && f.blank < 0) {
      fresh.push(f);
      f = f.parent!;
    }
    let id = f === this.bottom ? 0 : f.blank;
    for (let i = fresh.length - 1; i >= 0; i--) {
      const x = fresh[i]!;
      const r = x.rule!;
      const key = `${r.id},${x.node},${x.counter >= r.min ? '*' : x.counter},${id}`;
      let next = this.blankMap.get(key);
      if (next === undefined) this.blankMap.set(key, (next = this.blankMap.size + 1));
      x.blank = id = next;
    }
    return id;
  }

  /** Everything reachable from `seeds` without consuming a byte. */
  closure(seeds: readonly Stack[]): Config {
    const stamp = ++this.stamp;
    const out: Stack[] = [];
    let exit = false;
    const work = [...seeds];
    let budget = 1_000_000;
    while (work.length) {
      const s = work.pop()!;
      if (s.mark === stamp) continue;
      s.mark = stamp;
      if (s === this.bottom) {
        exit = true;
        continue;
      }
      if (--budget < 0) throw new Error('grammar closure did not terminate');
      const r = s.rule!;
      const n = s.node;
      const c = s.counter;
      for (let k = r.edgeStart[n]!, e = r.edgeStart[n + 1]!; k < e; k++) {
        if (r.apply(r.edgeOp[k]!, c, r.edgeTo[k]!) >= 0) {
          out.push(s);
          break;
        }
      }
      for (const [to, op] of r.eps[n]!) {
        const c2 = r.apply(op, c, to);
        if (c2 >= 0) work.push(this.stack(r, to, c2, s.parent!));
      }
      for (const call of r.calls[n]!) {
        const c2 = r.apply(call.op, c, call.to);
        if (c2 < 0) continue;
        const ret = this.stack(r, call.to, c2, s.parent!);
        work.push(this.stack(call.rule, 0, 0, ret));
      }
      if (r.final[n]) work.push(s.parent!);
    }
    return this.config(out, exit);
  }

  /** The configuration after `byte`, or DEAD. */
  next(id: number, byte: number): number {
    const v = this.trans[id * 256 + byte]!;
    return v !== UNKNOWN ? v : this.computeNext(id, byte);
  }

  computeNext(id: number, byte: number): number {
    const cfg = this.configs[id]!;
    const seeds: Stack[] = [];
    for (const s of cfg.stacks) {
      const r = s.rule!;
      for (let k = r.edgeStart[s.node]!, e = r.edgeStart[s.node + 1]!; k < e; k++) {
        if (byte < r.edgeLo[k]! || byte > r.edgeHi[k]!) continue;
        const to = r.edgeTo[k]!;
        const c = r.apply(r.edgeOp[k]!, s.counter, to);
        if (c >= 0) seeds.push(this.stack(r, to, c, s.parent!));
      }
    }
    let v = DEAD;
    if (seeds.length) {
      const next = this.closure(seeds);
      if (next.stacks.length > 0 || next.exit) v = next.id;
    }
    this.trans[id * 256 + byte] = v;
    return v;
  }

  /**
   * The configuration after `bytes` through literal prefix/suffix nodes only (an added
   * token spelling literal text), or undefined. Not memoised: added tokens are few.
   */
  stepLiteral(cfg: Config, bytes: Uint8Array): Config | undefined {
    let cur = cfg;
    for (const byte of bytes) {
      const seeds: Stack[] = [];
      for (const s of cur.stacks) {
        const r = s.rule!;
        if (!r.literal[s.node]) continue;
        for (let k = r.edgeStart[s.node]!, e = r.edgeStart[s.node + 1]!; k < e; k++) {
          if (byte >= r.edgeLo[k]! && byte <= r.edgeHi[k]!) seeds.push(this.stack(r, r.edgeTo[k]!, s.counter, s.parent!));
        }
      }
      if (seeds.length === 0) return undefined;
      cur = this.closure(seeds);
    }
    return cur;
  }

  /** The configuration once the top frame of `stack` pops. */
  popped(stack: Stack): Config {
    if (!stack.popped || stack.popped.epoch !== this.epoch) stack.popped = this.closure([stack.parent!]);
    return stack.popped;
  }

  /** Starts over when the tables are past their budget; call only between walks. */
  maybeReset(): void {
    if (this.configs.length >= MAX_CONFIGS || this.stackMap.size >= 20 * MAX_CONFIGS) this.reset();
  }

  /** Drops every stack, configuration and transition (held configurations stay usable through refresh). */
  reset(): void {
    this.epoch++;
    this.stackMap = new Map();
    this.configs = [];
    this.configMap = new Map();
    this.blankMap = new Map();
    this.trans = new Int32Array(256 * 1024).fill(UNKNOWN);
    this.flags = new Uint8Array(1024);
  }

  /** The same configuration in the current epoch. */
  refresh(cfg: Config): Config {
    if (cfg.epoch === this.epoch) return cfg;
    return this.config(cfg.stacks.map((s) => this.restack(s)), cfg.exit);
  }

  private restack(s: Stack): Stack {
    if (s === this.bottom || s.epoch === this.epoch) return s;
    return this.stack(s.rule!, s.node, s.counter, this.restack(s.parent!));
  }
}

/** Whether every counter of `a` is at most `b`'s (the stacks have the same blanked id). */
function noLarger(a: Stack, b: Stack): boolean {
  for (let x = a, y = b; x !== y; x = x.parent!, y = y.parent!) if (x.counter > y.counter) return false;
  return true;
}

/** The one universe. */
export const universe = new Universe();
