// Assembles a kernel's WGSL from its file in src/kernels and the variant the runtime picked.
// A kernel file declares what it builds on and what varies, in lines of their own:
//   #include "name"          the file src/kernels/name.wgsl, once per kernel however often
//                            it is named; `${VAR}` in the name is the variant's value
//   #if COND / #elif COND / #else / #endif
//                            keeps the lines whose condition holds; COND is VAR, !VAR, or
//                            VAR OP value with OP one of == != < <= > >=
//   #const NAME: TYPE        `const NAME: TYPE = <the variant's NAME>;` for what WGSL needs
//                            as a constant expression (array sizes, unrolled calls)
// The runtime names the variant's values (Variant) and sets the `override` constants; every
// value it names must be read by the kernel, so a misspelt name fails at its first compile.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseStruct, type StructLayout } from './wgsl-struct.js';

// Resolves to src/kernels from both src/runtime (tsx, vitest) and dist/runtime (built).
const KERNEL_DIR = fileURLToPath(new URL('../../src/kernels/', import.meta.url));

/** MLX affine quantization at its stored bit width, packed words in a texture (formats/affine.wgsl). */
export type AffineFormat = 'q2' | 'q3' | 'q4' | 'q5' | 'q6' | 'q8';
export type WeightFormat = 'f32' | 'f16' | 'bf16' | AffineFormat | 'mxfp4';

/** Bits per value of each affine format (formats/affine.wgsl BITS). */
export const AFFINE_BITS: Record<AffineFormat, number> = { q2: 2, q3: 3, q4: 4, q5: 5, q6: 6, q8: 8 };

export function isAffine(format: WeightFormat): format is AffineFormat {
  return format in AFFINE_BITS;
}

/** The file under formats/ that reads weights of `format`: a kernel's `FORMAT` variant value. */
export function formatFile(format: WeightFormat): string {
  return isAffine(format) ? 'affine' : format;
}

/** The values a kernel's `#if`, `#const` and `#include "...${VAR}"` lines read. */
export type Variant = Readonly<Record<string, string | number | boolean>>;

const cache = new Map<string, string>();

function read(file: string): string {
  let text = cache.get(file);
  if (text === undefined) {
    text = readFileSync(`${KERNEL_DIR}${file}.wgsl`, 'utf8');
    cache.set(file, text);
  }
  return text;
}

/** Kernel `kernel`'s WGSL for `variant`, its includes expanded in place. */
export function kernelSource(kernel: string, variant: Variant = {}): string {
  const used = new Set<string>();
  const value = (name: string, where: string) => {
    if (!(name in variant)) throw new Error(`${where}: the variant has no ${name}`);
    used.add(name);
    return variant[name]!;
  };
  const included = new Set<string>();
  const out: string[] = [];
  const expand = (file: string) => {
    if (included.has(file)) return;
    included.add(file);
    // One frame per open #if: whether its lines are kept, and whether a branch was taken.
    const frames: Array<{ keep: boolean; taken: boolean; outer: boolean }> = [];
    const keeping = () => frames.every((f) => f.keep);
    read(file).split('\n').forEach((line, i) => {
      const where = `${file}.wgsl:${i + 1}`;
      const directive = /^#(\w+)\s*(.*?)\s*$/.exec(line);
      if (!directive) {
        if (keeping()) out.push(line);
        return;
      }
      const [, name, arg] = directive as unknown as [string, string, string];
      const top = frames.at(-1);
      switch (name) {
        case 'if': {
          const outer = keeping();
          const keep = outer && condition(arg, value, where);
          frames.push({ keep, taken: keep, outer });
          return;
        }
        case 'elif':
        case 'else': {
          if (!top) throw new Error(`${where}: #${name} without #if`);
          top.keep = top.outer && !top.taken && (name === 'else' || condition(arg, value, where));
          top.taken ||= top.keep;
          return;
        }
        case 'endif':
          if (!frames.pop()) throw new Error(`${where}: #endif without #if`);
          return;
      }
      if (!keeping()) return;
      if (name === 'include') {
        const path = /^"([^"]+)"$/.exec(arg)?.[1];
        if (!path) throw new Error(`${where}: #include takes a quoted name`);
        expand(path.replace(/\$\{(\w+)\}/g, (_, v: string) => String(value(v, where))));
      } else if (name === 'const') {
        const decl = /^(\w+)\s*:\s*(u32|i32|f32|bool)$/.exec(arg);
        if (!decl) throw new Error(`${where}: #const takes NAME: u32|i32|f32|bool`);
        out.push(`const ${decl[1]}: ${decl[2]} = ${literal(value(decl[1]!, where), decl[2]!, where)};`);
      } else {
        throw new Error(`${where}: unknown directive #${name}`);
      }
    });
    if (frames.length > 0) throw new Error(`${file}.wgsl: #if without #endif`);
  };
  expand(kernel);
  const unused = Object.keys(variant).filter((name) => !used.has(name));
  if (unused.length > 0) throw new Error(`${kernel}: the variant sets ${unused.join(', ')}, which the kernel does not read`);
  return out.join('\n');
}

function condition(text: string, value: (name: string, where: string) => Variant[string], where: string): boolean {
  const m = /^(!?)(\w+)(?:\s*(==|!=|<=|>=|<|>)\s*(\S+))?$/.exec(text);
  if (!m) throw new Error(`${where}: cannot read the condition "${text}"`);
  const [, not, name, op, operand] = m as unknown as [string, string, string, string?, string?];
  const v = value(name, where);
  if (!op) return not ? !v : Boolean(v);
  if (not) throw new Error(`${where}: ! applies to a name alone`);
  const rhs = typeof v === 'number' ? Number(operand) : operand;
  switch (op) {
    case '==': return v === rhs || String(v) === operand;
    case '!=': return !(v === rhs || String(v) === operand);
    case '<': return v < rhs!;
    case '<=': return v <= rhs!;
    case '>': return v > rhs!;
    default: return v >= rhs!;
  }
}

function literal(v: Variant[string], type: string, where: string): string {
  if (type === 'bool') {
    if (typeof v !== 'boolean') throw new Error(`${where}: a bool constant needs true or false, got ${v}`);
    return String(v);
  }
  if (typeof v !== 'number' || !Number.isFinite(v)) throw new Error(`${where}: a ${type} constant needs a number, got ${v}`);
  if (type === 'f32') return Number.isInteger(v) ? `${v}.0` : String(v);
  if (!Number.isInteger(v) || (type === 'u32' && v < 0)) throw new Error(`${where}: ${v} is not a ${type}`);
  return `${v}${type === 'u32' ? 'u' : 'i'}`;
}

const structs = new Map<string, StructLayout>();

/** `struct name` as kernel file `file` (e.g. 'linear_out', 'common') declares it. */
export function kernelStruct(file: string, name: string): StructLayout {
  const key = `${file}/${name}`;
  let layout = structs.get(key);
  if (!layout) structs.set(key, (layout = parseStruct(read(file), name)));
  return layout;
}

/**
 * The codes of an enumeration kernel file `file` declares as `const PREFIX_NAME: u32 = N;`
 * lines, by lower-case NAME: e.g. `const ACT_SILU: u32 = 0u;` gives { silu: 0 } for 'ACT'.
 * Each of `names` must be among them.
 */
export function kernelEnum<N extends string>(file: string, prefix: string, names: readonly N[]): Record<N, number> {
  const codes: Record<string, number> = {};
  for (const m of read(file).matchAll(new RegExp(`^const ${prefix}_(\\w+)\\s*:\\s*u32\\s*=\\s*(\\d+)u;`, 'gm'))) codes[m[1]!.toLowerCase()] = Number(m[2]);
  for (const name of names) if (!(name in codes)) throw new Error(`${file}.wgsl declares no ${prefix}_${name.toUpperCase()}`);
  return codes as Record<N, number>;
}
