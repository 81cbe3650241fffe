// config.json model_type -> architecture family.
import { llama } from './llama.js';
import type { Family } from './model.js';
import { qwen2 } from './qwen2.js';
import { qwen3 } from './qwen3.js';

const FAMILIES: Record<string, Family> = {
  llama,
  mistral: llama,
  qwen2,
  qwen3,
};

export function familyFor(modelType: string): Family {
  const f = FAMILIES[modelType];
  if (!f) throw new Error(`model_type "${modelType}" is not supported (supported: ${Object.keys(FAMILIES).join(', ')})`);
  return f;
}
