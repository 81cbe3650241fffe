// Model kinds the REST reference serves that this server cannot load yet: image generation
// (--image-model). The CLI refuses it at startup, and its routes answer 501, in these words.
// A Whisper or Kokoro checkpoint is served by its own worker (-m alone, or --stt-model /
// --tts-model), never as a text model.
import { existsSync } from 'node:fs';
import { join } from 'node:path';

export const IMAGE_MODELS_UNSUPPORTED = 'image generation models (--image-model, MLXCEL_IMAGE_MODEL) are not supported yet';

/** What the server does load, closing the startup refusals. */
export const SERVED_KINDS = 'this server serves text generation, embeddings, reranking, speech to text and text to speech';

export class UnsupportedModelKindError extends Error {}

/**
 * Throws where a text model is expected: for a Whisper checkpoint (config.json model_type
 * "whisper") and a Kokoro one (an istftnet block, or its weights file), which their own
 * workers serve.
 */
export function refuseAudioCheckpoint(dir: string, config: Record<string, unknown> | undefined): void {
  if (config?.model_type === 'whisper') {
    throw new UnsupportedModelKindError(`${dir} is a Whisper speech-to-text checkpoint, not a text model: serve it with -m alone (an audio-only server) or with --stt-model beside a chat model`);
  }
  if ((config && 'istftnet' in config) || existsSync(join(dir, 'kokoro-v1_0.safetensors'))) {
    throw new UnsupportedModelKindError(`${dir} is a Kokoro text-to-speech checkpoint, not a text model: serve it with -m alone (an audio-only server) or with --tts-model beside a chat model`);
  }
}
