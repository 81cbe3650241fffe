// 1-D convolutions as a gather of their columns (im2col.wgsl) followed by a linear layer.
import { flatWorkgroups, type Dispatch } from '../program.js';
import { ceil, type Ops } from '../ops.js';

/** How Ops.im2col reads its input: [framesIn, channels] rows, the kernel's taps, stride and zero padding, and the weight's flattening order. */
export interface Conv1dShape {
  channels: number;
  framesIn: number;
  kernelSize: number;
  stride: number;
  pad: number;
  /** The weight is [out, kernel, in] (MLX) rather than [out, in, kernel] (PyTorch). */
  tapMajor: boolean;
}

/** cols[t, :] = the input frames output frame t reads, one row per step token (im2col.wgsl). */
export function im2col(ops: Ops, label: string, x: GPUBuffer, cols: GPUBuffer, shape: Conv1dShape): Dispatch {
  const pipeline = ops.pipelines.get('im2col');
  const params = ops.params('im2col', {
    channels: shape.channels, frames_in: shape.framesIn, kernel_size: shape.kernelSize, stride: shape.stride, pad: shape.pad, tap_major: shape.tapMajor,
  });
  return {
    label,
    pipeline,
    bindGroup: ops.bind(label, pipeline, params, { x, cols }),
    workgroups: (s) => flatWorkgroups(ceil(s.tokens * shape.channels * shape.kernelSize, 64)),
  };
}
