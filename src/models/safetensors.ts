// The safetensors container: an 8-byte little-endian header length, a JSON header naming
// each tensor's dtype, shape and [begin, end) byte range, then the raw little-endian data.
// The reader returns offsets only, so a loader can read each tensor straight from the file
// into its destination buffer without an intermediate copy.
import { closeSync, existsSync, fstatSync, openSync, readFileSync, readSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { bf16ToF32, f16ToF32 } from './half.js';

export type SafetensorsDtype = 'F64' | 'F32' | 'F16' | 'BF16' | 'I64' | 'I32' | 'U32' | 'I16' | 'U16' | 'I8' | 'U8' | 'BOOL';

export const DTYPE_BYTES: Record<SafetensorsDtype, number> = {
  F64: 8, F32: 4, F16: 2, BF16: 2, I64: 8, I32: 4, U32: 4, I16: 2, U16: 2, I8: 1, U8: 1, BOOL: 1,
};

export interface SafetensorsTensorInfo {
  dtype: SafetensorsDtype;
  shape: number[];
  /** [begin, end) in bytes, relative to `dataStart`. */
  data_offsets: [number, number];
}

export interface SafetensorsHeader {
  tensors: Record<string, SafetensorsTensorInfo>;
  /** File offset of the first data byte (8 + header length). */
  dataStart: number;
  /** The optional `__metadata__` string map. */
  metadata: Record<string, string>;
}

// Guards against reading a garbage length as a multi-gigabyte allocation (the Rust
// implementation uses the same 100 MB limit).
const MAX_HEADER_BYTES = 100_000_000;

function readExactly(fd: number, length: number, position: number): Buffer {
  const buf = Buffer.alloc(length);
  let done = 0;
  while (done < length) {
    const n = readSync(fd, buf, done, length - done, position + done);
    if (n === 0) throw new Error('unexpected end of file');
    done += n;
  }
  return buf;
}

export function readSafetensorsHeader(path: string): SafetensorsHeader {
  const fd = openSync(path, 'r');
  try {
    const fileSize = fstatSync(fd).size;
    const headerLen = Number(readExactly(fd, 8, 0).readBigUInt64LE(0));
    if (headerLen > MAX_HEADER_BYTES || 8 + headerLen > fileSize) throw new Error(`${path}: bad safetensors header length ${headerLen}`);
    const json = JSON.parse(readExactly(fd, headerLen, 8).toString('utf8')) as Record<string, unknown>;
    const dataStart = 8 + headerLen;
    const tensors: Record<string, SafetensorsTensorInfo> = {};
    let metadata: Record<string, string> = {};
    for (const [name, value] of Object.entries(json)) {
      if (name === '__metadata__') {
        metadata = value as Record<string, string>;
        continue;
      }
      const t = value as SafetensorsTensorInfo;
      const elemBytes = DTYPE_BYTES[t.dtype];
      if (elemBytes === undefined) throw new Error(`${path}: ${name}: unknown dtype ${t.dtype}`);
      const [begin, end] = t.data_offsets;
      const expected = t.shape.reduce((a, b) => a * b, 1) * elemBytes;
      if (end - begin !== expected || begin < 0 || dataStart + end > fileSize) {
        throw new Error(`${path}: ${name}: data_offsets [${begin}, ${end}] do not fit shape [${t.shape}] ${t.dtype} in a ${fileSize}-byte file`);
      }
      tensors[name] = { dtype: t.dtype, shape: t.shape, data_offsets: [begin, end] };
    }
    return { tensors, dataStart, metadata };
  } finally {
    closeSync(fd);
  }
}

/** Reads one tensor's raw bytes (for small tensors and tools; loaders should read ranges). */
export function readSafetensorsBytes(path: string, header: SafetensorsHeader, name: string): Uint8Array {
  const t = header.tensors[name];
  if (!t) throw new Error(`${path}: no tensor ${name}`);
  const fd = openSync(path, 'r');
  try {
    const [begin, end] = t.data_offsets;
    const buf = readExactly(fd, end - begin, header.dataStart + begin);
    // A fresh ArrayBuffer of exactly this size, so typed-array views line up at offset 0.
    return new Uint8Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength));
  } finally {
    closeSync(fd);
  }
}

export interface CheckpointTensor {
  name: string;
  /** The .safetensors file holding it. */
  path: string;
  header: SafetensorsHeader;
  info: SafetensorsTensorInfo;
}

/**
 * Every tensor of a Hugging Face checkpoint directory: `model.safetensors`, or the shards
 * named by `model.safetensors.index.json` (mlx-whisper's `weights.safetensors` where neither
 * is there). Headers only; read data with readSafetensorsBytes.
 */
export function listCheckpointTensors(dir: string): Map<string, CheckpointTensor> {
  const index = join(dir, 'model.safetensors.index.json');
  const single = !existsSync(join(dir, 'model.safetensors')) && existsSync(join(dir, 'weights.safetensors')) ? 'weights.safetensors' : 'model.safetensors';
  const files = existsSync(index)
    ? [...new Set(Object.values((JSON.parse(readFileSync(index, 'utf8')) as { weight_map: Record<string, string> }).weight_map))]
    : [single];
  const out = new Map<string, CheckpointTensor>();
  for (const file of files) {
    const path = join(dir, file);
    const header = readSafetensorsHeader(path);
    for (const [name, info] of Object.entries(header.tensors)) out.set(name, { name, path, header, info });
  }
  return out;
}

/** A float tensor (F32/F16/BF16) of a checkpoint, widened to f32. */
export function readTensorF32(tensor: CheckpointTensor): Float32Array {
  const bytes = readSafetensorsBytes(tensor.path, tensor.header, tensor.name);
  switch (tensor.info.dtype) {
    case 'F32': return new Float32Array(bytes.buffer);
    case 'F16': return f16ToF32(new Uint16Array(bytes.buffer));
    case 'BF16': return bf16ToF32(new Uint16Array(bytes.buffer));
    default: throw new Error(`${tensor.name}: dtype ${tensor.info.dtype} is not a float type`);
  }
}

export interface SafetensorsWriteTensor {
  name: string;
  dtype: 'F32' | 'F16' | 'BF16' | 'U32' | 'U8';
  shape: number[];
  /** Little-endian element data; F16/BF16 as raw 16-bit patterns (e.g. a Uint16Array). */
  data: Uint8Array | Float32Array | Uint16Array | Uint32Array | Int32Array;
}

/**
 * Writes tensors in the given order, back to back with no gaps (the Rust reader rejects
 * holes). Like Hugging Face's writer, the JSON header is padded with spaces to a multiple
 * of 8 bytes so the data section starts 8-byte aligned.
 */
export function writeSafetensors(path: string, tensors: SafetensorsWriteTensor[], metadata?: Record<string, string>): void {
  const header: Record<string, unknown> = {};
  if (metadata) header.__metadata__ = metadata;
  let offset = 0;
  for (const t of tensors) {
    if (t.name in header) throw new Error(`duplicate tensor name ${t.name}`);
    const bytes = t.shape.reduce((a, b) => a * b, 1) * DTYPE_BYTES[t.dtype];
    if (bytes !== t.data.byteLength) throw new Error(`${t.name}: ${t.data.byteLength} bytes of data for shape [${t.shape}] ${t.dtype}`);
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + bytes] };
    offset += bytes;
  }
  let json = Buffer.from(JSON.stringify(header), 'utf8');
  const padded = Math.ceil(json.length / 8) * 8;
  json = Buffer.concat([json, Buffer.alloc(padded - json.length, 0x20)]);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.length));

  const fd = openSync(path, 'w');
  try {
    writeAll(fd, len);
    writeAll(fd, json);
    for (const t of tensors) writeAll(fd, new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength));
  } finally {
    closeSync(fd);
  }
}

function writeAll(fd: number, bytes: Uint8Array): void {
  let done = 0;
  while (done < bytes.length) done += writeSync(fd, bytes, done, bytes.length - done);
}
