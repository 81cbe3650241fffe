// PyTorch's checkpoint files (torch.save's zip format: hexgrad's kokoro-v1_0.pth and its
// voices/*.pt), read without Python: the zip's central directory gives each entry's place
// (torch stores them uncompressed), `<archive>/data.pkl` is unpickled with the subset of
// the pickle protocol torch.save writes, where a tensor is torch._utils._rebuild_tensor_v2
// over a storage named by a persistent id ('storage', <dtype>Storage, key, device, numel)
// whose bytes are the entry `<archive>/data/<key>`. Nested dicts of tensors (a state dict
// per module) flatten to dotted names; a file holding one tensor gives it under "".
import { closeSync, openSync, readSync, statSync } from 'node:fs';
import { bf16ToF32, f16ToF32 } from './half.js';

/** A tensor of the file: its shape and how to read it as f32. */
export interface TorchTensor {
  shape: number[];
  read(): Float32Array;
}

interface ZipEntry {
  offset: number;
  size: number;
  method: number;
}

function readAt(fd: number, position: number, length: number): Buffer {
  const out = Buffer.alloc(length);
  let done = 0;
  while (done < length) {
    const n = readSync(fd, out, done, length - done, position + done);
    if (n === 0) throw new Error('unexpected end of file');
    done += n;
  }
  return out;
}

/** The zip's entries by name, from its central directory (zip64 sizes and offsets included). */
function zipEntries(fd: number, fileSize: number): Map<string, ZipEntry> {
  const tail = Math.min(fileSize, 65557);
  const end = readAt(fd, fileSize - tail, tail);
  let eocd = -1;
  for (let i = tail - 22; i >= 0; i--) if (end.readUInt32LE(i) === 0x06054b50) { eocd = i; break; }
  if (eocd < 0) throw new Error('not a zip file (no end of central directory)');
  let count = end.readUInt16LE(eocd + 10);
  let dirOffset = end.readUInt32LE(eocd + 16);
  if (dirOffset === 0xffffffff && eocd >= 20 && end.readUInt32LE(eocd - 20) === 0x07064b50) {
    const record = readAt(fd, Number(end.readBigUInt64LE(eocd - 12)), 56);
    count = Number(record.readBigUInt64LE(32));
    dirOffset = Number(record.readBigUInt64LE(48));
  }
  const entries = new Map<string, ZipEntry>();
  let at = dirOffset;
  for (let i = 0; i < count; i++) {
    const header = readAt(fd, at, 46);
    if (header.readUInt32LE(0) !== 0x02014b50) throw new Error('corrupt zip central directory');
    const method = header.readUInt16LE(10);
    let size = header.readUInt32LE(24);
    const nameLength = header.readUInt16LE(28);
    const extraLength = header.readUInt16LE(30);
    const commentLength = header.readUInt16LE(32);
    let local = header.readUInt32LE(42);
    const rest = readAt(fd, at + 46, nameLength + extraLength);
    const name = rest.subarray(0, nameLength).toString('utf8');
    // Zip64: the 8-byte values replace those stored as 0xffffffff, in order.
    for (let e = nameLength; e + 4 <= rest.length;) {
      const id = rest.readUInt16LE(e);
      const len = rest.readUInt16LE(e + 2);
      if (id === 1) {
        let f = e + 4;
        if (header.readUInt32LE(24) === 0xffffffff) { size = Number(rest.readBigUInt64LE(f)); f += 8; }
        if (header.readUInt32LE(20) === 0xffffffff) f += 8;
        if (header.readUInt32LE(42) === 0xffffffff) local = Number(rest.readBigUInt64LE(f));
      }
      e += 4 + len;
    }
    const localHeader = readAt(fd, local, 30);
    entries.set(name, { offset: local + 30 + localHeader.readUInt16LE(26) + localHeader.readUInt16LE(28), size, method });
    at += 46 + nameLength + extraLength + commentLength;
  }
  return entries;
}

/** What the unpickler builds: Python values, globals by name, and tensors. */
type Value = null | boolean | number | bigint | string | Value[] | Dict | Global | Storage | TensorRef | Reduced;
class Dict { readonly items = new Map<string, Value>(); }
class Global { constructor(readonly name: string) {} }
class Storage { constructor(readonly dtype: 'f32' | 'f16' | 'bf16', readonly key: string) {} }
class TensorRef { constructor(readonly storage: Storage, readonly offset: number, readonly shape: number[], readonly stride: number[]) {} }
/** A call the reader has no use for (its value is never a tensor). */
class Reduced { constructor(readonly fn: string) {} }

const STORAGE_DTYPES: Record<string, 'f32' | 'f16' | 'bf16'> = { 'torch.FloatStorage': 'f32', 'torch.HalfStorage': 'f16', 'torch.BFloat16Storage': 'bf16' };
const MARK = Symbol('mark');

/** Unpickles torch.save's data.pkl (protocols 2 to 4, the opcodes it writes). */
function unpickle(data: Buffer): Value {
  const stack: Array<Value | typeof MARK> = [];
  const memo = new Map<number, Value>();
  let pos = 0;
  const popMark = (): Value[] => {
    const at = stack.lastIndexOf(MARK);
    if (at < 0) throw new Error('pickle: no mark');
    const items = stack.splice(at) as Value[];
    return items.slice(1);
  };
  const pop = () => stack.pop() as Value;
  const top = () => stack[stack.length - 1] as Value;
  const str = (n: number) => { const s = data.toString('utf8', pos, pos + n); pos += n; return s; };
  const line = () => { const end = data.indexOf(0x0a, pos); const s = data.toString('latin1', pos, end); pos = end + 1; return s; };
  const setItems = (dict: Value, items: Value[]) => {
    if (!(dict instanceof Dict)) throw new Error('pickle: SETITEMS on a non-dict');
    for (let i = 0; i < items.length; i += 2) dict.items.set(String(items[i]), items[i + 1]!);
  };
  const call = (fn: Value, args: Value[]): Value => {
    const name = fn instanceof Global ? fn.name : '?';
    if (name === 'collections.OrderedDict' || name === 'builtins.dict') return new Dict();
    if (name === 'torch._utils._rebuild_tensor_v2' || name === 'torch._utils._rebuild_tensor') {
      const [storage, offset, shape, stride] = args as [Storage, number, number[], number[]];
      return new TensorRef(storage, Number(offset), shape.map(Number), stride.map(Number));
    }
    if (name === 'torch._utils._rebuild_parameter') return args[0]!;
    return new Reduced(name);
  };
  for (;;) {
    const op = data[pos++];
    switch (op) {
      case 0x80: pos++; break; // PROTO
      case 0x95: pos += 8; break; // FRAME
      case 0x2e: return pop(); // STOP
      case 0x28: stack.push(MARK); break;
      case 0x7d: case 0x64: { // EMPTY_DICT, DICT
        const d = new Dict();
        if (op === 0x64) setItems(d, popMark());
        stack.push(d);
        break;
      }
      case 0x5d: stack.push([]); break; // EMPTY_LIST
      case 0x6c: stack.push(popMark()); break; // LIST
      case 0x29: stack.push([]); break; // EMPTY_TUPLE
      case 0x74: stack.push(popMark()); break; // TUPLE
      case 0x85: stack.push([pop()]); break;
      case 0x86: { const b = pop(); stack.push([pop(), b]); break; }
      case 0x87: { const c = pop(); const b = pop(); stack.push([pop(), b, c]); break; }
      case 0x61: { const v = pop(); (top() as Value[]).push(v); break; } // APPEND
      case 0x65: { const items = popMark(); (top() as Value[]).push(...items); break; } // APPENDS
      case 0x73: { const v = pop(); const k = pop(); setItems(top(), [k, v]); break; } // SETITEM
      case 0x75: { const items = popMark(); setItems(top(), items); break; } // SETITEMS
      case 0x71: memo.set(data[pos++]!, top()); break; // BINPUT
      case 0x72: memo.set(data.readUInt32LE(pos), top()); pos += 4; break; // LONG_BINPUT
      case 0x94: memo.set(memo.size, top()); break; // MEMOIZE
      case 0x68: stack.push(memo.get(data[pos++]!)!); break; // BINGET
      case 0x6a: stack.push(memo.get(data.readUInt32LE(pos))!); pos += 4; break; // LONG_BINGET
      case 0x63: { const module = line(); stack.push(new Global(`${module}.${line()}`)); break; } // GLOBAL
      case 0x93: { const name = pop(); stack.push(new Global(`${String(pop())}.${String(name)}`)); break; } // STACK_GLOBAL
      case 0x58: { const n = data.readUInt32LE(pos); pos += 4; stack.push(str(n)); break; } // BINUNICODE
      case 0x8c: { const n = data[pos++]!; stack.push(str(n)); break; } // SHORT_BINUNICODE
      case 0x8d: { const n = Number(data.readBigUInt64LE(pos)); pos += 8; stack.push(str(n)); break; } // BINUNICODE8
      case 0x54: { const n = data.readUInt32LE(pos); pos += 4; stack.push(str(n)); break; } // BINSTRING
      case 0x55: { const n = data[pos++]!; stack.push(str(n)); break; } // SHORT_BINSTRING
      case 0x4a: stack.push(data.readInt32LE(pos)); pos += 4; break; // BININT
      case 0x4b: stack.push(data[pos++]!); break; // BININT1
      case 0x4d: stack.push(data.readUInt16LE(pos)); pos += 2; break; // BININT2
      case 0x8a: { // LONG1
        const n = data[pos++]!;
        let v = 0n;
        for (let i = n - 1; i >= 0; i--) v = (v << 8n) | BigInt(data[pos + i]!);
        if (n > 0 && data[pos + n - 1]! & 0x80) v -= 1n << BigInt(8 * n);
        pos += n;
        stack.push(Number(v));
        break;
      }
      case 0x47: stack.push(data.readDoubleBE(pos)); pos += 8; break; // BINFLOAT
      case 0x4e: stack.push(null); break;
      case 0x88: stack.push(true); break;
      case 0x89: stack.push(false); break;
      case 0x52: { const args = pop() as Value[]; stack.push(call(pop(), args)); break; } // REDUCE
      case 0x81: { const args = pop() as Value[]; stack.push(call(pop(), args)); break; } // NEWOBJ
      case 0x62: pop(); break; // BUILD: the state of a dict or a parameter, not needed
      case 0x51: { // BINPERSID
        const id = pop() as Value[];
        const type = id[1] instanceof Global ? id[1].name : '';
        const dtype = STORAGE_DTYPES[type];
        if (id[0] !== 'storage' || !dtype) throw new Error(`unsupported storage ${type || String(id[0])} (f32, f16 and bf16 are read)`);
        stack.push(new Storage(dtype, String(id[2])));
        break;
      }
      default:
        throw new Error(`pickle opcode 0x${(op ?? 0).toString(16)} at ${pos - 1} is not read`);
    }
  }
}

const DTYPE_BYTES = { f32: 4, f16: 2, bf16: 2 } as const;

/** The tensors of a torch.save zip file by dotted name. */
export function readTorchZip(path: string): Map<string, TorchTensor> {
  const fd = openSync(path, 'r');
  let entries: Map<string, ZipEntry>;
  let pickle: Buffer;
  let prefix: string;
  try {
    entries = zipEntries(fd, statSync(path).size);
    const pkl = [...entries.keys()].find((n) => n.endsWith('/data.pkl') || n === 'data.pkl');
    if (!pkl) throw new Error(`${path}: no data.pkl: not a torch.save zip file`);
    prefix = pkl.slice(0, -'data.pkl'.length);
    const e = entries.get(pkl)!;
    if (e.method !== 0) throw new Error(`${path}: data.pkl is compressed`);
    pickle = readAt(fd, e.offset, e.size);
  } finally {
    closeSync(fd);
  }
  const out = new Map<string, TorchTensor>();
  const visit = (name: string, v: Value) => {
    if (v instanceof Dict) for (const [k, child] of v.items) visit(name ? `${name}.${k}` : k, child);
    else if (v instanceof TensorRef) out.set(name, tensor(path, entries, prefix, v));
  };
  try {
    visit('', unpickle(pickle));
  } catch (err) {
    throw new Error(`${path}: ${(err as Error).message}`);
  }
  return out;
}

/** A tensor's reader: its storage entry's bytes from its offset, through its strides. */
function tensor(path: string, entries: Map<string, ZipEntry>, prefix: string, t: TensorRef): TorchTensor {
  const entry = entries.get(`${prefix}data/${t.storage.key}`);
  if (!entry) throw new Error(`${path}: no storage ${t.storage.key}`);
  if (entry.method !== 0) throw new Error(`${path}: storage ${t.storage.key} is compressed`);
  const { dtype } = t.storage;
  const count = t.shape.reduce((a, b) => a * b, 1);
  return {
    shape: t.shape,
    read: () => {
      // The span the strides reach, from the offset.
      const span = t.shape.reduce((s, n, i) => s + (n - 1) * t.stride[i]!, 1);
      const bytes = DTYPE_BYTES[dtype];
      const fd = openSync(path, 'r');
      let raw: Buffer;
      try {
        raw = readAt(fd, entry.offset + t.offset * bytes, count === 0 ? 0 : span * bytes);
      } finally {
        closeSync(fd);
      }
      const aligned = new Uint8Array(raw).buffer;
      const values = dtype === 'f32' ? new Float32Array(aligned) : dtype === 'f16' ? f16ToF32(new Uint16Array(aligned)) : bf16ToF32(new Uint16Array(aligned));
      const contiguous = t.shape.every((_, i) => t.stride[i] === t.shape.slice(i + 1).reduce((a, b) => a * b, 1));
      if (contiguous) return values.length === count ? values : values.slice(0, count);
      const out = new Float32Array(count);
      const index = new Array<number>(t.shape.length).fill(0);
      for (let i = 0; i < count; i++) {
        let at = 0;
        for (let d = 0; d < index.length; d++) at += index[d]! * t.stride[d]!;
        out[i] = values[at]!;
        for (let d = index.length - 1; d >= 0; d--) {
          if (++index[d]! < t.shape[d]!) break;
          index[d] = 0;
        }
      }
      return out;
    },
  };
}
