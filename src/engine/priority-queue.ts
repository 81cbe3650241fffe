// The prefill queue: three FIFO classes, served high before normal before low.
import { PRIORITIES, type Priority } from './types.js';

export class PriorityQueue<T> {
  private readonly classes = new Map<Priority, T[]>(PRIORITIES.map((p) => [p, []]));

  get size(): number {
    let n = 0;
    for (const q of this.classes.values()) n += q.length;
    return n;
  }

  push(item: T, priority: Priority): void {
    this.classes.get(priority)!.push(item);
  }

  /** The items in service order. */
  *[Symbol.iterator](): IterableIterator<T> {
    for (const p of PRIORITIES) yield* this.classes.get(p)!;
  }

  remove(item: T): void {
    for (const q of this.classes.values()) {
      const i = q.indexOf(item);
      if (i >= 0) q.splice(i, 1);
    }
  }

  /** Empties the queue, returning everything in service order. */
  drain(): T[] {
    const all = PRIORITIES.flatMap((p) => this.classes.get(p)!);
    for (const q of this.classes.values()) q.length = 0;
    return all;
  }
}
