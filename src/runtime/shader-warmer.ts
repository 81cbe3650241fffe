// Compiling a model's kernels on two cores at once, on adapters that compile on first use
// into an on-disk cache (Mesa's llvmpipe compiles a kernel on its first dispatch and keeps
// the result in MESA_SHADER_CACHE_DIR, one process after another).
//
// A second process (shader-warmer-child.ts) opens the same adapter and compiles the
// pipelines this process creates, as they are created: most while the weights are still
// uploading. At the end of the load (ShaderWarmer.finish) this process compiles, from the
// last created backwards, those the child has not taken, and waits for the child's; each
// pipeline is compiled by whichever process claims it first, so none twice. A claimed
// compile is the pipeline's dispatch with stand-in resources of the kinds its WGSL binds
// (compileWithStandIns): llvmpipe keys a compiled kernel on the WGSL, the override
// constants and the class of each bound texture (format; each side a power of two or
// not: tensors.ts textureRows keeps every texture's class fixed), so the forward pass's
// own first dispatches then find it compiled.
//
// The two processes share a folder: the pipelines as numbered JSON files, a claim file
// per pipeline (created exclusively: the first to create it compiles it) and a done file
// per pipeline the child compiled. Files rather than messages: the load holds this
// process's event loop, and a file is written without it.
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, mkdtempSync, openSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Backend } from './gpu.js';
import type { PipelineSource } from './pipelines.js';

/** One pipeline as the child compiles it. */
export interface WarmJob {
  code: string;
  constants: Record<string, number>;
}

/** The files of pipeline i in the shared folder. */
export const warmFiles = (dir: string, i: number) => ({
  job: join(dir, `${i}.json`),
  claim: join(dir, `${i}.claim`),
  done: join(dir, `${i}.done`),
});
/** Written when this process needs no more compiles: the child exits. */
export const warmEnd = (dir: string) => join(dir, 'end');

/** Claims pipeline i's compile for the calling process: false when the other has it. */
export function claim(dir: string, i: number): boolean {
  try {
    closeSync(openSync(warmFiles(dir, i).claim, 'wx'));
    return true;
  } catch {
    return false;
  }
}

/** Polling interval of both processes, ms. */
export const WARM_POLL_MS = 10;

/**
 * Compiles `job` on `device` as its first dispatch would: the pipeline, stand-ins for each
 * binding its WGSL declares (a buffer per buffer binding, a texture of the bound format,
 * 4 x 3 texels, per texture binding), and an indirect dispatch of zero workgroups, which
 * compiles the kernel and runs nothing.
 */
export async function compileWithStandIns(device: GPUDevice, job: WarmJob): Promise<void> {
  const pipeline = device.createComputePipeline({
    layout: 'auto',
    compute: { module: device.createShaderModule({ code: job.code }), entryPoint: 'main', constants: job.constants },
  });
  const made: Array<GPUBuffer | GPUTexture> = [];
  const entries: GPUBindGroupEntry[] = [];
  const uniformBytes = device.limits.maxUniformBufferBindingSize;
  for (const m of job.code.matchAll(/@group\(0\)\s*@binding\((\d+)\)\s*var(<[^>]*>)?\s+\w+\s*:\s*([^;]+);/g)) {
    const [, binding, space, type] = m as unknown as [string, string, string | undefined, string];
    if (space) {
      const uniform = space.includes('uniform');
      const buffer = device.createBuffer({ size: uniformBytes, usage: uniform ? GPUBufferUsage.UNIFORM : GPUBufferUsage.STORAGE });
      made.push(buffer);
      entries.push({ binding: Number(binding), resource: { buffer } });
      continue;
    }
    const format = (/texture_storage_2d<(\w+)/.exec(type)?.[1] ?? (type.includes('<u32>') ? 'rgba32uint' : 'rgba32float')) as GPUTextureFormat;
    const texture = device.createTexture({ size: [4, 3], format, usage: GPUTextureUsage.TEXTURE_BINDING | GPUTextureUsage.STORAGE_BINDING });
    made.push(texture);
    entries.push({ binding: Number(binding), resource: texture.createView() });
  }
  const indirect = device.createBuffer({ size: 16, usage: GPUBufferUsage.INDIRECT | GPUBufferUsage.STORAGE });
  made.push(indirect);
  const encoder = device.createCommandEncoder();
  const pass = encoder.beginComputePass();
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries }));
  pass.dispatchWorkgroupsIndirect(indirect, 0);
  pass.end();
  device.queue.submit([encoder.finish()]);
  await device.queue.onSubmittedWorkDone();
  for (const r of made) r.destroy();
}

/** Whether the adapter keeps compiled kernels on disk for another process to find: llvmpipe with Mesa's shader cache on. */
export function warmerHelps(isCpu: boolean, env: NodeJS.ProcessEnv = process.env): boolean {
  const off = (v: string | undefined) => v !== undefined && /^(1|true|yes)$/i.test(v);
  return isCpu && !off(env.MESA_SHADER_CACHE_DISABLE) && !off(env.MESA_GLSL_CACHE_DISABLE);
}

/** How many pipelines each process compiled (ShaderWarmer.finish). */
export interface WarmSplit {
  here: number;
  child: number;
}

export class ShaderWarmer {
  /** The folder the two processes share (removed at close). */
  readonly dir = mkdtempSync(join(tmpdir(), 'mlxcel-warm-'));
  private readonly jobs: WarmJob[] = [];
  private readonly child: ChildProcess;
  private exited = false;

  /** Starts the child on `backend`, the adapter this process opened. */
  constructor(backend: Backend) {
    // Under the TypeScript loader (tests, tsx) the child is the .ts file, run with it too.
    const self = fileURLToPath(import.meta.url);
    const ts = self.endsWith('.ts');
    const script = self.replace(/shader-warmer\.(ts|js)$/, `shader-warmer-child.${ts ? 'ts' : 'js'}`);
    this.child = spawn(process.execPath, [...(ts ? ['--import', 'tsx'] : []), script, this.dir, backend], { stdio: 'ignore' });
    this.child.once('exit', () => { this.exited = true; });
    this.child.unref();
  }

  /** Hands a newly created pipeline to the child. */
  add(source: PipelineSource): void {
    const job: WarmJob = { code: source.code, constants: source.constants };
    const files = warmFiles(this.dir, this.jobs.length);
    this.jobs.push(job);
    writeFileSync(`${files.job}.tmp`, JSON.stringify(job));
    renameSync(`${files.job}.tmp`, files.job);
  }

  /** Pipelines the child has compiled so far. */
  childDone(): number {
    return this.jobs.filter((_, i) => existsSync(warmFiles(this.dir, i).done)).length;
  }

  /**
   * Compiles, on `device`, each pipeline the child has not claimed (the last created
   * first), waits for the child's, and stops the child. Returns how many each compiled.
   */
  async finish(device: GPUDevice): Promise<WarmSplit> {
    const theirs: number[] = [];
    for (let i = this.jobs.length - 1; i >= 0; i--) {
      if (claim(this.dir, i)) await compileWithStandIns(device, this.jobs[i]!);
      else theirs.push(i);
    }
    for (const i of theirs) {
      while (!this.exited && !existsSync(warmFiles(this.dir, i).done)) await new Promise((r) => setTimeout(r, WARM_POLL_MS));
    }
    this.close();
    return { here: this.jobs.length - theirs.length, child: theirs.length };
  }

  /** Stops the child and removes the shared folder. */
  close(): void {
    writeFileSync(warmEnd(this.dir), '');
    if (!this.exited) this.child.kill();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
