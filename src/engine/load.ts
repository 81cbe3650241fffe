// Opens the GPU, loads the checkpoint and tokenizer, and returns a ready engine.
import { basename, resolve } from 'node:path';
import { openGpu, type Backend } from '../runtime/gpu.js';
import { readModelConfig } from '../models/config.js';
import { loadModel } from '../models/model.js';
import { TextTokenizer } from '../models/tokenizer.js';
import type { Engine, EngineOptions } from './engine.js';
import { ForwardRunner } from './forward.js';
import { Generator } from './generator.js';

/** Prefill chunk: tokens per forward pass. */
const MAX_PASS_TOKENS = 512;
const BLOCK_SIZE = 16;
const DEFAULT_CONTEXT_CAP = 4096;

export async function loadEngine(o: EngineOptions): Promise<Engine> {
  const dir = resolve(o.modelDir);
  const gpu = await openGpu((o.backend ?? 'auto') as Backend);
  const tokenizer = await TextTokenizer.load(dir);
  const contextSize = o.contextSize && o.contextSize > 0 ? o.contextSize : Math.min(readModelConfig(dir).maxPositions, DEFAULT_CONTEXT_CAP);
  const model = await loadModel(gpu, dir, {
    maxTokens: MAX_PASS_TOKENS,
    maxSeqs: 1,
    kvTokens: contextSize,
    maxContext: contextSize,
    blockSize: BLOCK_SIZE,
  });
  const eos = new Set(model.cfg.eosTokenIds);
  if (tokenizer.eosId !== undefined) eos.add(tokenizer.eosId);
  return new Generator(
    {
      id: o.alias ?? basename(dir),
      architecture: model.cfg.modelType,
      vocabSize: model.cfg.vocab,
      contextSize,
      eosTokenIds: [...eos],
    },
    tokenizer,
    gpu.description,
    new ForwardRunner(model),
  );
}
