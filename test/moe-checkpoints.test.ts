// Mixture-of-experts checkpoints the llama.cpp oracle (test/oracle-families.test.ts) cannot
// check, against the CPU reference (test/helpers/hf-reference.ts) and each other:
//  * Qwen3-MoE with dense and sparse layers mixed (mlp_only_layers), bf16: greedy tokens
//    equal and prompt log-probs within TOLERANCE of the reference (llama.cpp's qwen3moe
//    makes every layer sparse);
//  * the same weights as mlx-lm writes them, the experts stacked in switch_mlp tensors
//    [experts, rows, cols]: the same logits as the per-expert layout;
//  * MLX affine 4-bit with a per-module 8-bit override of layer 0's expert down
//    projections, per-expert (against the reference, which dequantizes) and stacked (its
//    3-D packed weights, scales and biases, the override keyed by the switch_mlp module);
//  * the bf16 model loaded with 16 KiB bindings: experts split across bindings (two
//    experts' gate/up per binding), the same logits;
//  * Mixtral with sliding_window 8 (llama.cpp runs Mixtral without one): against the
//    reference with the window, the prompt and steps far past it;
//  * a checkpoint larger than this CPU adapter's memory (a sparse 2 TiB file) is refused
//    before anything loads, naming the sizes.
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ForwardRunner } from '../src/engine/forward.js';
import { loadEngine } from '../src/engine/load.js';
import { loadModel } from '../src/models/model.js';
import { quantizeCheckpoint } from '../src/models/quantize.js';
import { listCheckpointTensors, readSafetensorsBytes, writeSafetensors, type SafetensorsWriteTensor } from '../src/models/safetensors.js';
import { TextTokenizer } from '../src/models/tokenizer.js';
import { HfReference } from './helpers/hf-reference.js';
import { maxLogitsLogProbDiff } from './helpers/llama-oracle.js';
import { F32_KV_TYPES, greedy, openRunner, testGpu } from './helpers/model-harness.js';
import { ORACLE_STORY } from './helpers/oracle-cases.js';
import { makeRandomCheckpoint, type RandomCheckpointOptions } from './helpers/random-checkpoint.js';

const STEPS = 16;
// f32 on the GPU against f64 on the CPU (observed 3e-5 and 5e-5); a wrong expert, weight or
// layer kind moves log-probs by ~1.
const TOLERANCE = 1e-3;

const shape = { hidden: 64, heads: 4, kvHeads: 2, headDim: 16, intermediate: 128, tokenizer: 'stories' } as const;

/** mlx-lm's names for transformers' per-expert projections (Mixtral's w1, w3, w2). */
const SWITCH_NAMES: Record<string, string> = { gate_proj: 'gate_proj', up_proj: 'up_proj', down_proj: 'down_proj', w1: 'gate_proj', w3: 'up_proj', w2: 'down_proj' };

/**
 * Copies checkpoint `from` to `to` with its per-expert tensors stacked as mlx-lm writes
 * them: <block>.experts.E.<proj>.{weight,scales,biases} -> <block>.switch_mlp.<proj>.* with
 * a leading expert dimension; quantization entries keyed by an expert module go to the
 * switch_mlp module (mlx-lm quantizes the stack as one module).
 */
function stackExperts(from: string, to: string): void {
  const tensors = listCheckpointTensors(from);
  const stacks = new Map<string, { shape: number[]; dtype: SafetensorsWriteTensor['dtype']; parts: Uint8Array[] }>();
  const out: SafetensorsWriteTensor[] = [];
  const switchName = (module: string) => module.replace(/\.experts\.\d+\.(\w+)$/, (_, p: string) => `.switch_mlp.${SWITCH_NAMES[p]}`);
  for (const name of [...tensors.keys()].sort((a, b) => a.localeCompare(b, 'en', { numeric: true }))) {
    const t = tensors.get(name)!;
    const data = readSafetensorsBytes(t.path, t.header, name);
    const m = /^(.*\.experts\.\d+\.\w+)\.(\w+)$/.exec(name);
    if (!m) {
      out.push({ name, dtype: t.info.dtype as SafetensorsWriteTensor['dtype'], shape: t.info.shape, data });
      continue;
    }
    const key = `${switchName(m[1]!)}.${m[2]}`;
    const stack = stacks.get(key) ?? { shape: t.info.shape, dtype: t.info.dtype as SafetensorsWriteTensor['dtype'], parts: [] };
    stack.parts.push(data);
    stacks.set(key, stack);
  }
  for (const [name, s] of stacks) {
    const data = new Uint8Array(s.parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const p of s.parts) { data.set(p, at); at += p.length; }
    out.push({ name, dtype: s.dtype, shape: [s.parts.length, ...s.shape], data });
  }
  mkdirSync(to, { recursive: true });
  writeSafetensors(join(to, 'model.safetensors'), out);
  const config = JSON.parse(readFileSync(join(from, 'config.json'), 'utf8'));
  for (const key of ['quantization', 'quantization_config']) {
    if (!config[key]) continue;
    config[key] = Object.fromEntries(Object.entries(config[key] as Record<string, unknown>).map(([k, v]) => [switchName(k), v]));
  }
  writeFileSync(join(to, 'config.json'), JSON.stringify(config));
  for (const f of readdirSync(from)) if (f.startsWith('tokenizer') || f === 'generation_config.json') copyFileSync(join(from, f), join(to, f));
}

describe('mixture-of-experts checkpoints', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'mlxcel-moe-'));
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));
  const qwen: RandomCheckpointOptions = {
    ...shape, arch: 'qwen3_moe', layers: 3, seed: 21, dtype: 'BF16',
    extraConfig: { num_experts: 6, num_experts_per_tok: 3, moe_intermediate_size: 32, mlp_only_layers: [1] },
  };
  const base = join(tmp, 'qwen3-moe');
  const ck = makeRandomCheckpoint(qwen, base);
  const promptOf = async (dir: string) => [ck.bosId, ...(await TextTokenizer.load(dir)).encode(ORACLE_STORY, false)];

  /** Ours against the reference on checkpoint `dir`: greedy tokens and the prompt's log-probs. */
  async function expectReference(dir: string, window = Infinity): Promise<Awaited<ReturnType<typeof greedy>>> {
    const prompt = await promptOf(dir);
    const ours = await greedy(await openRunner(dir, 256, { kvTypes: F32_KV_TYPES }), prompt, STEPS);
    const reference = new HfReference(dir, window);
    const diff = maxLogitsLogProbDiff(ours.promptLogits, reference.logits(prompt));
    if (process.env.ORACLE_VERBOSE) console.info(`${dir}: max log-prob diff ${diff.toExponential(2)}`);
    expect(diff).toBeLessThan(TOLERANCE);
    expect(ours.tokens).toEqual(reference.greedy(prompt, STEPS));
    return ours;
  }

  /** The stacked copy of `dir` decodes as `dir` does: the same tokens, logits within f32 rounding. */
  async function expectStackedSame(dir: string, perExpert: Awaited<ReturnType<typeof greedy>>): Promise<void> {
    const stacked = `${dir}-switch`;
    stackExperts(dir, stacked);
    expect([...listCheckpointTensors(stacked).keys()].some((n) => n.includes('.experts.'))).toBe(false);
    const ours = await greedy(await openRunner(stacked, 256, { kvTypes: F32_KV_TYPES }), await promptOf(stacked), STEPS);
    expect(ours.tokens).toEqual(perExpert.tokens);
    expect(maxLogitsLogProbDiff(ours.promptLogits, perExpert.promptLogits)).toBeLessThan(1e-6);
  }

  it('qwen3_moe, dense layer 1 between sparse layers (6 experts, top-3): reference, and the same from switch_mlp tensors and through 16 KiB bindings', async () => {
    const ours = await expectReference(base);
    await expectStackedSame(base, ours);
    const model = await loadModel({ ...(await testGpu()), maxBinding: 16 * 1024 }, base, { maxTokens: 128, maxSeqs: 1, kvTokens: 256, maxContext: 256, blockSize: 16, kvTypes: F32_KV_TYPES });
    const split = await greedy(new ForwardRunner(model), await promptOf(base), STEPS);
    expect(split.tokens).toEqual(ours.tokens);
    expect(maxLogitsLogProbDiff(split.promptLogits, ours.promptLogits)).toBeLessThan(1e-6);
  });

  it('qwen3_moe 4-bit with 8-bit expert down projections in layer 0: reference, and the same from switch_mlp tensors', async () => {
    const q = join(tmp, 'qwen3-moe-q4');
    const modules = Object.fromEntries(Array.from({ length: 6 }, (_, e) => [`model.layers.0.mlp.experts.${e}.down_proj`, { bits: 8 as const, groupSize: 32 }]));
    quantizeCheckpoint(base, q, { bits: 4, groupSize: 32, modules });
    const model = await loadModel(await testGpu(), q, { maxTokens: 16, maxSeqs: 1, kvTokens: 32, maxContext: 32, blockSize: 16, kvTypes: F32_KV_TYPES });
    expect(model.weightFormat).toContain('q8 g32');
    expect(model.weightFormat).toContain('q4 g32');
    const ours = await expectReference(q);
    await expectStackedSame(q, ours);
  });

  it('mixtral with sliding_window 8 (8 experts, top-2): reference with the window', async () => {
    const dir = join(tmp, 'mixtral');
    const mixtral = makeRandomCheckpoint({ ...shape, arch: 'mixtral', layers: 2, seed: 22, extraConfig: { sliding_window: 8 } }, dir);
    expect((await promptOf(mixtral.dir)).length).toBeGreaterThan(16);
    await expectReference(dir, 8);
  });

  it('refuses a checkpoint larger than the free memory of this CPU adapter, naming the sizes', async () => {
    const dir = join(tmp, 'too-large');
    mkdirSync(dir);
    for (const f of readdirSync(base)) if (f !== 'model.safetensors') copyFileSync(join(base, f), join(dir, f));
    // One 2 TiB tensor, in a sparse file: the header is all that is read.
    const bytes = 2 ** 41;
    const header = Buffer.from(JSON.stringify({ 'model.embed_tokens.weight': { dtype: 'BF16', shape: [2 ** 30, 1024], data_offsets: [0, bytes] } }));
    const length = Buffer.alloc(8);
    length.writeBigUInt64LE(BigInt(header.length));
    const file = join(dir, 'model.safetensors');
    writeFileSync(file, Buffer.concat([length, header]));
    truncateSync(file, 8 + header.length + bytes);
    await expect(loadEngine({ modelDir: dir, backend: 'opengles' })).rejects.toThrow(
      /^the checkpoint's weights \(2048\.0 GiB\) and a KV cache of [\d.]+ [MG]iB exceed the [\d.]+ GiB of free memory this CPU adapter \(.+\) has$/,
    );
  });
});
