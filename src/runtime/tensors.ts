// GPU buffers for activations and weights. A weight whose bytes exceed one storage
// binding is split by rows into parts, each its own buffer; ops dispatch once per part.
import type { WeightFormat } from './kernel-source.js';
import './webgpu-globals.js';

const STORAGE = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC;

/** Buffer sizes are padded to 16 bytes: vec4 views and uniform structs need it. */
export function padded(bytes: number): number {
  return Math.max(16, Math.ceil(bytes / 16) * 16);
}

/** Activations: also bindable as a uniform, which matvec_q reads its input through. */
export function storageBuffer(device: GPUDevice, bytes: number, label: string): GPUBuffer {
  return device.createBuffer({ label, size: padded(bytes), usage: STORAGE | GPUBufferUsage.UNIFORM });
}

/** A storage buffer created mapped, filled by `fill` straight into GPU-visible memory. */
export function filledBuffer(device: GPUDevice, bytes: number, label: string, fill: (dst: Uint8Array) => void): GPUBuffer {
  const buffer = device.createBuffer({ label, size: padded(bytes), usage: STORAGE, mappedAtCreation: true });
  fill(new Uint8Array(buffer.getMappedRange(), 0, bytes));
  buffer.unmap();
  return buffer;
}

export function uniformBuffer(device: GPUDevice, words: ArrayLike<number>, floatIndices: number[] = [], label = 'params'): GPUBuffer {
  const data = new ArrayBuffer(padded(words.length * 4));
  const u = new Uint32Array(data);
  const f = new Float32Array(data);
  for (let i = 0; i < words.length; i++) {
    if (floatIndices.includes(i)) f[i] = words[i];
    else u[i] = words[i];
  }
  const buffer = device.createBuffer({ label, size: data.byteLength, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
  device.queue.writeBuffer(buffer, 0, data);
  return buffer;
}

export interface WeightPart {
  rowStart: number;
  rows: number;
  data: GPUBuffer;
  scales?: GPUBuffer;
  biases?: GPUBuffer;
}

/** A [rows, cols] matrix in one of the weight formats, resident on the GPU. */
export interface GpuWeight {
  format: WeightFormat;
  rows: number;
  cols: number;
  groupSize: number;
  parts: WeightPart[];
}

/** Bytes of one row of data in each format. */
export function rowBytes(format: WeightFormat, cols: number): number {
  switch (format) {
    case 'f32': return cols * 4;
    case 'f16':
    case 'bf16': return cols * 2;
    case 'q4': return cols / 2;
    case 'q8': return cols;
  }
}

/** Rows per part so that each part's data fits one binding. */
export function rowsPerPart(format: WeightFormat, cols: number, maxBinding: number): number {
  return Math.max(1, Math.floor(maxBinding / rowBytes(format, cols)));
}
