// A forward pass recorded once as a list of dispatches with their bind groups; each step
// replays it into one command encoder with workgroup counts for that step's shape.
/** WebGPU's guaranteed per-dimension dispatch limit. */
const MAX_WORKGROUPS = 65535;

export interface StepShape {
  /** Tokens in the pass. */
  tokens: number;
  /** Sequences sampling a token. */
  seqs: number;
  /** Logit penalty entries (logit_bias.wgsl). */
  bias: number;
}

export interface Dispatch {
  label: string;
  pipeline: GPUComputePipeline;
  bindGroup: GPUBindGroup;
  workgroups: (shape: StepShape) => [number, number?, number?];
  /** Copied before the dispatch runs (outside the compute pass), when it runs. */
  upload?: Upload;
}

/** Rows of a storage buffer copied into a texture that a kernel reads instead. */
export interface Upload {
  from: GPUBuffer;
  to: GPUTexture;
  /** Bytes per row in `from`; the texture is that many bytes wide. */
  rowBytes: number;
  rows: (shape: StepShape) => number;
}

// A multi-row buffer-to-texture copy needs 256-byte-aligned rows; other widths go row by row.
function encodeUpload(encoder: GPUCommandEncoder, u: Upload, rows: number): void {
  const width = u.rowBytes / 16;
  if (u.rowBytes % 256 === 0) {
    encoder.copyBufferToTexture({ buffer: u.from, bytesPerRow: u.rowBytes, rowsPerImage: rows }, { texture: u.to }, [width, rows]);
    return;
  }
  for (let r = 0; r < rows; r++) {
    encoder.copyBufferToTexture({ buffer: u.from, offset: r * u.rowBytes }, { texture: u.to, origin: [0, r] }, [width, 1]);
  }
}

export class Program {
  readonly dispatches: Dispatch[] = [];

  add(...d: Dispatch[]): void {
    this.dispatches.push(...d);
  }

  encode(encoder: GPUCommandEncoder, shape: StepShape, only?: (d: Dispatch) => boolean): void {
    let pass: GPUComputePassEncoder | undefined;
    for (const d of this.dispatches) {
      if (only && !only(d)) continue;
      const [x, y = 1, z = 1] = d.workgroups(shape);
      if (x === 0 || y === 0 || z === 0) continue;
      if (Math.max(x, y, z) > MAX_WORKGROUPS) throw new Error(`${d.label}: ${x}x${y}x${z} workgroups exceed ${MAX_WORKGROUPS} per dimension`);
      if (d.upload) {
        pass?.end();
        pass = undefined;
        encodeUpload(encoder, d.upload, d.upload.rows(shape));
      }
      pass ??= encoder.beginComputePass();
      pass.setPipeline(d.pipeline);
      pass.setBindGroup(0, d.bindGroup);
      pass.dispatchWorkgroups(x, y, z);
    }
    pass?.end();
  }
}
