// A single-consumer async queue: the engine loop pushes events, one request's iterator
// pulls them. Closing the iterator early (break, return) runs `onCancel`.
interface Waiter<T> {
  resolve: (r: IteratorResult<T>) => void;
  reject: (e: unknown) => void;
}

export class Channel<T> implements AsyncIterable<T> {
  private readonly items: T[] = [];
  private waiter: Waiter<T> | undefined;
  private closed = false;
  private failure: unknown;

  constructor(private readonly onCancel: () => void) {}

  push(item: T): void {
    if (this.closed) return;
    const w = this.waiter;
    this.waiter = undefined;
    if (w) w.resolve({ value: item, done: false });
    else this.items.push(item);
  }

  /** Ends the stream; with an error, the consumer's next read throws it. */
  close(error?: unknown): void {
    if (this.closed) return;
    this.closed = true;
    this.failure = error;
    const w = this.waiter;
    this.waiter = undefined;
    if (w) {
      if (error === undefined) w.resolve({ value: undefined, done: true });
      else w.reject(error);
    }
  }

  [Symbol.asyncIterator](): AsyncIterator<T> {
    return {
      next: () => {
        if (this.items.length > 0) return Promise.resolve({ value: this.items.shift() as T, done: false });
        if (this.closed) return this.failure === undefined ? Promise.resolve({ value: undefined, done: true }) : Promise.reject(this.failure);
        return new Promise((resolve, reject) => (this.waiter = { resolve, reject }));
      },
      return: () => {
        if (!this.closed) this.onCancel();
        this.closed = true;
        this.items.length = 0;
        return Promise.resolve({ value: undefined, done: true });
      },
    };
  }
}
