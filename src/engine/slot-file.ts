// A slot file (POST /slots/:id?action=save|restore): a slot's tokens and their KV, read
// back from the GPU. Layout, little-endian:
//   magic "MLXCELKV" | u32 version | u32 header bytes | header JSON (SlotFileHeader)
//   | u32 tokens[n] | KV: per paged layer (kv_layout 'p'), keys then values, each
//     [n, kvHeads * headDim] values of the header's k_dtype and v_dtype; then per ring
//     layer ('r', a sliding-window layer that keeps its window), keys then values of the
//     last ring_tokens positions, each [ring_tokens, kvHeads * headDim] | a hybrid model's
//     recurrent state after the n tokens: state_bytes bytes, every recurrent layer's in
//     order (f32)
// The header names the model (the prompt cache's model identity) and the KV and state
// layout; a file whose header differs from the loaded model's is refused rather than read
// as garbage, except that a layer the file keeps paged serves any layout: a ring layer
// takes its last window positions, a layer without KV (kv_layout '-') none of them (a file
// saved with --swa-full restores into a server without it). Version 1 (f32 keys and
// values) and 2 files hold every position of every layer, paged, and no state (a
// transformer's), and still load. A file whose KV types differ from the cache's is
// converted on restore (f32 to f16 rounds to nearest even, as the cache's own stores do).
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
  /** Per layer where its KV lives: 'p' paged (every position), 'r' a ring (the last positions), '-' nowhere (a recurrent layer). */
  kv_layout: string;
  /** Bytes of the recurrent state (0 for a transformer). */
  state_bytes: number;
}

export interface SlotFileHeader extends SlotLayout {
  k_dtype: KvType;
  v_dtype: KvType;
  tokens: number;
  /** Positions the ring layers keep: the last ones of `tokens`. */
  ring_tokens: number;
}

/** A slot file's KV as the cache takes it, the paged layers' (KvRows.write) and the ring layers' (KvRings.write), and its recurrent state (empty for a transformer). */
export interface SlotFileKv {
  tokens: number[];
  paged: Uint8Array;
  ring: Uint8Array;
  ringTokens: number;
  state: Uint8Array;
}

/** A file that is not a slot file of the loaded model. */
export class SlotFileError extends Error {}

const VALUE_BYTES: Record<KvType, number> = { f32: 4, f16: 2 };

export function encodeSlotFile(header: SlotFileHeader, tokens: number[], paged: Uint8Array, ring: Uint8Array, state: Uint8Array): Buffer {
  const json = Buffer.from(JSON.stringify(header));
  const head = Buffer.alloc(16);
  head.write(MAGIC, 0, 'latin1');
  head.writeUInt32LE(VERSION, 8);
  head.writeUInt32LE(json.length, 12);
  const ids = Buffer.from(Uint32Array.from(tokens).buffer);
  const bytes = (b: Uint8Array) => Buffer.from(b.buffer, b.byteOffset, b.byteLength);
  return Buffer.concat([head, json, ids, bytes(paged), bytes(ring), bytes(state)]);
}

/**
 * Reads a slot file written for a model of `layout`, its KV converted to the cache's
 * `types`; a ring layer the file keeps paged takes its last `window` positions.
 */
export function decodeSlotFile(data: Buffer, layout: SlotLayout, types: { k: KvType; v: KvType }, window: number): SlotFileKv {
  if (data.length < 16 || data.toString('latin1', 0, 8) !== MAGIC) throw new SlotFileError('not a slot file');
  const version = data.readUInt32LE(8);
  if (version < 1 || version > VERSION) throw new SlotFileError(`slot file version ${version}, this server reads 1 to ${VERSION}`);
  const jsonEnd = 16 + data.readUInt32LE(12);
  let header: SlotFileHeader;
  try {
    const json = JSON.parse(data.toString('utf8', 16, jsonEnd)) as SlotFileHeader;
    // Version 1 stored f32 keys and values under one `dtype`; versions 1 and 2 every position of every layer and no state.
    const all = { kv_layout: 'p'.repeat(layout.layers), ring_tokens: 0, state_bytes: 0 };
    header = version === 1 ? { ...json, ...all, k_dtype: 'f32', v_dtype: 'f32' } : version === 2 ? { ...json, ...all } : json;
  } catch {
    throw new SlotFileError('the slot file header is not valid JSON');
  }
  for (const key of Object.keys(layout) as Array<keyof SlotLayout>) {
    if (key === 'kv_layout' && servesLayout(header.kv_layout, layout.kv_layout)) continue;
    if (header[key] !== layout[key]) {
      const what = key === 'model' ? 'was saved from another model' : `has ${key} ${String(header[key])}, the loaded model ${String(layout[key])}`;
      throw new SlotFileError(`the slot file ${what}`);
    }
  }
  for (const side of ['k_dtype', 'v_dtype'] as const) {
    if (!(header[side] in VALUE_BYTES)) throw new SlotFileError(`the slot file has ${side} ${String(header[side])}, not f32 or f16`);
  }
  const n = header.tokens;
  const r = header.ring_tokens;
  if (!Number.isInteger(n) || n < 0 || !Number.isInteger(r) || r < 0 || r > n) throw new SlotFileError('the slot file header has no valid token counts');
  const rowValues = layout.kv_heads * layout.head_dim;
  const stored = { k: header.k_dtype, v: header.v_dtype };
  const rowsOf = (where: string) => (where === 'p' ? n : where === 'r' ? r : 0);
  const kvBytes = [...header.kv_layout].reduce((sum, where) => sum + rowsOf(where) * rowValues * (VALUE_BYTES[stored.k] + VALUE_BYTES[stored.v]), 0);
  if (data.length !== jsonEnd + 4 * n + kvBytes + layout.state_bytes) throw new SlotFileError('the slot file is truncated or its size does not match its header');
  // Copied out: the file's buffer offsets need not be 4-byte aligned.
  const body = new Uint8Array(data.subarray(jsonEnd));
  // Each layer's keys and values in the cache's types; the file keeps the paged layers first, as the cache reads them.
  const layersAt = (kvLayout: string, where: string) => [...kvLayout].flatMap((w, l) => (w === where ? [l] : []));
  const planes = new Map<number, { k: Uint8Array; v: Uint8Array }>();
  let offset = 4 * n;
  for (const l of [...layersAt(header.kv_layout, 'p'), ...layersAt(header.kv_layout, 'r')]) {
    const rows = rowsOf(header.kv_layout[l]!);
    const plane = (side: 'k' | 'v') => convert(body.subarray(offset, (offset += rows * rowValues * VALUE_BYTES[stored[side]])), stored[side], types[side]);
    const k = plane('k');
    planes.set(l, { k, v: plane('v') });
  }
  // Every ring layer keeps the same last positions: the file's rings', or a window of its paged layers'.
  const ringTokens = Math.min(n, ...layersAt(layout.kv_layout, 'r').map((l) => (header.kv_layout[l] === 'r' ? r : window)));
  /** The last `rows` rows of the keys and values of the model's layers kept `where`. */
  const last = (where: string, rows: number) => Buffer.concat(layersAt(layout.kv_layout, where).flatMap((l) => {
    const { k, v } = planes.get(l)!;
    return [k.subarray(k.length - rows * rowValues * VALUE_BYTES[types.k]), v.subarray(v.length - rows * rowValues * VALUE_BYTES[types.v])];
  }));
  const rings = layersAt(layout.kv_layout, 'r').length > 0;
  return { tokens: [...new Uint32Array(body.buffer, 0, n)], paged: last('p', n), ring: last('r', ringTokens), ringTokens: rings ? ringTokens : 0, state: body.subarray(offset) };
}

/** Whether a file's KV layout holds what a model of `model`'s needs: each layer as it keeps it, or paged (every position). */
function servesLayout(file: unknown, model: string): boolean {
  return typeof file === 'string' && file.length === model.length && [...model].every((where, l) => file[l] === where || file[l] === 'p');
}

/** A plane of `from` values as `to` values. */
function convert(src: Uint8Array, from: KvType, to: KvType): Uint8Array {
  if (from === to) return src;
  if (from === 'f32') {
    const f32 = new Float32Array(src.slice().buffer);
    return new Uint8Array(f32ToF16(f32).buffer);
  }
  return new Uint8Array(f16ToF32(new Uint16Array(src.slice().buffer)).buffer);
}

