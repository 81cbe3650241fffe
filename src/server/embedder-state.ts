// A model a server may serve beside, or instead of, its chat model (an embedding model, a
// reranker, a speech-to-text model): absent (the routes answer 501 naming the flags that would enable them), loading
// (503, as for the chat model), failed (500) or ready.
import type { Embedder } from '../engine/embedder.js';
import { ApiError } from './errors.js';

type State<T> = { kind: 'absent' } | { kind: 'loading' } | { kind: 'ready'; embedder: T } | { kind: 'failed'; error: Error };

export class EmbedderState<T = Embedder> {
  private state: State<T> = { kind: 'absent' };

  /** `unavailable`: the 501's message when no model is configured (also when the promise settles on none). */
  constructor(embedder: T | Promise<T | undefined> | undefined, private readonly unavailable: string) {
    if (!embedder) return;
    if (!(embedder instanceof Promise)) {
      this.state = { kind: 'ready', embedder };
      return;
    }
    this.state = { kind: 'loading' };
    embedder.then(
      (e) => {
        this.state = e === undefined ? { kind: 'absent' } : { kind: 'ready', embedder: e };
      },
      (error: unknown) => {
        this.state = { kind: 'failed', error: error instanceof Error ? error : new Error(String(error)) };
      },
    );
  }

  /** Whether a model is configured (loaded or not): the server has the capability. */
  get configured(): boolean {
    return this.state.kind !== 'absent';
  }

  /** The model once loaded. */
  get current(): T | undefined {
    return this.state.kind === 'ready' ? this.state.embedder : undefined;
  }

  require(): T {
    switch (this.state.kind) {
      case 'absent':
        throw new ApiError(501, 'not_supported_error', this.unavailable);
      case 'loading':
        throw new ApiError(503, 'server_busy', 'Loading model');
      case 'failed':
        throw new ApiError(500, 'server_error', `model failed to load: ${this.state.error.message}`);
      case 'ready':
        return this.state.embedder;
    }
  }
}
