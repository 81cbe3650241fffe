// float32 <-> float16 / bfloat16 conversion of whole arrays, on the CPU.
// Node 20 has no Float16Array, so half values travel as raw Uint16Array bit patterns.
// Both narrowing conversions round to nearest, ties to even, like PyTorch, numpy and MLX;
// truncating instead would bias every weight towards zero.

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

function bitsOf(x: number): number {
  f32[0] = x;
  return u32[0]!;
}

function floatOf(bits: number): number {
  u32[0] = bits;
  return f32[0]!;
}

// Adding this float32 to a |value| < 2^-14 lines the f16 subnormal grid up with the low
// mantissa bits, so the FPU's own round-to-nearest-even does the rounding for us.
const DENORM_MAGIC_BITS = ((127 - 15) + (23 - 10) + 1) << 23;
const DENORM_MAGIC = floatOf(DENORM_MAGIC_BITS);

/** One float32 value to float16 bits (round to nearest even; overflow gives ±Inf; NaN stays NaN). */
export function f32ToF16Bits(value: number): number {
  let x = bitsOf(value);
  const sign = (x >>> 16) & 0x8000;
  x = (x & 0x7fffffff) >>> 0;
  let h: number;
  if (x >= (127 + 16) << 23) {
    // Too large for f16 (>= 65536 before rounding), Inf or NaN.
    h = x > 0x7f800000 ? 0x7e00 : 0x7c00;
  } else if (x < (127 - 14) << 23) {
    // Result is an f16 subnormal or zero.
    h = bitsOf(Math.fround(floatOf(x) + DENORM_MAGIC)) - DENORM_MAGIC_BITS;
  } else {
    // Normal: rebias the exponent and round the 13 dropped mantissa bits to nearest even.
    const mantOdd = (x >>> 13) & 1;
    x = x + (((15 - 127) << 23) >>> 0) + 0xfff + mantOdd;
    h = (x >>> 13) & 0xffff;
  }
  return h | sign;
}

/** float16 bits to a float32-representable number. */
export function f16BitsToF32(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exp = (bits >>> 10) & 0x1f;
  const mant = bits & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 31) return mant ? NaN : sign * Infinity;
  return floatOf((((bits & 0x8000) << 16) | ((exp - 15 + 127) << 23) | (mant << 13)) >>> 0);
}

/** One float32 value to bfloat16 bits (round to nearest even; NaN stays a quiet NaN). */
export function f32ToBf16Bits(value: number): number {
  const x = bitsOf(value);
  if ((x & 0x7fffffff) > 0x7f800000) return ((x >>> 16) | 0x40) & 0xffff;
  return ((x + 0x7fff + ((x >>> 16) & 1)) >>> 16) & 0xffff;
}

export function bf16BitsToF32(bits: number): number {
  return floatOf((bits << 16) >>> 0);
}

export function f32ToF16(src: ArrayLike<number>): Uint16Array {
  const out = new Uint16Array(src.length);
  for (let i = 0; i < src.length; i++) out[i] = f32ToF16Bits(src[i]!);
  return out;
}

export function f16ToF32(src: Uint16Array): Float32Array {
  const out = new Float32Array(src.length);
  for (let i = 0; i < src.length; i++) out[i] = f16BitsToF32(src[i]!);
  return out;
}

export function f32ToBf16(src: ArrayLike<number>): Uint16Array {
  const out = new Uint16Array(src.length);
  for (let i = 0; i < src.length; i++) out[i] = f32ToBf16Bits(src[i]!);
  return out;
}

export function bf16ToF32(src: Uint16Array): Float32Array {
  // bf16 is the top half of a float32: the high 16 bits of each little-endian word.
  const out = new Uint16Array(src.length * 2);
  for (let i = 0; i < src.length; i++) out[2 * i + 1] = src[i]!;
  return new Float32Array(out.buffer);
}
