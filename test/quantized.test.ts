// Every MLX affine bit width (2, 3, 4, 5, 6, 8; packed weights dequantized inside
// matvec_q / matmul_q / embedding at their stored width) and a mixed-bit checkpoint, each against the same weights dequantized to f32 on the host and
// run through the float kernels. Both sides multiply the same f32 values, so they differ only by
// summation order: the per-group "s * dot(q, x) + b * sum(x)" factoring versus a plain
// dot product.
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { moduleQuantization, readModelConfig } from '../src/models/config.js';
import { loadModel } from '../src/models/model.js';
import { dequantizeAffine, quantizeCheckpoint, type QuantBits, type QuantizeOptions } from '../src/models/quantize.js';
import { listCheckpointTensors, readSafetensorsBytes, readTensorF32, writeSafetensors, type SafetensorsWriteTensor } from '../src/models/safetensors.js';
import { greedy, openRunner, SERVER_KV_TYPES, testGpu } from './helpers/model-harness.js';
import { makeRandomCheckpoint } from './helpers/random-checkpoint.js';

/** Writes the f32 checkpoint that a quantized one stands for (each module at its own bits and group size). */
function dequantizeCheckpoint(qDir: string, outDir: string): void {
  const quant = readModelConfig(qDir).quantization;
  const tensors = listCheckpointTensors(qDir);
  const out: SafetensorsWriteTensor[] = [];
  for (const [name, t] of tensors) {
    if (name.endsWith('.scales') || name.endsWith('.biases')) continue;
    if (t.info.dtype !== 'U32') {
      out.push({ name, dtype: t.info.dtype as 'F32', shape: t.info.shape, data: readSafetensorsBytes(t.path, t.header, name) });
      continue;
    }
    const prefix = name.slice(0, -'.weight'.length);
    const { bits, groupSize } = moduleQuantization(quant, prefix, true)!;
    const [N, packedCols] = t.info.shape;
    const K = (packedCols * 32) / bits;
    const packed = new Uint32Array(readSafetensorsBytes(t.path, t.header, name).slice().buffer);
    const w = dequantizeAffine(packed, readTensorF32(tensors.get(`${prefix}.scales`)!), readTensorF32(tensors.get(`${prefix}.biases`)!), N, K, bits, groupSize);
    out.push({ name, dtype: 'F32', shape: [N, K], data: w });
  }
  mkdirSync(outDir, { recursive: true });
  writeSafetensors(join(outDir, 'model.safetensors'), out);
  const config = JSON.parse(readFileSync(join(qDir, 'config.json'), 'utf8'));
  delete config.quantization;
  delete config.quantization_config;
  writeFileSync(join(outDir, 'config.json'), JSON.stringify(config));
  for (const f of readdirSync(qDir)) if (f.startsWith('tokenizer') || f === 'generation_config.json') copyFileSync(join(qDir, f), join(outDir, f));
}

describe('quantized weights', () => {
  const root = mkdtempSync(join(tmpdir(), 'mlxcel-quant-'));
  afterAll(() => rmSync(root, { recursive: true, force: true }));
  // bf16, so the quantized checkpoints keep bf16 scales and biases, as mlx-community's do
  // (and as test/kernels/matmul.test.ts's cases mostly do, whose compiled kernels these share).
  const base = join(root, 'bf16');
  makeRandomCheckpoint({ arch: 'qwen3', tokenizer: 'stories', hidden: 128, layers: 2, heads: 4, kvHeads: 2, headDim: 32, intermediate: 256, seed: 7, tie: true, dtype: 'BF16' }, base);
  const prompt = [1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421];

  /** Greedy tokens equal, and the prompt's logits within 1e-3 of the logit scale, between checkpoint q and its f32 dequantization. */
  async function expectMatchesDequantized(q: string, name: string): Promise<void> {
    const d = join(root, `${name}-f32`);
    dequantizeCheckpoint(q, d);
    // Prompt long enough that prefill takes matmul_q (> 2 rows); decode takes matvec_q.
    const a = await greedy(await openRunner(q), prompt, 16);
    const b = await greedy(await openRunner(d), prompt, 16);
    let maxDiff = 0;
    let maxAbs = 0;
    for (let i = 0; i < a.promptLogits.length; i++) {
      maxDiff = Math.max(maxDiff, Math.abs(a.promptLogits[i] - b.promptLogits[i]));
      maxAbs = Math.max(maxAbs, Math.abs(b.promptLogits[i]));
    }
    // f32 sums of ~100-term products of unit-scale values in different orders: errors of
    // a few ulps per layer, far below 1e-3 of the logit scale.
    expect(maxDiff).toBeLessThan(1e-3 * Math.max(1, maxAbs));
    expect(a.tokens).toEqual(b.tokens);
  }

  const cases: Array<[QuantBits, number]> = [[2, 32], [3, 64], [4, 32], [4, 64], [4, 128], [5, 128], [6, 64], [8, 32], [8, 64], [8, 128]];
  for (const [bits, groupSize] of cases) {
    it(`${bits}-bit group ${groupSize} matches its f32 dequantization`, async () => {
      const q = join(root, `q${bits}g${groupSize}`);
      quantizeCheckpoint(base, q, { bits, groupSize });
      await expectMatchesDequantized(q, `q${bits}g${groupSize}`);
    });
  }

  // mlx-lm's mixed_3_6 recipe (3-bit, with 6-bit v_proj and down_proj in layer 1 of 2) on an
  // untied model, plus overrides: an 8-bit group-32 head, a float embedding table, a
  // group-128 k_proj and a 6-bit up_proj in layer 0. So layer 0's stacked q/k/v weight mixes
  // group sizes (3-bit g64 and g128) and its gate/up bit widths (3 and 6: stacked, not
  // interleaved, the GLU its own dispatch), layer 1's q/k/v bit widths (3-bit q/k, 6-bit v),
  // and layer 1's 3-bit gate/up meet a 6-bit down_proj: every matrix loads as stored, a
  // stacked weight's matrices in parts of their own width.
  it('a mixed-bit checkpoint (mixed_3_6 + per-module overrides) matches its f32 dequantization', async () => {
    const untied = join(root, 'bf16-untied');
    makeRandomCheckpoint({ arch: 'qwen3', tokenizer: 'stories', hidden: 128, layers: 2, heads: 4, kvHeads: 2, headDim: 32, intermediate: 256, seed: 8, tie: false, dtype: 'BF16' }, untied);
    const q = join(root, 'mixed');
    const opts: QuantizeOptions = {
      bits: 4, groupSize: 64, recipe: 'mixed_3_6',
      modules: {
        lm_head: { bits: 8, groupSize: 32 }, 'model.embed_tokens': false, 'model.layers.0.self_attn.k_proj': { bits: 3, groupSize: 128 },
        'model.layers.0.mlp.up_proj': { bits: 6, groupSize: 64 },
      },
    };
    quantizeCheckpoint(untied, q, opts);
    const config = JSON.parse(readFileSync(join(q, 'config.json'), 'utf8'));
    expect(config.quantization).toMatchObject({
      bits: 3, group_size: 64, mode: 'affine',
      lm_head: { bits: 8, group_size: 32 },
      'model.embed_tokens': false,
      'model.layers.0.self_attn.k_proj': { bits: 3, group_size: 128 },
      'model.layers.0.mlp.up_proj': { bits: 6, group_size: 64 },
      'model.layers.1.self_attn.v_proj': { bits: 6, group_size: 64 },
      'model.layers.1.mlp.down_proj': { bits: 6, group_size: 64 },
    });
    expect(config.quantization['model.layers.0.mlp.down_proj']).toBeUndefined();
    const tensors = listCheckpointTensors(q);
    expect(tensors.get('model.embed_tokens.weight')!.info.dtype).toBe('BF16');
    expect(tensors.get('model.layers.1.mlp.down_proj.weight')!.info.shape).toEqual([128, (256 * 6) / 32]);
    const model = await loadModel(await testGpu(), q, { maxTokens: 16, maxSeqs: 1, kvTokens: 32, maxContext: 32, blockSize: 16, kvTypes: SERVER_KV_TYPES });
    expect(model.weightFormat.split(', ').sort()).toEqual(['bf16', 'q3 g128', 'q3 g64', 'q6 g64', 'q8 g32']);
    // Layer 0's gate/up (3- and 6-bit) take the GLU's own dispatch; layer 1's interleave.
    expect(model.ops.pipelines.list().filter((s) => s.key.startsWith('glu/')).length).toBe(1);
    await expectMatchesDequantized(q, 'mixed');
  });

  // The CLI writes the same checkpoints: a recipe, module overrides (bits/group, float), and
  // a usage error for a bit width mlx does not pack.
  it('mlxcel-quantize writes mixed-bit checkpoints and refuses bad flags', () => {
    const cli = (args: string[]) => spawnSync(process.execPath, ['--import', 'tsx', 'src/quantize-cli.ts', ...args], { encoding: 'utf8' });
    const out = join(root, 'cli-mixed');
    const r = cli(['--model', base, '--out', out, '--recipe', 'mixed_2_6', '--group-size', '32', '--module', 'model.embed_tokens=8/64', '--module', 'model.layers.0.mlp.gate_proj=float']);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/with recipe mixed_2_6 \(group size 32\)/);
    const q = JSON.parse(readFileSync(join(out, 'config.json'), 'utf8')).quantization;
    expect(q).toMatchObject({ bits: 2, group_size: 32, 'model.embed_tokens': { bits: 8, group_size: 64 }, 'model.layers.0.mlp.gate_proj': false, 'model.layers.1.mlp.down_proj': { bits: 6, group_size: 32 } });
    const tensors = listCheckpointTensors(out);
    expect(tensors.get('model.layers.0.mlp.gate_proj.weight')!.info.dtype).toBe('BF16');
    expect(tensors.get('model.layers.0.self_attn.q_proj.weight')!.info.shape).toEqual([128, (128 * 2) / 32]);
    const bad = cli(['--model', base, '--out', join(root, 'cli-bad'), '--bits', '7']);
    expect(bad.status).toBe(2);
    expect(bad.stderr).toMatch(/^usage: mlxcel-quantize/);
    const badModule = cli(['--model', base, '--out', join(root, 'cli-bad'), '--module', 'lm_head=4/16']);
    expect(badModule.status).toBe(2);
    expect(badModule.stderr).toMatch(/--module lm_head=4\/16: expected PATH=BITS/);
  });

  // A bit width or group size the engine does not load, or a module entry that disagrees
  // with the stored shapes, is refused at load with the field or tensor named.
  it('refuses what it cannot load, naming the field or tensor', async () => {
    const q = join(root, 'refuse');
    quantizeCheckpoint(base, q, { bits: 3, groupSize: 64 });
    const configPath = join(q, 'config.json');
    const good = readFileSync(configPath, 'utf8');
    const edit = (f: (c: { quantization: Record<string, unknown>; num_key_value_heads: number }) => void) => {
      const c = JSON.parse(good);
      f(c);
      c.quantization_config = c.quantization;
      writeFileSync(configPath, JSON.stringify(c));
    };
    const load = async () => loadModel(await testGpu(), q, { maxTokens: 16, maxSeqs: 1, kvTokens: 32, maxContext: 32, blockSize: 16, kvTypes: SERVER_KV_TYPES });
    edit((c) => { c.quantization.bits = 7; });
    await expect(load()).rejects.toThrow(/quantization\.bits 7 is not supported/);
    edit((c) => { c.quantization.group_size = 16; });
    await expect(load()).rejects.toThrow(/quantization\.group_size 16 is not supported/);
    edit((c) => { c.quantization['model.layers.0.mlp.down_proj'] = { bits: 4, group_size: 64 }; });
    await expect(load()).rejects.toThrow(/model\.layers\.0\.mlp\.down_proj\.weight .*do not match 4-bit, group size 64/);
    edit((c) => { c.quantization['model.layers.1.mlp.up_proj'] = false; });
    await expect(load()).rejects.toThrow(/model\.layers\.1\.mlp\.up_proj\.weight: packed uint32 weight without quantization/);
    edit((c) => { c.quantization.mode = 'nvfp4'; });
    await expect(load()).rejects.toThrow(/quantization\.mode "nvfp4" is not supported/);
    // A tensor whose shape the config does not give.
    edit((c) => { c.num_key_value_heads = 1; });
    await expect(load()).rejects.toThrow(/model\.layers\.0\.self_attn\.k_proj\.weight holds \[64, 128\] values, expected \[32, 128\]/);
    // A float k_proj between quantized q_proj and v_proj: one stacked weight cannot hold both.
    const mixed = join(root, 'refuse-stack');
    quantizeCheckpoint(base, mixed, { bits: 4, groupSize: 64, modules: { 'model.layers.0.self_attn.k_proj': false } });
    await expect(loadModel(await testGpu(), mixed, { maxTokens: 16, maxSeqs: 1, kvTokens: 32, maxContext: 32, blockSize: 16, kvTypes: SERVER_KV_TYPES }))
      .rejects.toThrow(/model\.layers\.0\.self_attn\.q_proj \+ model\.layers\.0\.self_attn\.k_proj \+ model\.layers\.0\.self_attn\.v_proj: matrices of different widths or formats \(4-bit, bf16, 4-bit\) cannot be stacked/);
  });

  // Decode steps there run matvec_q_workgroup.wgsl and attention_decode_workgroup.wgsl; the
  // prefill kernels are the same on both sides.
  it('4-bit group 64 decodes the same through the GPU layouts (Ops told the adapter is a GPU) as through the CPU ones', async () => {
    const q = join(root, 'gpu-layouts-q4g64');
    quantizeCheckpoint(base, q, { bits: 4, groupSize: 64 });
    const cpu = await openRunner(q);
    const gpu = await openRunner(q, 256, { asGpu: true });
    const a = await greedy(cpu, prompt, 16);
    const b = await greedy(gpu, prompt, 16);
    expect(b.tokens).toEqual(a.tokens);
    // The last decode step's logits: summation order differs, nothing else.
    const la = await cpu.readLogits(1);
    const lb = await gpu.readLogits(1);
    let maxDiff = 0;
    let maxAbs = 0;
    for (let i = 0; i < la.length; i++) {
      maxDiff = Math.max(maxDiff, Math.abs(la[i] - lb[i]));
      maxAbs = Math.max(maxAbs, Math.abs(la[i]));
    }
    expect(maxDiff).toBeLessThan(1e-3 * Math.max(1, maxAbs));
  });
});
