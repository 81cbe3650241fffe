// Which files of a repo the loader reads: the configs, the tokenizer and chat template, and
// the safetensors weights (one file, or the shards the index names). Everything else (.bin,
// .gguf, .onnx duplicates, images, READMEs) stays on the Hub.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { HubError } from './errors.js';

const REQUIRED = ['config.json', 'tokenizer.json'];
const OPTIONAL = ['generation_config.json', 'tokenizer_config.json', 'chat_template.jinja'];
const INDEX = 'model.safetensors.index.json';
const SINGLE = 'model.safetensors';

/** What to fetch first: the small files, with the index when the weights are sharded. */
export interface FirstPick {
  files: string[];
  /** The index, whose weight_map names the shards, or undefined for one model.safetensors. */
  index?: string;
}

/** The loader's files among `paths` (a repo's listing), or a HubError saying what is there. */
export function pickFiles(repo: string, paths: string[]): FirstPick {
  const present = new Set(paths);
  const weights = present.has(INDEX) ? INDEX : present.has(SINGLE) ? SINGLE : undefined;
  if (!weights) throw new HubError(`${repo} has no weights mlxcel-server can load: ${describeWeights(paths)}; mlxcel-server loads safetensors (${SINGLE}, or ${INDEX} and its shards)`);
  const missing = REQUIRED.filter((f) => !present.has(f));
  if (missing.length > 0) throw new HubError(`${repo} has no ${missing.join(' or ')}; mlxcel-server needs ${REQUIRED.join(' and ')} beside the weights`);
  const files = [...REQUIRED, ...OPTIONAL.filter((f) => present.has(f)), weights];
  return { files, index: weights === INDEX ? INDEX : undefined };
}

/** The shard files an index's weight_map names, each once. */
export function shardsOf(indexPath: string): string[] {
  const { weight_map } = JSON.parse(readFileSync(indexPath, 'utf8')) as { weight_map?: Record<string, string> };
  if (!weight_map || typeof weight_map !== 'object') throw new HubError(`${indexPath} has no weight_map`);
  return [...new Set(Object.values(weight_map))];
}

/** The loader's files missing from a local directory (a cached snapshot); empty when it can load. */
export function missingFiles(dir: string): string[] {
  const missing = REQUIRED.filter((f) => !existsSync(join(dir, f)));
  if (existsSync(join(dir, INDEX))) {
    try {
      missing.push(...shardsOf(join(dir, INDEX)).filter((f) => !existsSync(join(dir, f))));
    } catch {
      missing.push(INDEX);
    }
  } else if (!existsSync(join(dir, SINGLE))) {
    missing.push(SINGLE);
  }
  return missing;
}

const KINDS: [RegExp, string][] = [
  [/\.gguf$/i, 'GGUF'],
  [/\.(bin|pt|pth|ckpt)$/i, 'PyTorch'],
  [/\.onnx(_data)?$/i, 'ONNX'],
  [/\.(h5|msgpack|tflite)$/i, 'TensorFlow/Flax'],
  [/\.safetensors$/i, 'other safetensors'],
];

/** "only GGUF files (model-q4.gguf, ...)" or "no weight files at all". */
function describeWeights(paths: string[]): string {
  const found = KINDS.map(([re, kind]) => ({ kind, files: paths.filter((p) => re.test(p)) })).filter((k) => k.files.length > 0);
  if (found.length === 0) return `no weight files at all (${paths.length} file${paths.length === 1 ? '' : 's'})`;
  const each = found.map(({ kind, files }) => `${kind} files (${files.slice(0, 2).join(', ')}${files.length > 2 ? `, ... ${files.length} in all` : ''})`);
  return `${found.length === 1 ? 'only ' : ''}${each.join(' and ')}`;
}
