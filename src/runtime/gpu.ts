// The Dawn device: adapter choice, limits, and readback that keeps
// Node's event loop alive while Dawn works.
import { createRequire } from 'node:module';
import { availableParallelism } from 'node:os';
import { dirname, join } from 'node:path';
import { create } from 'webgpu';
import { withoutStderrLines } from './native-stderr.js';
import './webgpu-globals.js';

export type Backend = 'auto' | 'metal' | 'vulkan' | 'd3d12' | 'd3d11' | 'opengl' | 'opengles' | 'swiftshader';

export interface Gpu {
  device: GPUDevice;
  /** e.g. "llvmpipe (LLVM 15, 256 bits) via opengles (compatibility)". */
  description: string;
  /** The software rasteriser: kernels pick the layouts measured fastest on it. */
  isCpu: boolean;
  maxBinding: number;
  /** Rows of a 2D texture (packed weights are split into parts that fit: tensors.ts). */
  maxTextureRows: number;
  /** Bytes one uniform binding may cover (matvec_q reads its input through one when it fits). */
  maxUniformBinding: number;
  /** WGSL may read storage textures (matmul_q reads its input through one when it can). */
  readOnlyStorageTextures: boolean;
  /**
   * queue.submit runs the work before it returns, holding the calling thread (Dawn's
   * OpenGL backends): a long pass is then submitted in pieces, the event loop turning
   * between them (../engine/forward.ts).
   */
  submitRunsInline: boolean;
  /** Bytes of the device's live buffers and textures (trackMemory). */
  memory: GpuMemory;
}

/** Bytes of a device's buffers and textures, counted as they are created and destroyed (or collected). */
export interface GpuMemory {
  bytes(): number;
}

/** Bytes per texel of the texture formats the runtime creates. */
const TEXEL_BYTES: Partial<Record<GPUTextureFormat, number>> = { rgba32float: 16, rgba32uint: 16, rgba16float: 8 };

/** Bytes of a texture of one of the formats the runtime creates. */
export function textureBytes(t: GPUTexture): number {
  const texel = TEXEL_BYTES[t.format];
  if (texel === undefined) throw new Error(`no texel size for ${t.format}`);
  return t.width * t.height * t.depthOrArrayLayers * texel;
}

/**
 * Counts the bytes `device` allocates: its createBuffer and createTexture are wrapped so
 * that each object adds its size, and takes it back when destroyed or garbage-collected.
 */
function trackMemory(device: GPUDevice): GpuMemory {
  let bytes = 0;
  const live = new FinalizationRegistry<{ size: number; freed: boolean }>((entry) => {
    if (!entry.freed) bytes -= entry.size;
  });
  const track = <T extends GPUBuffer | GPUTexture>(object: T, size: number): T => {
    const entry = { size, freed: false };
    bytes += size;
    live.register(object, entry);
    const destroy = object.destroy.bind(object);
    object.destroy = () => {
      if (!entry.freed) bytes -= size;
      entry.freed = true;
      destroy();
    };
    return object;
  };
  const createBuffer = device.createBuffer.bind(device);
  const createTexture = device.createTexture.bind(device);
  device.createBuffer = (d) => track(createBuffer(d), d.size);
  device.createTexture = (d) => {
    const t = createTexture(d);
    return track(t, textureBytes(t));
  };
  return { bytes: () => bytes };
}

// dawn.node crashes if the GPU object is collected while the process lives: keep it here.
const instances: GPU[] = [];

function nativeBackendFor(platform: NodeJS.Platform): Backend {
  if (platform === 'darwin') return 'metal';
  if (platform === 'win32') return 'd3d12';
  return 'vulkan';
}

/**
 * Dawn caps two limits the kernels never use (dynamic buffer offsets) at 16 and, where the
 * driver allows more, says so at each adapter request: from native code, to fd 2.
 */
const LIMIT_NOTICE = /^Warning: maxDynamic(Uniform|Storage)BuffersPerPipelineLayout artificially reduced from \d+ to \d+ to fit dynamic offset allocation limit\.$/;

/**
 * With the Vulkan loader installed but no Vulkan driver (libvulkan1 comes with many packages),
 * Dawn's Vulkan attempt prints the failed instance creation, with the place in VulkanError.cpp.
 */
const NO_VULKAN_DRIVER = /^Warning: vkCreateInstance|^\s+at CheckVkSuccessImpl \(|^$/;

/**
 * Whether Dawn would find the Vulkan loader, which it looks for beside dawn.node, beside the
 * executable, then on the system's library path. Asked for a Vulkan adapter without one, Dawn
 * prints "Couldn't load Vulkan: libvulkan.so.1: cannot open shared object file ..." with the
 * place in BackendVk.cpp. process.dlopen opens a library the same way; one that opens but is
 * no Node addon fails "did not self-register" (and is closed again).
 */
function vulkanLoaderFound(): boolean {
  const lib = 'libvulkan.so.1';
  const dawnDir = join(dirname(createRequire(import.meta.url).resolve('webgpu')), 'dist', `${process.platform}-${process.arch}`);
  return [join(dawnDir, lib), join(dirname(process.execPath), lib), lib].some((path) => {
    try {
      process.dlopen({ exports: {} }, path);
      return true;
    } catch (err) {
      return (err as NodeJS.ErrnoException).code !== 'ERR_DLOPEN_FAILED' || /did not self-register/.test((err as Error).message);
    }
  });
}

/** `drop`: the lines Dawn writes to stderr during the adapter request that are not printed. */
async function tryAdapter(backend: Backend, drop: RegExp | undefined): Promise<{ gpu: GPU; adapter: GPUAdapter; backend: Backend; compat: boolean } | undefined> {
  const options: string[] = [];
  let compat = false;
  if (backend === 'opengles' || backend === 'opengl') {
    // Without a display, Mesa's EGL needs the surfaceless platform to give llvmpipe.
    process.env.EGL_PLATFORM ??= 'surfaceless';
    // llvmpipe runs each dispatch's workgroups on a pool of this many threads (default: one
    // per core). With one per core, a thread the OS parks for a moment leaves a core idle
    // for the rest of the dispatch; with twice as many the others take up its workgroups.
    process.env.LP_NUM_THREADS ??= String(2 * availableParallelism());
    compat = true;
    options.push(`backend=${backend}`);
  } else if (backend === 'swiftshader') {
    options.push('backend=vulkan', 'adapter=SwiftShader');
  } else {
    options.push(`backend=${backend}`);
  }
  // The kernels are ours and guard their own indices, so Dawn's robustness pass (a clamp
  // on every storage access) is pure cost, and on llvmpipe a large one. The driver's own
  // bounds checks remain.
  options.push('enable-dawn-features=allow_unsafe_apis,disable_robustness');
  const gpu = create(options);
  instances.push(gpu);
  // Dawn enumerates adapters, and prints its notices, within the call itself.
  const request = () => gpu.requestAdapter(compat ? { featureLevel: 'compatibility' } : { powerPreference: 'high-performance' });
  const adapter = await (drop ? withoutStderrLines(drop, request) : request());
  return adapter ? { gpu, adapter, backend, compat } : undefined;
}

export const MISSING_ADAPTER_HELP =
  'No WebGPU adapter could be created. On a machine without a GPU install Mesa\'s EGL/GLES drivers ' +
  '(Debian/Ubuntu: apt-get install libegl1 libegl-mesa0 libgles2 libgl1-mesa-dri); with a GPU install its ' +
  'Vulkan driver (Linux), or use macOS 13+ (Metal) / Windows 10+ (D3D12).';

export interface OpenOptions {
  /**
   * Keep Dawn's startup noise off stderr: under `auto`, no Vulkan attempt without the Vulkan
   * loader and no word of one that finds no driver (NO_VULKAN_DRIVER), and no limit notices
   * (LIMIT_NOTICE). Default: Dawn prints what it prints.
   */
  quietDawn?: boolean;
}

export async function openGpu(requested: Backend = 'auto', { quietDawn = false }: OpenOptions = {}): Promise<Gpu> {
  const native = nativeBackendFor(process.platform);
  const order: Backend[] =
    requested !== 'auto' ? [requested] : quietDawn && native === 'vulkan' && !vulkanLoaderFound() ? ['opengles'] : [native, 'opengles'];
  let found: Awaited<ReturnType<typeof tryAdapter>>;
  for (const backend of order) {
    // Under auto, a Vulkan attempt that finds no driver is not worth a word: another backend follows.
    const drop = !quietDawn ? undefined : requested === 'auto' && backend === 'vulkan' ? new RegExp(`${LIMIT_NOTICE.source}|${NO_VULKAN_DRIVER.source}`) : LIMIT_NOTICE;
    found = await tryAdapter(backend, drop).catch(() => undefined);
    if (found) break;
  }
  if (!found) throw new Error(MISSING_ADAPTER_HELP + (requested === 'auto' ? '' : ` (requested backend: ${requested})`));
  const { gpu, adapter, backend, compat } = found;
  const l = adapter.limits;
  const device = await adapter.requestDevice({
    requiredLimits: {
      maxStorageBufferBindingSize: l.maxStorageBufferBindingSize,
      maxUniformBufferBindingSize: l.maxUniformBufferBindingSize,
      maxTextureDimension2D: l.maxTextureDimension2D,
      maxBufferSize: l.maxBufferSize,
      maxStorageBuffersPerShaderStage: l.maxStorageBuffersPerShaderStage,
      maxComputeWorkgroupStorageSize: l.maxComputeWorkgroupStorageSize,
      maxComputeInvocationsPerWorkgroup: l.maxComputeInvocationsPerWorkgroup,
      maxComputeWorkgroupSizeX: l.maxComputeWorkgroupSizeX,
    },
  });
  const memory = trackMemory(device);
  device.addEventListener('uncapturederror', (e) => {
    console.error('WebGPU error:', (e as GPUUncapturedErrorEvent).error.message);
  });
  const info = adapter.info;
  const name = [info.device, info.description].filter((s) => s && s.length > 0).join(', ') || 'unknown adapter';
  const isCpu = /llvmpipe|swiftshader|lavapipe/i.test(`${info.description} ${info.device} ${info.architecture}`);
  return {
    device,
    description: `${name} via ${backend}${compat ? ' (compatibility)' : ''}`,
    isCpu,
    maxBinding: Math.min(l.maxStorageBufferBindingSize, l.maxBufferSize),
    maxUniformBinding: l.maxUniformBufferBindingSize,
    maxTextureRows: l.maxTextureDimension2D,
    readOnlyStorageTextures: gpu.wgslLanguageFeatures.has('readonly_and_readwrite_storage_textures'),
    submitRunsInline: backend === 'opengles' || backend === 'opengl',
    memory,
  };
}

/** Waits for submitted work, holding the event loop open as mapRead does. */
export async function workDone(queue: GPUQueue): Promise<void> {
  const keepAlive = setInterval(() => {}, 1000);
  try {
    await queue.onSubmittedWorkDone();
  } finally {
    clearInterval(keepAlive);
  }
}

/**
 * Maps a MAP_READ buffer. Dawn delivers the callback only while the event loop has
 * something pending, so a timer holds it open until the map settles.
 */
export async function mapRead(buffer: GPUBuffer): Promise<ArrayBuffer> {
  const keepAlive = setInterval(() => {}, 1000);
  try {
    await buffer.mapAsync(GPUMapMode.READ);
  } finally {
    clearInterval(keepAlive);
  }
  const copy = buffer.getMappedRange().slice(0);
  buffer.unmap();
  return copy;
}
