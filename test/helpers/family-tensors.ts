// The tensors a family's builder asks for, recorded by running the builder against a build
// context that loads nothing: each tensor's name as the family names it (Family.layouts maps
// it to a checkpoint's), its shape and what the load does with it. random-checkpoint.ts draws
// its checkpoints from this list and gguf-writer.ts converts by it, so neither repeats a
// family's tensors.
import type { Json, ModelConfig } from '../../src/models/config.js';
import type { Activations, BuildContext, Family } from '../../src/models/model.js';
import { familyConfig } from '../../src/models/registry.js';
import type { KvLayer } from '../../src/runtime/ops/attention.js';
import type { Ops } from '../../src/runtime/ops.js';
import type { GpuWeight } from '../../src/runtime/tensors.js';

export interface FamilyTensor {
  /** `<prefix>.weight` of a matrix, or a vector's name. */
  name: string;
  shape: number[];
  kind: 'matrix' | 'vector';
  /** What a vector's load adds to each value (Gemma's norms scale by 1 + w). */
  shift: number;
  /** A fused matrix's row counts as the builder splits it (Phi-3's qkv_proj: q, k, v). */
  segments?: number[];
}

interface FamilyTensors {
  cfg: ModelConfig;
  family: Family;
  /** In the order the builder asks for them, each once. */
  tensors: FamilyTensor[];
}

/**
 * The tensors of config.json `json`'s decoder family, built to generate text; `has` answers
 * the builder's questions about optional tensors (lm_head.weight).
 */
export function familyTensors(json: Json, has: (name: string) => boolean): FamilyTensors {
  const { cfg, family, build } = familyConfig(json);
  const seen = new Map<string, FamilyTensor>();
  // Each fused matrix's slices: rows by first row.
  const slices = new Map<string, Map<number, number>>();
  const record = (t: FamilyTensor, slice?: { first: number; rows: number }) => {
    if (!seen.has(t.name)) seen.set(t.name, t);
    if (!slice) return;
    const known = slices.get(t.name) ?? new Map<number, number>();
    slices.set(t.name, known.set(slice.first, slice.rows));
    seen.get(t.name)!.segments = [...known].sort(([a], [b]) => a - b).map(([, rows]) => rows);
  };
  const buffer = {} as GPUBuffer;
  const anyKey = <T extends object>(value: unknown) => new Proxy({}, { get: () => value }) as T;
  const ctx: BuildContext = {
    // Every op records nothing and returns no dispatches.
    ops: anyKey<Ops>(() => []),
    cfg,
    matrix: (...sources) => {
      for (const s of sources) record({ name: `${s.prefix}.weight`, shape: [s.rows, s.cols], kind: 'matrix', shift: 0 }, s.slice);
      const rows = sources.reduce((n, s) => n + (s.slice?.rows ?? s.rows), 0);
      return { format: 'f32', rows, cols: sources[0]!.cols, groupSize: 0, parts: [] } satisfies GpuWeight;
    },
    experts: (perExpert) => ctx.matrix(...perExpert.flat()),
    gluMatrix: (gate, up) => ctx.matrix(gate, up),
    vector: (sources, shift = 0) => {
      for (const s of [sources].flat()) record({ name: s.name, shape: s.shape ?? [s.length], kind: 'vector', shift });
      return buffer;
    },
    has,
    rope: () => ({ rotaryDim: cfg.rotaryDim, invFreq: buffer, mscale: 1 }),
    scratch: () => buffer,
    state: () => buffer,
    imageInputs: () => ({ rows: buffer, flags: buffer, keyEnd: buffer }),
    mropePositions: () => buffer,
    act: anyKey<Activations>(buffer),
    kv: { blockSize: 16, blocks: 1, maxBlocks: 1, ringSlots: 0, types: { k: 'f32', v: 'f32' }, kvDim: cfg.kvHeads * cfg.headDim, tokenBytes: 0, layers: Array.from({ length: cfg.layers }, () => ({}) as KvLayer) },
    meta: anyKey<BuildContext['meta']>(buffer),
  };
  build(ctx);
  return { cfg, family, tensors: [...seen.values()] };
}
