// A slot file (POST /slots/:id?action=save|restore): a slot's tokens and their KV, read
// back from the GPU. Layout, little-endian:
//   magic "MLXCELKV" | u32 version | u32 header bytes | header JSON (SlotFileHeader)
//   | u32 tokens[n] | f32 KV: per layer, keys then values, each [n, kvHeads * headDim]
// The header names the model (the prompt cache's model identity) and the KV layout; a file
// whose header differs from the loaded model's is refused rather than read as garbage.
const MAGIC = 'MLXCELKV';
const VERSION = 1;

export interface SlotFileHeader {
  model: string;
  layers: number;
  kv_heads: number;
  head_dim: number;
  dtype: 'f32';
  tokens: number;
}

/** A file that is not a slot file of the loaded model. */
export class SlotFileError extends Error {}

export function encodeSlotFile(header: SlotFileHeader, tokens: number[], kv: Float32Array): Buffer {
  const json = Buffer.from(JSON.stringify(header));
  const head = Buffer.alloc(16);
  head.write(MAGIC, 0, 'latin1');
  head.writeUInt32LE(VERSION, 8);
  head.writeUInt32LE(json.length, 12);
  const ids = Buffer.from(Uint32Array.from(tokens).buffer);
  return Buffer.concat([head, json, ids, Buffer.from(kv.buffer, kv.byteOffset, kv.byteLength)]);
}

/** Reads a slot file written for a model with header `expected` (its tokens field aside). */
export function decodeSlotFile(data: Buffer, expected: Omit<SlotFileHeader, 'tokens'>): { tokens: number[]; kv: Float32Array } {
  if (data.length < 16 || data.toString('latin1', 0, 8) !== MAGIC) throw new SlotFileError('not a slot file');
  const version = data.readUInt32LE(8);
  if (version !== VERSION) throw new SlotFileError(`slot file version ${version}, this server reads ${VERSION}`);
  const jsonEnd = 16 + data.readUInt32LE(12);
  let header: SlotFileHeader;
  try {
    header = JSON.parse(data.toString('utf8', 16, jsonEnd)) as SlotFileHeader;
  } catch {
    throw new SlotFileError('the slot file header is not valid JSON');
  }
  for (const key of Object.keys(expected) as Array<keyof typeof expected>) {
    if (header[key] !== expected[key]) {
      const what = key === 'model' ? 'was saved from another model' : `has ${key} ${String(header[key])}, the loaded model ${String(expected[key])}`;
      throw new SlotFileError(`the slot file ${what}`);
    }
  }
  const n = header.tokens;
  const rowFloats = expected.kv_heads * expected.head_dim;
  const kvFloats = expected.layers * 2 * n * rowFloats;
  if (!Number.isInteger(n) || n < 0 || data.length !== jsonEnd + 4 * n + 4 * kvFloats) throw new SlotFileError('the slot file is truncated or its size does not match its header');
  // Copied out: the file's buffer offsets need not be 4-byte aligned.
  const body = new Uint8Array(data.subarray(jsonEnd)).buffer;
  return { tokens: [...new Uint32Array(body, 0, n)], kv: new Float32Array(body, 4 * n, kvFloats) };
}
