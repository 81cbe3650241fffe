// Rules: the pieces of the byte-level pushdown automaton a schema compiles to. A rule is a
// small NFA over bytes whose edges may also call another rule (push; the callee's final
// node pops back). Each stack frame carries one counter, owned by its rule: the character
// count of a string, the item count of an array. Counted edges check it, so no bound is
// ever unrolled. See ./automaton.ts for how stacks and sets of stacks are run.

/** Edge ops (bit flags). */
export const OP_INC = 1; // counts one item: only if the rule can still finish within [min, max]; then counter + 1
export const OP_MIN = 2; // only if counter >= min
export const OP_ROOM = 4; // only if counter < max

export interface CallEdge {
  rule: Rule;
  /** The node the caller resumes at when the callee pops. */
  to: number;
  op: number;
}

let nextRuleId = 1;
let nextShapeId = 1;
const shapeIds = new Map<string, number>();

/** A small integer per shape string: the key of everything cached per rule shape. */
function shapeId(shape: string): number {
  let id = shapeIds.get(shape);
  if (id === undefined) {
    if (shapeIds.size > 100_000) shapeIds.clear();
    id = nextShapeId++;
    shapeIds.set(shape, id);
  }
  return id;
}

export class Rule {
  readonly id = nextRuleId++;
  /**
   * Rules with equal shapes have identical graphs and differ at most in min/max, so what
   * a walk from one of their frames finds depends only on the shape, the node and the
   * counter's distance to the bounds (see ./matcher.ts); undefined shapes are unique.
   */
  shape = 0;
  min = 0;
  max = Infinity;
  nodeCount = 0;
  /** Byte edges of node n: edgeStart[n] .. edgeStart[n+1]-1. */
  edgeStart = new Int32Array(1);
  edgeLo = new Uint8Array(0);
  edgeHi = new Uint8Array(0);
  edgeTo = new Int32Array(0);
  edgeOp = new Uint8Array(0);
  eps: Array<Array<[number, number]>> = [];
  calls: CallEdge[][] = [];
  final = new Uint8Array(0);
  /** Nodes whose byte edges spell a literal prefix/suffix (added tokens may spell them). */
  literal = new Uint8Array(0);
  /** Fewest counted edges from each node to a final node (Infinity: none). */
  minRemain: Float64Array = new Float64Array(0);
  /** Most counted edges from each node to a final node (Infinity: unbounded). */
  maxRemain: Float64Array = new Float64Array(0);
  /** Largest finite minRemain/maxRemain: how far counter comparisons look ahead. */
  distCap = 0;
  defined = false;
  /**
   * For rules whose frame walks depend on the counter only through one count per token
   * (plain strings: characters), the same graph with min 0 and a max never reached: its
   * walk records each token's count once, and every (room, need) is derived from it.
   */
  counted?: Rule;

  constructor(readonly name: string) {}

  /** Fills in the graph (a rule may be referenced before it is defined: recursion). */
  define(builder: RuleBuilder, shape: string | undefined, min = 0, max = Infinity): this {
    if (this.defined) throw new Error('rule defined twice');
    this.defined = true;
    this.shape = shapeId(shape ?? `#${this.id}`);
    this.min = min;
    this.max = max;
    const n = builder.count;
    this.nodeCount = n;
    const order = builder.edges.map((_, i) => i).sort((x, y) => builder.edges[x]!.from - builder.edges[y]!.from || builder.edges[x]!.lo - builder.edges[y]!.lo);
    this.edgeStart = new Int32Array(n + 1);
    this.edgeLo = new Uint8Array(order.length);
    this.edgeHi = new Uint8Array(order.length);
    this.edgeTo = new Int32Array(order.length);
    this.edgeOp = new Uint8Array(order.length);
    order.forEach((i, k) => {
      const e = builder.edges[i]!;
      this.edgeStart[e.from + 1]!++;
      this.edgeLo[k] = e.lo;
      this.edgeHi[k] = e.hi;
      this.edgeTo[k] = e.to;
      this.edgeOp[k] = e.op;
    });
    for (let i = 0; i < n; i++) this.edgeStart[i + 1]! += this.edgeStart[i]!;
    this.eps = Array.from({ length: n }, () => []);
    for (const e of builder.epsEdges) this.eps[e.from]!.push([e.to, e.op]);
    this.calls = Array.from({ length: n }, () => []);
    for (const c of builder.callEdges) this.calls[c.from]!.push({ rule: c.rule, to: c.to, op: c.op });
    this.final = new Uint8Array(n);
    for (const f of builder.finals) this.final[f] = 1;
    this.literal = new Uint8Array(n);
    for (const l of builder.literalNodes) this.literal[l] = 1;
    this.computeDistances();
    return this;
  }

  /** Counter after an edge with `op` into node `to`, or -1 when the op forbids it. */
  apply(op: number, count: number, to: number): number {
    if (op === 0) return count;
    if (op & OP_MIN && count < this.min) return -1;
    if (op & OP_ROOM && count >= this.max) return -1;
    if (op & OP_INC) {
      if (count + 1 + this.minRemain[to]! > this.max) return -1;
      if (count + 1 + this.maxRemain[to]! < this.min) return -1;
      // Unbounded above, counts past min are all alike.
      return this.max === Infinity ? Math.min(count + 1, this.min) : count + 1;
    }
    return count;
  }

  private computeDistances(): void {
    const n = this.nodeCount;
    // Reverse adjacency with weights (1 for counted edges).
    const rev: Array<Array<[number, number]>> = Array.from({ length: n }, () => []);
    const add = (from: number, to: number, op: number) => rev[to]!.push([from, op & OP_INC ? 1 : 0]);
    for (let from = 0; from < n; from++) {
      for (let k = this.edgeStart[from]!; k < this.edgeStart[from + 1]!; k++) add(from, this.edgeTo[k]!, this.edgeOp[k]!);
      for (const [to, op] of this.eps[from]!) add(from, to, op);
      for (const c of this.calls[from]!) add(from, c.to, c.op);
    }
    // Fewest: 0-1 BFS from the final nodes backwards.
    const min = new Float64Array(n).fill(Infinity);
    const deque: number[] = [];
    for (let i = 0; i < n; i++) if (this.final[i]) { min[i] = 0; deque.push(i); }
    while (deque.length) {
      const v = deque.shift()!;
      for (const [u, w] of rev[v]!) {
        if (min[v]! + w < min[u]!) {
          min[u] = min[v]! + w;
          if (w === 0) deque.unshift(u);
          else deque.push(u);
        }
      }
    }
    this.minRemain = min;
    this.maxRemain = longestCounted(n, rev, this.final);
    let cap = 0;
    for (let i = 0; i < n; i++) {
      if (Number.isFinite(min[i]!)) cap = Math.max(cap, min[i]!);
      if (Number.isFinite(this.maxRemain[i]!)) cap = Math.max(cap, this.maxRemain[i]!);
    }
    this.distCap = cap;
  }
}

interface ByteEdgeSpec {
  from: number;
  lo: number;
  hi: number;
  to: number;
  op: number;
}

/** Node limit per rule: patterns unroll their counted repetitions. */
export const MAX_RULE_NODES = 50_000;

export class RuleBuilder {
  count = 0;
  readonly edges: ByteEdgeSpec[] = [];
  readonly epsEdges: Array<{ from: number; to: number; op: number }> = [];
  readonly callEdges: Array<{ from: number; rule: Rule; to: number; op: number }> = [];
  readonly finals: number[] = [];
  readonly literalNodes: number[] = [];

  constructor(private readonly onOverflow: () => Error = () => new Error('rule too large')) {}

  node(): number {
    if (this.count >= MAX_RULE_NODES) throw this.onOverflow();
    return this.count++;
  }

  byte(from: number, lo: number, hi: number, to: number, op = 0): void {
    this.edges.push({ from, lo, hi, to, op });
  }

  eps(from: number, to: number, op = 0): void {
    this.epsEdges.push({ from, to, op });
  }

  call(from: number, rule: Rule, to: number, op = 0): void {
    this.callEdges.push({ from, rule, to, op });
  }

  finish(node: number): void {
    this.finals.push(node);
  }

  /** Spells `bytes` from `from`; returns the node after the last one. */
  literal(from: number, bytes: Uint8Array, zone = false, to?: number): number {
    let at = from;
    bytes.forEach((b, i) => {
      const next = i === bytes.length - 1 && to !== undefined ? to : this.node();
      if (zone) this.literalNodes.push(at);
      this.byte(at, b, b, next);
      at = next;
    });
    if (bytes.length === 0 && to !== undefined) this.eps(from, to);
    return bytes.length === 0 && to !== undefined ? to : at;
  }

  /** Any one of `strings`, as a trie; returns the common end node. */
  literals(from: number, strings: Uint8Array[]): number {
    const end = this.node();
    const children = new Map<number, Map<number, number>>();
    for (const s of strings) {
      let at = from;
      if (s.length === 0) {
        this.eps(from, end);
        continue;
      }
      s.forEach((b, i) => {
        if (i === s.length - 1) {
          this.byte(at, b, b, end);
          return;
        }
        let m = children.get(at);
        if (!m) children.set(at, (m = new Map()));
        let next = m.get(b);
        if (next === undefined) {
          next = this.node();
          m.set(b, next);
          this.byte(at, b, b, next);
        }
        at = next;
      });
    }
    return end;
  }
}

export const utf8 = (text: string): Uint8Array => new TextEncoder().encode(text);

/**
 * Most counted edges on a path from each node to a final node: Infinity when the path can
 * pass a cycle with a counted edge, 0 for nodes that cannot finish at all. Strongly
 * connected components (Tarjan, iterative) in reverse topological order, then a DAG pass.
 */
function longestCounted(n: number, rev: Array<Array<[number, number]>>, final: Uint8Array): Float64Array {
  const fwd: Array<Array<[number, number]>> = Array.from({ length: n }, () => []);
  for (let v = 0; v < n; v++) for (const [u, w] of rev[v]!) fwd[u]!.push([v, w]);
  const index = new Int32Array(n).fill(-1);
  const low = new Int32Array(n);
  const onStack = new Uint8Array(n);
  const comp = new Int32Array(n).fill(-1);
  const stack: number[] = [];
  const comps: number[][] = [];
  let counter = 0;
  for (let root = 0; root < n; root++) {
    if (index[root] !== -1) continue;
    const work: Array<[number, number]> = [[root, 0]];
    while (work.length) {
      const top = work[work.length - 1]!;
      const [v, i] = top;
      if (i === 0) {
        index[v] = low[v] = counter++;
        stack.push(v);
        onStack[v] = 1;
      }
      const edges = fwd[v]!;
      if (i < edges.length) {
        top[1] = i + 1;
        const w = edges[i]![0];
        if (index[w] === -1) work.push([w, 0]);
        else if (onStack[w]) low[v] = Math.min(low[v]!, index[w]!);
        continue;
      }
      work.pop();
      if (work.length) {
        const parent = work[work.length - 1]![0];
        low[parent] = Math.min(low[parent]!, low[v]!);
      }
      if (low[v] === index[v]) {
        const members: number[] = [];
        let w: number;
        do {
          w = stack.pop()!;
          onStack[w] = 0;
          comp[w] = comps.length;
          members.push(w);
        } while (w !== v);
        comps.push(members);
      }
    }
  }
  // Tarjan emits sinks first: every component's successors are already done.
  const value = new Float64Array(n).fill(-Infinity);
  for (let k = 0; k < comps.length; k++) {
    const members = comps[k]!;
    let best = -Infinity;
    let pumping = false;
    for (const v of members) {
      if (final[v]) best = Math.max(best, 0);
      for (const [w, weight] of fwd[v]!) {
        if (comp[w] === k) {
          if (weight > 0) pumping = true;
        } else if (value[w]! > -Infinity) best = Math.max(best, value[w]! + weight);
      }
    }
    // Inside a component without counted edges every member reaches the same places.
    const result = best === -Infinity ? -Infinity : pumping ? Infinity : best;
    for (const v of members) value[v] = result;
  }
  return value.map((x) => (x === -Infinity ? 0 : x));
}
