// The sliding-window layers' KV rings (KvLayer.ring, kv_cache.wgsl): each engine slot owns a
// ring per ring layer holding the last positions its sequence wrote, position j in row
// j % ring. A ring belongs to its slot, not to blocks, so what block tables give the paged
// layers (sharing, copy-on-write) is done here by copies and by keeping, per slot, which
// positions of which tokens its rings still hold:
// - a new sequence in a slot reuses the rings' positions when they are of its prompt's
//   prefix and reach back a window from where it starts (`reusable`); the prompt cache's
//   blocks serve the paged layers of the same prefix;
// - an n > 1 fork takes a copy of its parent's rings (`copy`);
// - a speculative verify round needs nothing: its drafts ride in the chunk a ring already
//   makes room for, so a rejected draft overwrites only positions older than a window;
// - a slot file carries the rings' positions it needs (`read`, `write`).
import { mapRead } from '../runtime/gpu.js';
import { KV_TEXEL_BYTES, kvTypeOf, padded } from '../runtime/tensors.js';
import type { LayerKv } from '../models/config.js';
import type { KvCache } from '../models/model.js';
import type { KvLayer } from '../runtime/ops/attention.js';
import { texelSegments } from './kv-cache.js';

/** What a slot's rings hold. */
interface Held {
  /** The tokens at the positions written (a finished sequence's; empty while one runs). */
  tokens: number[];
  /** The first position written for these tokens (a slot file's rings start late). */
  from: number;
  /** One past the highest position ever written since `from`: each write overwrote the position a ring before it. */
  top: number;
}

interface RingLayer {
  layer: KvLayer;
  window: number;
  ring: number;
}

export class KvRings {
  private readonly layers: RingLayer[];
  private readonly held: Held[];
  /** vec4 texels per row. */
  private readonly rowTexels: number;
  private scratch: GPUBuffer | undefined;

  constructor(private readonly device: GPUDevice, kv: KvCache, layerKv: readonly LayerKv[]) {
    this.layers = kv.layers.flatMap((layer, i) => {
      const l = layerKv[i];
      return layer?.ring && typeof l === 'object' ? [{ layer, window: l.window, ring: layer.ring }] : [];
    });
    this.held = Array.from({ length: this.layers.length > 0 ? kv.ringSlots : 0 }, () => ({ tokens: [], from: 0, top: 0 }));
    this.rowTexels = kv.kvDim / 4;
  }

  /** Whether the model has ring layers. */
  get any(): boolean {
    return this.layers.length > 0;
  }

  /** The widest window: the positions before a sequence's next one its rings must hold. */
  get window(): number {
    return Math.max(0, ...this.layers.map((l) => l.window));
  }

  /**
   * The most leading positions of `prompt`, at most `limit`, that a sequence can start
   * from in `slot` with its rings as they are: 0, or the longest prefix of the tokens they
   * hold whose last window positions (the next token's keys) no write has overwritten.
   */
  reusable(slot: number, prompt: readonly number[], limit: number): number {
    if (!this.any) return limit;
    const { tokens, from, top } = this.held[slot]!;
    let n = 0;
    const most = Math.min(limit, tokens.length);
    while (n < most && tokens[n] === prompt[n]) n++;
    const holds = this.layers.every((l) => Math.max(0, n - l.window + 1) >= Math.max(from, top - l.ring));
    return n > 0 && holds ? n : 0;
  }

  /** A sequence starts in `slot` from its rings' first `reused` positions (reusable). */
  start(slot: number, reused: number): void {
    if (!this.any) return;
    const held = this.held[slot]!;
    held.tokens = [];
    if (reused === 0) held.from = held.top = 0;
  }

  /** The slot's sequence wrote positions up to `end` (exclusive). */
  wrote(slot: number, end: number): void {
    if (!this.any) return;
    const held = this.held[slot]!;
    held.top = Math.max(held.top, end);
  }

  /** The slot's sequence ended with `tokens` written. */
  finished(slot: number, tokens: number[]): void {
    if (this.any) this.held[slot]!.tokens = tokens;
  }

  /**
   * Copies the rings of slot `from` to each of `to` (forks of its sequence), submitted now,
   * after the work already queued; the copies hold what `from`'s do.
   */
  copy(from: number, to: readonly number[]): void {
    if (!this.any || to.length === 0) return;
    // Commands of one encoder run in order, so one ring's worth of scratch serves every copy.
    const scratch = this.scratchFor(Math.max(...this.layers.map(({ layer, ring }) => ring * this.rowTexels * Math.max(KV_TEXEL_BYTES[kvTypeOf(layer.k)], KV_TEXEL_BYTES[kvTypeOf(layer.v)]))));
    const encoder = this.device.createCommandEncoder();
    for (const { layer, ring } of this.layers) {
      for (const texture of [layer.k, layer.v]) {
        this.copyRows(encoder, texture, from * ring, ring, scratch, 0, 'out');
        for (const slot of to) this.copyRows(encoder, texture, slot * ring, ring, scratch, 0, 'in');
      }
    }
    this.device.queue.submit([encoder.finish()]);
    for (const slot of to) this.held[slot] = { ...this.held[from]!, tokens: [] };
  }

  /**
   * The positions of `tokens` (a prefix of what `slot` holds) a slot file keeps for the
   * rings: the last window of them the rings still hold, as a count of trailing positions.
   */
  kept(slot: number, tokens: number): number {
    if (!this.any) return 0;
    const { from, top } = this.held[slot]!;
    const lo = Math.max(0, tokens - this.window, from, ...this.layers.map((l) => top - l.ring));
    return Math.max(0, tokens - lo);
  }

  /** Bytes of `rows` positions across the ring layers' keys and values. */
  bytes(rows: number): number {
    return this.layers.reduce((n, { layer }) => n + rows * this.rowTexels * (KV_TEXEL_BYTES[kvTypeOf(layer.k)] + KV_TEXEL_BYTES[kvTypeOf(layer.v)]), 0);
  }

  /** Reads positions end - rows .. end - 1 of `slot`'s rings: per ring layer, its keys then its values, [rows, kvDim] values of their type. */
  async read(slot: number, end: number, rows: number): Promise<Uint8Array> {
    const out = this.device.createBuffer({ label: 'kv_rings_read', size: Math.max(16, padded(this.bytes(rows))), usage: GPUBufferUsage.COPY_DST | GPUBufferUsage.MAP_READ });
    const encoder = this.device.createCommandEncoder();
    let offset = 0;
    for (const { layer, ring } of this.layers) {
      for (const texture of [layer.k, layer.v]) {
        for (const [row, n] of this.runs(end - rows, rows, ring)) offset = this.copyRows(encoder, texture, slot * ring + row, n, out, offset, 'out');
      }
    }
    this.device.queue.submit([encoder.finish()]);
    try {
      return new Uint8Array(await mapRead(out), 0, offset);
    } finally {
      out.destroy();
    }
  }

  /** Writes what `read` returns for the last `rows` of `tokens` into `slot`'s rings, which then hold them. */
  write(slot: number, tokens: number[], rows: number, data: Uint8Array): void {
    if (data.length !== this.bytes(rows)) throw new Error(`ring KV data of ${data.length} bytes, expected ${this.bytes(rows)}`);
    const end = tokens.length;
    let offset = 0;
    for (const { layer, ring } of this.layers) {
      for (const texture of [layer.k, layer.v]) {
        const texel = KV_TEXEL_BYTES[kvTypeOf(texture)];
        for (const [row, n] of this.runs(end - rows, rows, ring)) {
          for (const s of texelSegments((slot * ring + row) * this.rowTexels, n * this.rowTexels)) {
            this.device.queue.writeTexture({ texture, origin: { x: s.x, y: s.y } }, data, { offset }, [s.texels, 1]);
            offset += s.texels * texel;
          }
        }
      }
    }
    this.held[slot] = { tokens, from: end - rows, top: end };
  }

  /** Positions start .. start + n - 1 as runs of consecutive ring rows: [first row, rows]. */
  private *runs(start: number, n: number, ring: number): Generator<[number, number]> {
    for (let pos = start; pos < start + n;) {
      const row = pos % ring;
      const len = Math.min(start + n - pos, ring - row);
      yield [row, len];
      pos += len;
    }
  }

  /** Encodes a copy of `rows` rows from `row` of `texture` out to, or in from, `buffer` at `offset`; returns the offset after them. */
  private copyRows(encoder: GPUCommandEncoder, texture: GPUTexture, row: number, rows: number, buffer: GPUBuffer, offset: number, way: 'in' | 'out'): number {
    const texel = KV_TEXEL_BYTES[kvTypeOf(texture)];
    for (const s of texelSegments(row * this.rowTexels, rows * this.rowTexels)) {
      const origin = { texture, origin: { x: s.x, y: s.y } };
      if (way === 'out') encoder.copyTextureToBuffer(origin, { buffer, offset }, [s.texels, 1]);
      else encoder.copyBufferToTexture({ buffer, offset }, origin, [s.texels, 1]);
      offset += s.texels * texel;
    }
    return offset;
  }

  /** A scratch buffer of at least `bytes` (a texture cannot be copied into itself). */
  private scratchFor(bytes: number): GPUBuffer {
    if (!this.scratch || this.scratch.size < bytes) {
      this.scratch?.destroy();
      this.scratch = this.device.createBuffer({ label: 'kv_rings_scratch', size: padded(bytes), usage: GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
    }
    return this.scratch;
  }
}
