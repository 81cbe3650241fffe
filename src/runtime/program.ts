// A forward pass recorded once as a list of dispatches with their bind groups; each step
// replays it into one command encoder with workgroup counts for that step's shape.
import type { Gpu } from './gpu.js';

/** WebGPU's guaranteed per-dimension dispatch limit. */
const MAX_WORKGROUPS = 65535;

/**
 * A flat 1-D range of `groups` workgroups laid over x and y, so that it may pass
 * MAX_WORKGROUPS: the kernel's flat index is gid.x + gid.y * 65535 * its workgroup size.
 */
export function flatWorkgroups(groups: number): [number, number] {
  return [Math.min(groups, MAX_WORKGROUPS), Math.ceil(groups / MAX_WORKGROUPS)];
}
/** Dispatches a submitted piece of a pass holds where a submit runs its work inline: about
 *  one decoder layer's, so the event loop waits at most a layer's time. */
const INLINE_PIECE = 12;

export interface StepShape {
  /** Tokens in the pass. */
  tokens: number;
  /** Sequences sampling a token. */
  seqs: number;
  /** Logit penalty entries (logit_bias.wgsl). */
  bias: number;
  /** Sequence chunks in the pass, one per sequence (BatchMeta.chunks; the recurrent layers' kernels). */
  chunks?: number;
}

export interface Dispatch {
  label: string;
  pipeline: GPUComputePipeline;
  bindGroup: GPUBindGroup;
  workgroups: (shape: StepShape) => [number, number?, number?];
  /** Copied before the dispatch runs (outside the compute pass), when it runs. */
  upload?: Upload;
}

/**
 * The first bytes of a storage buffer copied into an rgba32float texture that a kernel
 * reads instead, flat: byte b lands in texel b / 16 of the row-major texture.
 */
export interface Upload {
  from: GPUBuffer;
  to: GPUTexture;
  bytes: (shape: StepShape) => number;
}

// Whole texture rows in one copy, then the partial last row (multiples of 16 bytes).
function encodeUpload(encoder: GPUCommandEncoder, u: Upload, bytes: number): void {
  const rowBytes = u.to.width * 16;
  const rows = Math.floor(bytes / rowBytes);
  if (rows > 0) encoder.copyBufferToTexture({ buffer: u.from, bytesPerRow: rowBytes, rowsPerImage: rows }, { texture: u.to }, [u.to.width, rows]);
  const rest = bytes - rows * rowBytes;
  if (rest > 0) encoder.copyBufferToTexture({ buffer: u.from, offset: rows * rowBytes }, { texture: u.to, origin: [0, rows] }, [rest / 16, 1]);
}

export class Program {
  readonly dispatches: Dispatch[] = [];

  add(...d: Dispatch[]): void {
    this.dispatches.push(...d);
  }

  /**
   * Replays the pass for `shape` into `gpu`'s queue (the step uniform written by the
   * caller). Where a submit runs its work inline (Gpu.submitRunsInline), all but the last
   * INLINE_PIECE dispatches go first in pieces of that many, each followed by a turn of the
   * event loop. `finish` records into the last piece's encoder after it (readback copies).
   */
  async submit(gpu: Pick<Gpu, 'device' | 'submitRunsInline'>, shape: StepShape, options: { only?: (d: Dispatch) => boolean; finish?: (encoder: GPUCommandEncoder) => void } = {}): Promise<void> {
    const { device } = gpu;
    const last = gpu.submitRunsInline ? Math.max(0, this.dispatches.length - INLINE_PIECE) : 0;
    for (let from = 0; from < last; from += INLINE_PIECE) {
      const piece = device.createCommandEncoder();
      this.encode(piece, shape, options.only, from, Math.min(from + INLINE_PIECE, last));
      device.queue.submit([piece.finish()]);
      await new Promise((resolve) => setImmediate(resolve));
    }
    const encoder = device.createCommandEncoder();
    this.encode(encoder, shape, options.only, last);
    options.finish?.(encoder);
    device.queue.submit([encoder.finish()]);
  }

  /**
   * Records the dispatches active in `shape` (those `only` accepts, if given: it sees
   * active ones only), of `dispatches[from, to)`.
   */
  encode(encoder: GPUCommandEncoder, shape: StepShape, only?: (d: Dispatch) => boolean, from = 0, to = this.dispatches.length): void {
    let pass: GPUComputePassEncoder | undefined;
    for (const d of this.dispatches.slice(from, to)) {
      const [x, y = 1, z = 1] = d.workgroups(shape);
      if (x === 0 || y === 0 || z === 0) continue;
      if (only && !only(d)) continue;
      if (Math.max(x, y, z) > MAX_WORKGROUPS) throw new Error(`${d.label}: ${x}x${y}x${z} workgroups exceed ${MAX_WORKGROUPS} per dimension`);
      if (d.upload) {
        pass?.end();
        pass = undefined;
        encodeUpload(encoder, d.upload, d.upload.bytes(shape));
      }
      pass ??= encoder.beginComputePass();
      pass.setPipeline(d.pipeline);
      pass.setBindGroup(0, d.bindGroup);
      pass.dispatchWorkgroups(x, y, z);
    }
    pass?.end();
  }
}
