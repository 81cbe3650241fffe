// A slot file (POST /slots/:id?action=save|restore): a slot's tokens and their KV, read
// back from the GPU. Layout, little-endian:
//   magic "MLXCELKV" | u32 version | u32 header bytes | header JSON (SlotFileHeader)
//   | u32 tokens[n] | KV: per layer, keys then values, each [n, kvHeads * headDim] values
//     of the header's k_dtype and v_dtype | a hybrid model's recurrent state after the n
//     tokens: state_bytes bytes, every recurrent layer's in order (f32)
// The header names the model (the prompt cache's model identity) and the KV and state
// layout; a file whose header differs from the loaded model's is refused rather than read
// as garbage. Version 1 files (f32 keys and values) and version 2 files (no state: a
// transformer's) still load. A file whose KV types differ from the
// cache's is converted on restore (f32 to f16 rounds to nearest even, as the cache's own
// stores do).
import { f16ToF32, f32ToF16 } from '../models/half.js';
import type { KvType } from '../runtime/tensors.js';

const MAGIC = 'MLXCELKV';
const VERSION = 3;

/** The model and KV layout a slot file must match to be read into the cache. */
export interface SlotLayout {
  model: string;
  layers: number;
  kv_heads: number;
  head_dim: number;
  /** Bytes of the recurrent state (0 for a transformer). */
  state_bytes: number;
}

export interface SlotFileHeader extends SlotLayout {
  k_dtype: KvType;
  v_dtype: KvType;
  tokens: number;
}

/** A file that is not a slot file of the loaded model. */
export class SlotFileError extends Error {}

const VALUE_BYTES: Record<KvType, number> = { f32: 4, f16: 2 };

export function encodeSlotFile(header: SlotFileHeader, tokens: number[], kv: Uint8Array, state: Uint8Array): Buffer {
  const json = Buffer.from(JSON.stringify(header));
  const head = Buffer.alloc(16);
  head.write(MAGIC, 0, 'latin1');
  head.writeUInt32LE(VERSION, 8);
  head.writeUInt32LE(json.length, 12);
  const ids = Buffer.from(Uint32Array.from(tokens).buffer);
  return Buffer.concat([head, json, ids, Buffer.from(kv.buffer, kv.byteOffset, kv.byteLength), Buffer.from(state.buffer, state.byteOffset, state.byteLength)]);
}

/**
 * Reads a slot file written for a model of `layout`, its KV converted to the cache's
 * `types` (per layer, keys then values, as KvRows.write takes them), and its recurrent
 * state (empty for a transformer).
 */
export function decodeSlotFile(data: Buffer, layout: SlotLayout, types: { k: KvType; v: KvType }): { tokens: number[]; kv: Uint8Array; state: Uint8Array } {
  if (data.length < 16 || data.toString('latin1', 0, 8) !== MAGIC) throw new SlotFileError('not a slot file');
  const version = data.readUInt32LE(8);
  if (!(version >= 1 && version <= VERSION)) throw new SlotFileError(`slot file version ${version}, this server reads 1 to ${VERSION}`);
  const jsonEnd = 16 + data.readUInt32LE(12);
  let header: SlotFileHeader;
  try {
    const json = JSON.parse(data.toString('utf8', 16, jsonEnd)) as SlotFileHeader & { dtype?: string };
    // Version 1 stored f32 keys and values under one `dtype`; versions before 3 no state.
    header = { ...(version < 3 ? { state_bytes: 0 } : {}), ...json, ...(version === 1 ? { k_dtype: 'f32', v_dtype: 'f32' } : {}) };
  } catch {
    throw new SlotFileError('the slot file header is not valid JSON');
  }
  for (const key of Object.keys(layout) as Array<keyof SlotLayout>) {
    if (header[key] !== layout[key]) {
      const what = key === 'model' ? 'was saved from another model' : `has ${key} ${String(header[key])}, the loaded model ${String(layout[key])}`;
      throw new SlotFileError(`the slot file ${what}`);
    }
  }
  for (const side of ['k_dtype', 'v_dtype'] as const) {
    if (!(header[side] in VALUE_BYTES)) throw new SlotFileError(`the slot file has ${side} ${String(header[side])}, not f32 or f16`);
  }
  const n = header.tokens;
  const rowValues = layout.kv_heads * layout.head_dim;
  const stored = { k: header.k_dtype, v: header.v_dtype };
  const layerBytes = n * rowValues * (VALUE_BYTES[stored.k] + VALUE_BYTES[stored.v]);
  const kvEnd = 4 * n + layout.layers * layerBytes;
  if (!Number.isInteger(n) || n < 0 || data.length !== jsonEnd + kvEnd + layout.state_bytes) throw new SlotFileError('the slot file is truncated or its size does not match its header');
  // Copied out: the file's buffer offsets need not be 4-byte aligned.
  const body = new Uint8Array(data.subarray(jsonEnd));
  const kv = body.subarray(4 * n, kvEnd);
  return {
    tokens: [...new Uint32Array(body.buffer, 0, n)],
    kv: stored.k === types.k && stored.v === types.v ? kv : convertKv(kv, layout.layers, n * rowValues, stored, types),
    state: body.subarray(kvEnd),
  };
}

/** KV bytes (per layer, `values` keys then `values` values) converted from types `from` to `to`. */
function convertKv(kv: Uint8Array, layers: number, values: number, from: { k: KvType; v: KvType }, to: { k: KvType; v: KvType }): Uint8Array {
  const out = new Uint8Array(layers * values * (VALUE_BYTES[to.k] + VALUE_BYTES[to.v]));
  let [i, o] = [0, 0];
  for (let l = 0; l < layers; l++) {
    for (const side of ['k', 'v'] as const) {
      const src = kv.slice(i, (i += values * VALUE_BYTES[from[side]]));
      const dst = out.subarray(o, (o += values * VALUE_BYTES[to[side]]));
      if (from[side] === to[side]) dst.set(src);
      else if (from[side] === 'f32') new Uint16Array(dst.buffer, dst.byteOffset, values).set(f32ToF16(new Float32Array(src.buffer)));
      else new Float32Array(dst.buffer, dst.byteOffset, values).set(f16ToF32(new Uint16Array(src.buffer)));
    }
  }
  return out;
}
