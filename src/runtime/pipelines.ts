// Compiled compute pipelines, keyed by kernel, variant and override constants, so each
// compiles once per process.
import { kernelSource, type Variant } from './kernel-source.js';
import { parseBindings } from './wgsl-struct.js';

export type Constants = Record<string, number | boolean>;

/** What one pipeline compiles: its WGSL, as assembled for its variant, and the override constants set on it. */
export interface PipelineSource {
  key: string;
  code: string;
  variant: Variant;
  constants: Record<string, number>;
}

export class PipelineCache {
  private readonly pipelines = new Map<string, GPUComputePipeline>();
  private readonly sources: PipelineSource[] = [];
  private readonly bindings = new WeakMap<GPUComputePipeline, Map<string, number>>();

  /** Hears the number of pipelines compiled so far, after each new one (load progress). */
  onCompile?: (count: number) => void;

  constructor(private readonly device: GPUDevice) {}

  /** Kernel file `kernel` assembled for `variant` (kernel-source.ts), with its override `constants` set. */
  get(kernel: string, variant: Variant = {}, constants: Constants = {}): GPUComputePipeline {
    const key = `${kernel}/${JSON.stringify(variant)}/${JSON.stringify(constants)}`;
    let pipeline = this.pipelines.get(key);
    if (!pipeline) {
      const code = kernelSource(kernel, variant);
      const module = this.device.createShaderModule({ label: kernel, code });
      const numeric: Record<string, number> = {};
      for (const [k, v] of Object.entries(constants)) numeric[k] = Number(v);
      this.sources.push({ key, code, variant, constants: numeric });
      // The synchronous form: createComputePipelineAsync aborted on long llvmpipe compiles.
      pipeline = this.device.createComputePipeline({
        label: key,
        layout: 'auto',
        compute: { module, entryPoint: 'main', constants: numeric },
      });
      this.pipelines.set(key, pipeline);
      this.bindings.set(pipeline, parseBindings(code));
      this.onCompile?.(this.pipelines.size);
    }
    return pipeline;
  }

  /** Whether `pipeline`'s WGSL declares a binding named `name`. */
  declares(pipeline: GPUComputePipeline, name: string): boolean {
    return this.bindings.get(pipeline)?.has(name) === true;
  }

  /** The binding number of the variable `name` in `pipeline`'s WGSL. */
  binding(pipeline: GPUComputePipeline, name: string): number {
    const n = this.bindings.get(pipeline)?.get(name);
    if (n === undefined) throw new Error(`${pipeline.label}: no binding named ${name}`);
    return n;
  }

  /** Every pipeline created so far, in creation order (src/print-kernels.ts prints them). */
  list(): readonly PipelineSource[] {
    return this.sources;
  }
}
