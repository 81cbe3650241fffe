// What the server can do beyond its chat model, as /v1/models and /props report it.
import type { EmbedderState } from './embedder-state.js';

/** What the server can do, as /v1/models and /props report it. */
export interface Services {
  /** Text generation (off with --embeddings / --reranking). */
  completion: boolean;
  embedders: EmbedderState;
  rerankers: EmbedderState;
}

/** The capability names llama-server reports: "completion", "embedding", "rerank". */
export function capabilities(services: Services): string[] {
  return [
    ...(services.completion ? ['completion'] : []),
    ...(services.embedders.configured ? ['embedding'] : []),
    ...(services.rerankers.configured ? ['rerank'] : []),
  ];
}
