// The llama.cpp side of the bench: a GGUF of a bench checkpoint's shape (bench-model.ts) with
// random weights in Q4_0, the llama.cpp format closest to mlx-lm 4-bit group 64 (both spend
// 4.5 bits per weight: Q4_0 a 16-bit scale per 32 weights, mlx a bf16 scale and bias per 64).
// Only speed is measured on it, so its weights need not match ours: the shape does.
//
// The metadata (the architecture's keys and the tokenizer) comes from the test
// helper's converter, test/helpers/gguf-writer.ts: it is run on a stub Hugging Face folder
// (the full config, the real tokenizer, and two 1-element tensors), and the key/value
// section of its output is copied byte for byte into the new file, with general.file_type
// set to MOSTLY_Q4_0. Tensor infos and data are written here.
//
// Q4_0 (ggml type 2): blocks of 32 weights, each an f16 scale d then 16 bytes of nibbles
// (byte j holds weight j in its low nibble and weight j + 16 in its high one); weight =
// (q - 8) * d. Random nibbles have std 4.6 around 7.5, so d = 1 / sqrt(fan_in) / 4.6 gives
// weights of std ~1/sqrt(fan_in) and activations that stay O(1) through the layers.
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, renameSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { f32ToF16Bits } from '../src/models/half.js';
import { writeSafetensors } from '../src/models/safetensors.js';
import { familyTensors } from '../test/helpers/family-tensors.js';
import { readGguf, writeGgufFromHf } from '../test/helpers/gguf-writer.js';
import { PHI4_LONGROPE, QWEN3_06B, writeBenchFiles, type BenchShape } from './bench-model.js';

const ALIGNMENT = 32;
const GGML_F32 = 0;
const GGML_Q4_0 = 2;
const LLAMA_FTYPE_MOSTLY_Q4_0 = 2;
const Q4_0_BLOCK = 32;
const Q4_0_BLOCK_BYTES = 18;

type Shape = BenchShape;

interface Tensor {
  name: string;
  /** ggml order: fastest-varying (columns) first. */
  dims: number[];
  type: number;
  nbytes: number;
  data: () => Uint8Array;
}

const pad = (n: number) => (ALIGNMENT - (n % ALIGNMENT)) % ALIGNMENT;

/** xorshift32 bytes; deterministic per seed. */
function randomBytes(n: number, seed: number): Uint8Array {
  const words = new Uint32Array(Math.ceil(n / 4));
  let x = seed >>> 0 || 1;
  for (let i = 0; i < words.length; i++) {
    x ^= x << 13; x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5; x >>>= 0;
    words[i] = x;
  }
  return new Uint8Array(words.buffer, 0, n);
}

/** A [rows, cols] Q4_0 matrix, or with `stack` [stack, rows, cols] (llama.cpp's stacked experts). */
function q4_0(name: string, rows: number, cols: number, seed: number, stack?: number): Tensor {
  if (cols % Q4_0_BLOCK !== 0) throw new Error(`${name}: ${cols} columns is not a multiple of ${Q4_0_BLOCK}`);
  const blocks = ((stack ?? 1) * rows * cols) / Q4_0_BLOCK;
  const nbytes = blocks * Q4_0_BLOCK_BYTES;
  return {
    name,
    dims: stack ? [cols, rows, stack] : [cols, rows],
    type: GGML_Q4_0,
    nbytes,
    data: () => {
      const bytes = randomBytes(nbytes, seed);
      const d = f32ToF16Bits(1 / Math.sqrt(cols) / 4.6);
      for (let b = 0; b < blocks; b++) {
        bytes[b * Q4_0_BLOCK_BYTES] = d & 0xff;
        bytes[b * Q4_0_BLOCK_BYTES + 1] = d >> 8;
      }
      return bytes;
    },
  };
}

function filled(name: string, n: number, v = 1): Tensor {
  return { name, dims: [n], type: GGML_F32, nbytes: n * 4, data: () => new Uint8Array(new Float32Array(n).fill(v).buffer) };
}

/** llama.cpp's tensors for each bench family; norms hold the whole multiplier (Gemma's 1 + w too). */
function planTensors(s: Shape): Tensor[] {
  if (s.pattern) return planHybridTensors(s);
  const q = s.heads * s.headDim;
  const kv = s.kvHeads * s.headDim;
  // Tied embeddings: token_embd is also the output matrix (no output.weight).
  const out: Tensor[] = [q4_0('token_embd.weight', s.vocab, s.hidden, 1)];
  if (s.family === 'phi3') out.push(filled('rope_factors_long.weight', PHI4_LONGROPE.factors), filled('rope_factors_short.weight', PHI4_LONGROPE.factors));
  for (let l = 0; l < s.layers; l++) {
    const p = `blk.${l}`;
    const seed = 100 + l * 10;
    out.push(filled(`${p}.attn_norm.weight`, s.hidden), filled(`${p}.ffn_norm.weight`, s.hidden));
    if (s.family === 'phi3') {
      out.push(
        q4_0(`${p}.attn_qkv.weight`, q + 2 * kv, s.hidden, seed + 1),
        q4_0(`${p}.attn_output.weight`, s.hidden, q, seed + 4),
        q4_0(`${p}.ffn_up.weight`, 2 * s.intermediate, s.hidden, seed + 5),
        q4_0(`${p}.ffn_down.weight`, s.hidden, s.intermediate, seed + 7),
      );
      continue;
    }
    if (s.family === 'gemma3_text') out.push(filled(`${p}.post_attention_norm.weight`, s.hidden), filled(`${p}.post_ffw_norm.weight`, s.hidden));
    out.push(
      q4_0(`${p}.attn_q.weight`, q, s.hidden, seed + 1),
      q4_0(`${p}.attn_k.weight`, kv, s.hidden, seed + 2),
      q4_0(`${p}.attn_v.weight`, kv, s.hidden, seed + 3),
      q4_0(`${p}.attn_output.weight`, s.hidden, q, seed + 4),
      filled(`${p}.attn_q_norm.weight`, s.headDim),
      filled(`${p}.attn_k_norm.weight`, s.headDim),
    );
    if (s.moe) {
      const { experts: E, intermediate: I } = s.moe;
      out.push(
        q4_0(`${p}.ffn_gate_inp.weight`, E, s.hidden, seed + 8),
        q4_0(`${p}.ffn_gate_exps.weight`, I, s.hidden, seed + 5, E),
        q4_0(`${p}.ffn_up_exps.weight`, I, s.hidden, seed + 6, E),
        q4_0(`${p}.ffn_down_exps.weight`, s.hidden, I, seed + 7, E),
      );
      continue;
    }
    out.push(
      q4_0(`${p}.ffn_gate.weight`, s.intermediate, s.hidden, seed + 5),
      q4_0(`${p}.ffn_up.weight`, s.intermediate, s.hidden, seed + 6),
      q4_0(`${p}.ffn_down.weight`, s.hidden, s.intermediate, seed + 7),
    );
  }
  out.push(filled('output_norm.weight', s.hidden));
  return out;
}

/**
 * llama.cpp's tensors for the hybrid families (nemotron_h, lfm2), layer by layer as the
 * pattern has them, with the values ours has (bench-model.ts writeHybridBenchModel; A = -1).
 */
function planHybridTensors(s: Shape): Tensor[] {
  const q = s.heads * s.headDim;
  const kv = s.kvHeads * s.headDim;
  const out: Tensor[] = [q4_0('token_embd.weight', s.vocab, s.hidden, 1)];
  const attention = (p: string, seed: number) => [
    q4_0(`${p}.attn_q.weight`, q, s.hidden, seed + 1),
    q4_0(`${p}.attn_k.weight`, kv, s.hidden, seed + 2),
    q4_0(`${p}.attn_v.weight`, kv, s.hidden, seed + 3),
    q4_0(`${p}.attn_output.weight`, s.hidden, q, seed + 4),
  ];
  for (const [l, kind] of [...s.pattern!.slice(0, s.layers)].entries()) {
    const p = `blk.${l}`;
    const seed = 100 + l * 10;
    out.push(filled(`${p}.attn_norm.weight`, s.hidden));
    if (s.family === 'lfm2') {
      if (kind === 'a') out.push(...attention(p, seed), filled(`${p}.attn_q_norm.weight`, s.headDim), filled(`${p}.attn_k_norm.weight`, s.headDim));
      else {
        out.push(
          q4_0(`${p}.shortconv.in_proj.weight`, 3 * s.hidden, s.hidden, seed + 1),
          { ...filled(`${p}.shortconv.conv.weight`, 3 * s.hidden, 0.25), dims: [3, s.hidden] },
          q4_0(`${p}.shortconv.out_proj.weight`, s.hidden, s.hidden, seed + 2),
        );
      }
      out.push(
        filled(`${p}.ffn_norm.weight`, s.hidden),
        q4_0(`${p}.ffn_gate.weight`, s.intermediate, s.hidden, seed + 5),
        q4_0(`${p}.ffn_up.weight`, s.intermediate, s.hidden, seed + 6),
        q4_0(`${p}.ffn_down.weight`, s.hidden, s.intermediate, seed + 7),
      );
      continue;
    }
    if (kind === '*') out.push(...attention(p, seed));
    else if (kind === '-') out.push(q4_0(`${p}.ffn_up.weight`, s.intermediate, s.hidden, seed + 5), q4_0(`${p}.ffn_down.weight`, s.hidden, s.intermediate, seed + 7));
    else {
      const { heads: H, headDim: P, groups: G, state: N, conv: K } = s.mamba!;
      const conv = H * P + 2 * G * N;
      out.push(
        q4_0(`${p}.ssm_in.weight`, 2 * H * P + 2 * G * N + H, s.hidden, seed + 1),
        { ...filled(`${p}.ssm_conv1d.weight`, K * conv, 0.25), dims: [K, conv] },
        filled(`${p}.ssm_conv1d.bias`, conv, 0),
        { ...filled(`${p}.ssm_a`, H, -1), dims: [1, H] },
        { ...filled(`${p}.ssm_d`, H), dims: [1, H] },
        filled(`${p}.ssm_dt.bias`, H, -2),
        { ...filled(`${p}.ssm_norm.weight`, H * P), dims: [(H * P) / G, G] },
        q4_0(`${p}.ssm_out.weight`, s.hidden, H * P, seed + 2),
      );
    }
  }
  out.push(filled(s.family === 'lfm2' ? 'token_embd_norm.weight' : 'output_norm.weight', s.hidden));
  return out;
}

/**
 * Bytes of the Q4_0 matrices one decode token reads (every linear layer plus the tied
 * output; of stacked experts, the chosen topK's share).
 */
export function q4_0DecodeBytes(s: Shape = QWEN3_06B): number {
  const share = (t: Tensor) => (t.dims.length === 3 && s.moe ? s.moe.topK / s.moe.experts : 1);
  return planTensors(s).filter((t) => t.type === GGML_Q4_0).reduce((n, t) => n + t.nbytes * share(t), 0);
}

const u32 = (v: number) => { const b = Buffer.alloc(4); b.writeUInt32LE(v); return b; };
const u64 = (v: number) => { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(v)); return b; };
const gstr = (s: string) => Buffer.concat([u64(Buffer.byteLength(s)), Buffer.from(s, 'utf8')]);

/**
 * The GGUF key/value section for this shape, as gguf-writer.ts writes it from a stub HF
 * folder; returns the raw bytes and the key count, file type set to MOSTLY_Q4_0.
 */
function metadataSection(s: Shape): { bytes: Buffer; count: number } {
  const stub = mkdtempSync(join(tmpdir(), 'mlxcel-gguf-stub-'));
  try {
    writeBenchFiles(stub, s);
    // The converter reads every tensor the family asks for: one-value stand-ins for the
    // matrices, zeros of their own shape for the vectors, which it may reshape (a Mamba-2
    // norm per group); only the metadata is kept, and the tensor infos start with
    // token_embd.weight, the first asked for.
    const config = JSON.parse(readFileSync(join(stub, 'config.json'), 'utf8')) as Record<string, unknown>;
    // Experts are asked for one by one (the GGUF writer stacks them).
    writeSafetensors(join(stub, 'model.safetensors'), familyTensors(config, (name) => /\.experts\.0\./.test(name)).tensors.map((t) => {
      const shape = t.kind === 'vector' ? t.shape : t.shape.map(() => 1);
      return { name: t.name, dtype: 'F32' as const, shape, data: new Float32Array(shape.reduce((a, b) => a * b, 1)) };
    }));
    const path = join(stub, 'stub.gguf');
    writeGgufFromHf(stub, path, { name: `${s.name}-shape-random-q4_0` });
    const info = readGguf(path);
    const file = readFileSync(path);
    // Header: "GGUF", u32 version, u64 tensor count, u64 kv count, then the KVs, then the
    // tensor infos, of which token_embd.weight (2 dims) is first.
    const count = Number(file.readBigUInt64LE(16));
    if (count !== info.metadata.size) throw new Error('stub GGUF: unexpected key count');
    const firstInfo = Buffer.concat([gstr('token_embd.weight'), u32(2)]);
    const kvEnd = file.subarray(0, info.dataStart).lastIndexOf(firstInfo);
    if (kvEnd < 24) throw new Error('stub GGUF: tensor infos not found');
    const bytes = Buffer.from(file.subarray(24, kvEnd));
    const ftypeKey = Buffer.concat([gstr('general.file_type'), u32(4 /* UINT32 */)]);
    const at = bytes.indexOf(ftypeKey);
    if (at < 0) throw new Error('stub GGUF: no general.file_type');
    bytes.writeUInt32LE(LLAMA_FTYPE_MOSTLY_Q4_0, at + ftypeKey.length);
    return { bytes, count };
  } finally {
    rmSync(stub, { recursive: true, force: true });
  }
}

function writeAll(fd: number, bytes: Uint8Array): void {
  let done = 0;
  while (done < bytes.length) done += writeSync(fd, bytes, done, bytes.length - done);
}

/**
 * Writes the Q4_0 bench GGUF to `path` unless it is already there (the file appears only
 * once complete); returns the path.
 */
export function writeBenchGgufQ4_0(path: string, s: Shape = QWEN3_06B): string {
  if (existsSync(path)) return path;
  mkdirSync(dirname(path), { recursive: true });
  const tensors = planTensors(s);
  const kv = metadataSection(s);
  const header: Buffer[] = [Buffer.from('GGUF', 'latin1'), u32(3), u64(tensors.length), u64(kv.count), kv.bytes];
  let offset = 0;
  for (const t of tensors) {
    header.push(gstr(t.name), u32(t.dims.length), ...t.dims.map(u64), u32(t.type), u64(offset));
    offset += t.nbytes + pad(t.nbytes);
  }
  const head = Buffer.concat(header);
  const partial = `${path}.partial`;
  const fd = openSync(partial, 'w');
  try {
    writeAll(fd, head);
    writeAll(fd, new Uint8Array(pad(head.length)));
    for (const t of tensors) {
      const data = t.data();
      if (data.byteLength !== t.nbytes) throw new Error(`${t.name}: ${data.byteLength} bytes, expected ${t.nbytes}`);
      writeAll(fd, data);
      writeAll(fd, new Uint8Array(pad(t.nbytes)));
    }
  } finally {
    closeSync(fd);
  }
  renameSync(partial, path);
  return path;
}
