// Model kinds the REST reference serves that this server cannot load yet: image generation
// (--image-model) and the audio models of the reference's audio-only server processes (-m a
// Whisper or Kokoro checkpoint). The CLI refuses them at startup, and their routes answer
// 501, in these words.
import { existsSync } from 'node:fs';
import { join } from 'node:path';

export const IMAGE_MODELS_UNSUPPORTED = 'image generation models (--image-model, MLXCEL_IMAGE_MODEL) are not supported yet';
export const AUDIO_MODELS_UNSUPPORTED = 'audio models (a Whisper or Kokoro checkpoint served with -m) are not supported yet';

/** What the server does load, closing the startup refusals. */
export const SERVED_KINDS = 'this server serves text generation, embeddings and reranking';

export class UnsupportedModelKindError extends Error {}

/** Throws for a Whisper (config.json model_type "whisper") or Kokoro (an istftnet block, or its weights file) checkpoint. */
export function refuseAudioCheckpoint(dir: string, config: Record<string, unknown> | undefined): void {
  const kind = config?.model_type === 'whisper'
    ? 'a Whisper speech-to-text checkpoint'
    : (config && 'istftnet' in config) || existsSync(join(dir, 'kokoro-v1_0.safetensors')) ? 'a Kokoro text-to-speech checkpoint' : undefined;
  if (kind) throw new UnsupportedModelKindError(`${dir} is ${kind}: ${AUDIO_MODELS_UNSUPPORTED}; ${SERVED_KINDS}`);
}
