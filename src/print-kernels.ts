// Prints the exact WGSL of every pipeline a model's forward pass creates, as Dawn compiles it
// (the kernel file with its includes expanded for the variant the runtime picked), with its
// override constants: what a kernel author reads to see what runs.
//   npm run kernels -- [--model DIR] [--match REGEX] [--out DIR] [--gpu-layout]
// --match keeps the pipelines whose key (kernel/variant/constants) matches;
// --out writes one .wgsl file per pipeline instead of printing; --gpu-layout records the
// kernel layouts meant for GPUs even on a CPU adapter.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { ENGINE_DEFAULTS } from './engine/engine.js';
import { loadModel } from './models/model.js';
import { openGpu, type Backend } from './runtime/gpu.js';

const { values } = parseArgs({
  options: {
    model: { type: 'string', default: fileURLToPath(new URL('../models/stories260k', import.meta.url)) },
    match: { type: 'string' },
    out: { type: 'string' },
    backend: { type: 'string', default: 'auto' },
    'gpu-layout': { type: 'boolean', default: false },
  },
});

const gpu = await openGpu(values.backend as Backend, { quietDawn: true });
const model = await loadModel(values['gpu-layout'] ? { ...gpu, isCpu: false } : gpu, values.model!, { maxTokens: 16, maxSeqs: 2, kvTokens: 64, maxContext: 64, blockSize: 16, kvTypes: { k: ENGINE_DEFAULTS.cacheTypeK, v: ENGINE_DEFAULTS.cacheTypeV } });
const match = values.match ? new RegExp(values.match) : undefined;
const sources = model.ops.pipelines.list().filter((s) => !match || match.test(s.key));
if (values.out) mkdirSync(values.out, { recursive: true });
sources.forEach((s, i) => {
  const header = `// pipeline ${i}: ${s.key.split('/')[0]}\n// variant: ${JSON.stringify(s.variant)}\n// constants: ${JSON.stringify(s.constants)}\n`;
  if (values.out) writeFileSync(join(values.out, `${String(i).padStart(2, '0')}-${s.key.split('/')[0]}.wgsl`), header + s.code);
  else process.stdout.write(`${header}${s.code}\n\n`);
});
console.error(`${sources.length} pipeline(s) for ${values.model} on ${gpu.description}`);
process.exit(0);
