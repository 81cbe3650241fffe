// Installs WebGPU's global constants (GPUBufferUsage, GPUMapMode, ...) from Dawn before
// any runtime module reads them.
import { globals } from 'webgpu';

Object.assign(globalThis, globals);
