// config.json model_type -> architecture family (src/models/<family>.ts).
import { bert } from './bert.js';
import { configReader, normalizeConfig, readConfigFiles, type Json, type ModelConfig } from './config.js';
import { gemma2 } from './gemma2.js';
import { gemma3 } from './gemma3.js';
import { gptOss } from './gpt_oss.js';
import { granite } from './granite.js';
import { granitemoehybrid } from './granitemoehybrid.js';
import { lfm2 } from './lfm2.js';
import { llama } from './llama.js';
import { mistral } from './mistral.js';
import { mixtral } from './mixtral.js';
import { nemotronH } from './nemotron-h.js';
import type { BuildContext, Family } from './model.js';
import { olmo2 } from './olmo2.js';
import { phi3 } from './phi3.js';
import type { Program } from '../runtime/program.js';
import { qwen2 } from './qwen2.js';
import { qwen25Vl } from './qwen2-5-vl.js';
import { qwen3 } from './qwen3.js';
import { qwen3Moe } from './qwen3-moe.js';
import { smollm3 } from './smollm3.js';

const FAMILIES: Record<string, Family> = {
  bert,
  'xlm-roberta': bert,
  llama,
  mistral,
  qwen2,
  qwen2_5_vl: qwen25Vl,
  qwen2_5_vl_text: qwen25Vl,
  qwen3,
  qwen3_moe: qwen3Moe,
  mixtral,
  gpt_oss: gptOss,
  gemma2,
  gemma3,
  gemma3_text: gemma3,
  phi3,
  smollm3,
  granite,
  olmo2,
  lfm2,
  nemotron_h: nemotronH,
  granitemoehybrid,
};

/** Bidirectional encoders: served as embedding models and rerankers only. */
export const ENCODERS: ReadonlySet<string> = new Set(['bert', 'xlm-roberta']);

export function familyFor(modelType: string): Family {
  const f = FAMILIES[modelType];
  if (!f) throw new Error(`model_type "${modelType}" is not supported (supported: ${Object.keys(FAMILIES).join(', ')})`);
  return f;
}

export interface FamilyConfig {
  cfg: ModelConfig;
  family: Family;
  build: (ctx: BuildContext) => Program;
}

/** config.json normalised and checked by its family (which refuses what it cannot honour). */
export function familyConfig(json: Json, generationConfig: Json = {}, file = 'config.json'): FamilyConfig {
  const cfg = normalizeConfig(json, generationConfig, file);
  const family = familyFor(cfg.modelType);
  return { cfg, family, build: family.configure(configReader(json, file), cfg) };
}

export function readFamilyConfig(dir: string): FamilyConfig {
  const { json, generation, file } = readConfigFiles(dir);
  return familyConfig(json, generation, file);
}
