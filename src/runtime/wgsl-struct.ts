// The host's side of what a kernel declares, read from its WGSL source so that a kernel
// edit cannot silently misalign the host: the structs the host writes (kernel params, the
// step uniform, the sampler's per-sequence params, penalty entries), packed by field name,
// and the binding numbers of its variables. Structs of 4-byte scalars (u32, i32, f32) in
// declaration order; fields named `_...` are padding, written as zero.
export type Scalar = 'u32' | 'i32' | 'f32';

export interface StructLayout {
  name: string;
  fields: Array<{ name: string; type: Scalar }>;
  names: ReadonlySet<string>;
  /** Bytes per struct (also the stride of an array of them: every field is 4-byte aligned). */
  bytes: number;
}

export type StructValues = Record<string, number | boolean>;

const withoutComments = (source: string) => source.replace(/\/\/[^\n]*/g, '');

/** `struct name { ... }` of a WGSL source. */
export function parseStruct(source: string, name: string): StructLayout {
  const body = new RegExp(`struct\\s+${name}\\s*\\{([^}]*)\\}`).exec(withoutComments(source))?.[1];
  if (body === undefined) throw new Error(`no struct ${name} in the kernel source`);
  const fields = body.split(',').map((f) => f.trim()).filter((f) => f.length > 0).map((f) => {
    const [field, type] = f.split(':').map((s) => s.trim());
    if (type !== 'u32' && type !== 'i32' && type !== 'f32') throw new Error(`struct ${name}: field ${field} is ${type}, not a 4-byte scalar`);
    return { name: field!, type: type as Scalar };
  });
  return { name, fields, names: new Set(fields.map((f) => f.name)), bytes: fields.length * 4 };
}

/** The `@binding(N) var... name` declarations of a WGSL source: name -> N. */
export function parseBindings(source: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const m of withoutComments(source).matchAll(/@binding\((\d+)\)\s*var(?:<[^>]*>)?\s+(\w+)/g)) out.set(m[2]!, Number(m[1]));
  return out;
}

/** Writes `values` as one struct at `byteOffset` of `view`: every field but padding by name, no others. */
export function writeStruct(layout: StructLayout, values: StructValues, view: DataView, byteOffset = 0): void {
  for (const key of Object.keys(values)) if (!layout.names.has(key)) throw new Error(`struct ${layout.name} has no field ${key}`);
  layout.fields.forEach((f, i) => {
    const at = byteOffset + 4 * i;
    const v = f.name.startsWith('_') ? 0 : values[f.name];
    if (v === undefined) throw new Error(`struct ${layout.name}: no value for ${f.name}`);
    const n = Number(v);
    if (f.type === 'f32') view.setFloat32(at, n, true);
    else if (f.type === 'i32') view.setInt32(at, n, true);
    else view.setUint32(at, n, true);
  });
}

/** `values` as the bytes of one struct. */
export function packStruct(layout: StructLayout, values: StructValues): ArrayBuffer {
  const data = new ArrayBuffer(layout.bytes);
  writeStruct(layout, values, new DataView(data));
  return data;
}

/** `items` as an array of structs, one after another. */
export function packArray(layout: StructLayout, items: readonly object[]): ArrayBuffer {
  const data = new ArrayBuffer(items.length * layout.bytes);
  const view = new DataView(data);
  items.forEach((item, i) => writeStruct(layout, item as StructValues, view, i * layout.bytes));
  return data;
}
