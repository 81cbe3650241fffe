// The speech synthesiser's kernels (Kokoro: models/kokoro.ts) over time-major rows whose
// sizes are the call's own, so each dispatch carries its shape in its params and ignores
// the step's: 1-D convolutions, plain, dilated, upsampling and transposed (conv1d.wgsl,
// conv_transpose1d.wgsl), AdaIN and (Ada)LayerNorm with their activations (adain.wgsl,
// ada_layernorm.wgsl), the bidirectional LSTM's recurrence (lstm.wgsl), row gathers
// (gather_rows.wgsl), and iSTFTNet's harmonic source and (inverse) STFT
// (harmonic_phase.wgsl, harmonic_source.wgsl, stft.wgsl, istft.wgsl).
import type { Dispatch } from '../program.js';
import { kernelEnum } from '../kernel-source.js';
import { ceil, type Ops, type Resources } from '../ops.js';

/** Workgroups per dispatch dimension (WebGPU's guaranteed limit). */
const MAX_GROUPS = 65535;

/**
 * Rows of `width` channels inside a buffer: element (t, c) is buffer[t * stride + offset
 * + c], so a view may be some channels of a wider buffer (a concatenation along channels).
 */
export interface View {
  buffer: GPUBuffer;
  stride: number;
  offset: number;
}

/** A whole buffer of rows `width` wide as a view. */
export const rows = (buffer: GPUBuffer, width: number): View => ({ buffer, stride: width, offset: 0 });

/** The activation after an AdaIN (adain.wgsl NORM_ACT_*). */
export type NormActivation = { kind: 'none' } | { kind: 'leaky'; slope: number } | { kind: 'snake'; alpha: GPUBuffer };
const NORM_ACT = kernelEnum('adain', 'NORM_ACT', ['none', 'leaky', 'snake']);

/** `count` invocations of 64 as x (and y past the per-dimension limit). */
function spread(count: number): [number, number] {
  const groups = ceil(count, 64);
  return [Math.min(groups, MAX_GROUPS), ceil(groups, MAX_GROUPS)];
}

function dispatch(ops: Ops, label: string, kernel: string, params: Record<string, number | boolean>, resources: Resources, groups: [number, number?], variant = {}, constants = {}): Dispatch {
  const pipeline = ops.pipelines.get(kernel, variant, constants);
  const bound = ops.bind(label, pipeline, ops.params(kernel, params), resources);
  return { label, pipeline, bindGroup: bound, workgroups: () => groups };
}

/** Frames per conv1d.wgsl invocation (its FRAMES): each weight read serves that many. */
const CONV_FRAMES = 4;

export interface Conv1dSpec {
  /** [taps, cin, ceil(cout / 4) * 4] f32: output channels fastest, padded with zeros. */
  weight: GPUBuffer;
  /** [ceil(cout / 4) * 4] f32 (zeros for an unbiased convolution). */
  bias: GPUBuffer;
  cin: number;
  cout: number;
  taps: number;
  stride?: number;
  dilation?: number;
  pad: number;
}

export interface Conv1dOptions {
  /** A leaky ReLU of this slope on the input as it is read. */
  inSlope?: number;
  /** Nearest upsampling of the input by this factor before the convolution. */
  upsample?: number;
  /** Added to the output (a residual), before accumulate. */
  res?: View;
  /** Add into y instead of overwriting it. */
  accumulate?: boolean;
  /** Multiplies the result, after accumulate. */
  scale?: number;
}

/** y = conv(act(x)) (conv1d.wgsl) over framesIn input rows; returns the dispatch and the output frames. */
export function conv1d(ops: Ops, label: string, spec: Conv1dSpec, x: View, framesIn: number, y: View, opts: Conv1dOptions = {}): { dispatch: Dispatch; frames: number } {
  const stride = spec.stride ?? 1;
  const dilation = spec.dilation ?? 1;
  const upsample = opts.upsample ?? 1;
  const frames = Math.floor((framesIn * upsample + 2 * spec.pad - dilation * (spec.taps - 1) - 1) / stride) + 1;
  if (frames < 1) throw new Error(`${label}: ${framesIn} input frames give no output`);
  const res = opts.res;
  const d = dispatch(ops, label, 'conv1d', {
    frames_in: framesIn, frames_out: frames, cin: spec.cin, cout: spec.cout, taps: spec.taps, stride, dilation, pad: spec.pad, upsample,
    x_stride: x.stride, x_offset: x.offset, y_stride: y.stride, y_offset: y.offset, res_stride: res?.stride ?? 0, res_offset: res?.offset ?? 0,
    in_slope: opts.inSlope ?? 1, out_scale: opts.scale ?? 1, accumulate: opts.accumulate === true, has_res: res !== undefined,
  }, { w: spec.weight, b: spec.bias, x: x.buffer, y: y.buffer, res: res?.buffer ?? ops.dummy }, spread(ceil(frames, CONV_FRAMES) * ceil(spec.cout, 4)), { FRAMES: CONV_FRAMES });
  return { dispatch: d, frames };
}

export interface ConvTranspose1dSpec {
  /** [taps, cin, ceil(cout / 4) * 4] f32 (depthwise: [taps, ceil(cout / 4) * 4]). */
  weight: GPUBuffer;
  bias: GPUBuffer;
  cin: number;
  cout: number;
  taps: number;
  stride: number;
  pad: number;
  outputPadding: number;
  /** One input channel per output channel (groups = channels). */
  depthwise: boolean;
}

/**
 * y (+)= convT(act(x)) (conv_transpose1d.wgsl); with reflectLeft one more frame, a
 * reflection pad of one on the left. Returns the dispatch and the output frames.
 */
export function convTranspose1d(ops: Ops, label: string, spec: ConvTranspose1dSpec, x: View, framesIn: number, y: View, opts: { inSlope?: number; accumulate?: boolean; reflectLeft?: boolean } = {}): { dispatch: Dispatch; frames: number } {
  const frames = (framesIn - 1) * spec.stride - 2 * spec.pad + spec.taps + spec.outputPadding + (opts.reflectLeft ? 1 : 0);
  const d = dispatch(ops, label, 'conv_transpose1d', {
    frames_in: framesIn, frames_out: frames, cin: spec.cin, cout: spec.cout, taps: spec.taps, stride: spec.stride, pad: spec.pad,
    x_stride: x.stride, x_offset: x.offset, y_stride: y.stride, y_offset: y.offset, in_slope: opts.inSlope ?? 1, accumulate: opts.accumulate === true, reflect_left: opts.reflectLeft === true,
  }, { w: spec.weight, b: spec.bias, x: x.buffer, y: y.buffer }, spread(frames * ceil(spec.cout, 4)), { DEPTHWISE: spec.depthwise });
  return { dispatch: d, frames };
}

/**
 * y = act(AdaIN(x)) over `frames` rows of `channels` (adain.wgsl): the style's (1 + gamma,
 * beta) at affineOffset of `affine`, the instance norm's [weight, bias] in `norm`.
 */
export function adain(ops: Ops, label: string, x: View, y: View, frames: number, channels: number, affine: GPUBuffer, affineOffset: number, norm: GPUBuffer, act: NormActivation): Dispatch {
  return dispatch(ops, label, 'adain', {
    frames, channels, x_stride: x.stride, x_offset: x.offset, y_stride: y.stride, y_offset: y.offset, affine_offset: affineOffset,
    act: NORM_ACT[act.kind], slope: act.kind === 'leaky' ? act.slope : 1, eps: 1e-5,
  }, { x: x.buffer, y: y.buffer, affine, norm, alpha: act.kind === 'snake' ? act.alpha : ops.dummy }, [channels]);
}

/** y = leaky(LayerNorm(x) * affine[o, o + C) + affine[o + C, o + 2C)) per row (ada_layernorm.wgsl); slope 1: no activation. */
export function adaLayerNorm(ops: Ops, label: string, x: View, y: View, frames: number, channels: number, affine: GPUBuffer, affineOffset: number, slope: number): Dispatch {
  return dispatch(ops, label, 'ada_layernorm', {
    frames, channels, x_stride: x.stride, x_offset: x.offset, y_stride: y.stride, y_offset: y.offset, affine_offset: affineOffset, slope, eps: 1e-5,
  }, { x: x.buffer, y: y.buffer, affine }, [ceil(frames, 64)]);
}

/** The largest LSTM hidden size lstm.wgsl's workgroup memory holds (6 x 4 bytes per unit within WebGPU's 16 KiB). */
export const LSTM_MAX_HIDDEN = 512;

/**
 * A bidirectional LSTM's recurrence (lstm.wgsl) over `frames` rows of `pre` (the input
 * projection, [frames, 8 * hidden]: forward gates, then backward), with `extra` (8 *
 * hidden values at extraOffset) added to every row's; y gets [forward h, backward h].
 */
export function lstm(ops: Ops, label: string, pre: GPUBuffer, recurrent: GPUBuffer, hidden: number, frames: number, y: View, extra?: { buffer: GPUBuffer; offset: number }): Dispatch {
  if (hidden % 4 !== 0 || hidden > LSTM_MAX_HIDDEN) throw new Error(`${label}: LSTM hidden size ${hidden} unsupported (a multiple of 4, at most ${LSTM_MAX_HIDDEN})`);
  const maxHidden = Math.max(16, 2 ** Math.ceil(Math.log2(hidden)));
  return dispatch(ops, label, 'lstm', {
    frames, hidden, y_stride: y.stride, y_offset: y.offset, extra_offset: extra?.offset ?? 0, has_extra: extra !== undefined,
  }, { pre, w: recurrent, extra: extra?.buffer ?? ops.dummy, y: y.buffer }, [2], { MAX_HIDDEN: maxHidden });
}

/** y[f, :width] = x[index[f], :width] (gather_rows.wgsl). */
export function gatherRows(ops: Ops, label: string, index: GPUBuffer, x: View, y: View, frames: number, width: number): Dispatch {
  return dispatch(ops, label, 'gather_rows', {
    frames, width, x_stride: x.stride, x_offset: x.offset, y_stride: y.stride, y_offset: y.offset,
  }, { index, x: x.buffer, y: y.buffer }, spread(frames * width));
}

/** iSTFTNet's harmonic source's constants (SineGen, SourceModuleHnNSF). */
export interface HarmonicSource {
  harmonics: number;
  /** Output samples per F0 frame. */
  upsample: number;
  sampleRate: number;
  sineAmp: number;
  noiseStd: number;
  voicedThreshold: number;
  /** [lw (harmonics), lb]: the merge layer. */
  merge: GPUBuffer;
}

/**
 * The harmonic source for `frames` F0 values (harmonic_phase.wgsl then
 * harmonic_source.wgsl) into out [frames * upsample]; `phase` is scratch [frames, harmonics].
 */
export function harmonicSource(ops: Ops, label: string, src: HarmonicSource, f0: GPUBuffer, frames: number, phase: GPUBuffer, out: GPUBuffer, seed: number): Dispatch[] {
  return [
    dispatch(ops, `${label}.phase`, 'harmonic_phase', { frames, harmonics: src.harmonics, sample_rate: src.sampleRate }, { f0, phase }, [ceil(src.harmonics, 16)]),
    dispatch(ops, label, 'harmonic_source', {
      frames, harmonics: src.harmonics, upsample: src.upsample, seed: seed >>> 0, sample_rate: src.sampleRate, sine_amp: src.sineAmp, noise_std: src.noiseStd, voiced_threshold: src.voicedThreshold,
    }, { f0, phase, merge: src.merge, out }, spread(frames * src.upsample)),
  ];
}

/** STFT frames of `samples` samples at `hop` (centered): samples / hop + 1. */
export const stftFrames = (samples: number, hop: number) => Math.floor(samples / hop) + 1;

/** y [frames, nFft + 2] = magnitudes and phases of x's STFT (stft.wgsl). */
export function stft(ops: Ops, label: string, x: GPUBuffer, samples: number, y: GPUBuffer, nFft: number, hop: number): Dispatch {
  const frames = stftFrames(samples, hop);
  return dispatch(ops, label, 'stft', { samples, frames, n_fft: nFft, hop }, { x, y }, spread(frames * (nFft / 2 + 1)));
}

/** out [hop * (frames - 1)] = the inverse STFT of x's log-magnitudes and phase logits (istft.wgsl). */
export function istft(ops: Ops, label: string, x: GPUBuffer, frames: number, out: GPUBuffer, nFft: number, hop: number): Dispatch {
  return dispatch(ops, label, 'istft', { frames, n_fft: nFft, hop }, { x, out }, spread(hop * (frames - 1)));
}
