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
}

export class Program {
  readonly dispatches: Dispatch[] = [];

  add(...d: Dispatch[]): void {
    this.dispatches.push(...d);
  }

  encode(encoder: GPUCommandEncoder, shape: StepShape, only?: (d: Dispatch) => boolean): void {
    const pass = encoder.beginComputePass();
    for (const d of this.dispatches) {
      if (only && !only(d)) continue;
      const [x, y = 1, z = 1] = d.workgroups(shape);
      if (x === 0 || y === 0 || z === 0) continue;
      if (Math.max(x, y, z) > MAX_WORKGROUPS) throw new Error(`${d.label}: ${x}x${y}x${z} workgroups exceed ${MAX_WORKGROUPS} per dimension`);
      pass.setPipeline(d.pipeline);
      pass.setBindGroup(0, d.bindGroup);
      pass.dispatchWorkgroups(x, y, z);
    }
    pass.end();
  }
}
