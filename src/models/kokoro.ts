// Placeholder for the Kokoro-82M model (built on branch h-kokoro): the interface the speech
// worker is written against. Replaced by that branch's file when it is merged.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Gpu } from '../runtime/gpu.js';

export function isKokoroCheckpoint(dir: string): boolean {
  const file = join(dir, 'config.json');
  if (existsSync(join(dir, 'kokoro-v1_0.safetensors'))) return true;
  return existsSync(file) && 'istftnet' in (JSON.parse(readFileSync(file, 'utf8')) as object);
}

export interface KokoroModel {
  readonly sampleRate: number;
  readonly vocab: ReadonlyMap<string, number>;
  readonly maxPhonemes: number;
  readonly voiceNames: readonly string[];
  voicePack(name: string): Promise<Float32Array>;
  synthesize(ids: readonly number[], style: Float32Array, speed: number, seed: number): Promise<{ audio: Float32Array; durations: Int32Array }>;
  close(): void;
}

export async function loadKokoro(dir: string, _gpu: Gpu): Promise<KokoroModel> {
  throw new Error(`${dir}: the Kokoro model is not built on this branch`);
}
