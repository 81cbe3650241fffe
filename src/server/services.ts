// What the server can do beyond its chat model, as /v1/models and /props report it.
import type { Speaker } from '../engine/speaker.js';
import type { Transcriber } from '../engine/transcriber.js';
import type { EmbedderState } from './embedder-state.js';

/** What the server can do, as /v1/models and /props report it. */
export interface Services {
  /** Text generation (off with --embeddings / --reranking, and when -m is a Whisper or Kokoro checkpoint). */
  readonly completion: boolean;
  embedders: EmbedderState;
  rerankers: EmbedderState;
  /** Speech to text: -m or --stt-model a Whisper checkpoint. */
  transcribers: EmbedderState<Transcriber>;
  /** Text to speech: -m or --tts-model a Kokoro checkpoint. */
  speakers: EmbedderState<Speaker>;
}

/** The capability names llama-server reports: "completion", "embedding", "rerank"; and "transcription" and "speech". */
export function capabilities(services: Services): string[] {
  return [
    ...(services.completion ? ['completion'] : []),
    ...(services.embedders.configured ? ['embedding'] : []),
    ...(services.rerankers.configured ? ['rerank'] : []),
    ...(services.transcribers.configured ? ['transcription'] : []),
    ...(services.speakers.configured ? ['speech'] : []),
  ];
}
