// Each request's own random stream (xoshiro128**, seeded through splitmix32), drawn on
// the host: the sampler kernel gets one uniform per step, so a seeded request gives the
// same tokens whatever else is in the batch.
export class Rng {
  private s: Uint32Array;

  /** Any non-negative integer seed up to 2^53; its high and low words both count. */
  constructor(seed: number) {
    let x = seed >>> 0;
    const high = Math.floor(seed / 2 ** 32) >>> 0;
    const next = () => {
      x = (x + 0x9e3779b9) >>> 0;
      let z = x;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
      return (z ^ (z >>> 16)) >>> 0;
    };
    // The low word seeds the first half of the state, low and high words the second.
    const a = next();
    const b = next();
    x ^= high;
    this.s = Uint32Array.of(a, b, next(), next());
  }

  /** The stream's position, for `restore`. */
  save(): Uint32Array {
    return this.s.slice();
  }

  /** Rewinds (or advances) the stream to a position `save` returned. */
  restore(state: Uint32Array): void {
    this.s.set(state);
  }

  /** Uniform in [0, 1) with 24 random bits, exact in f32. */
  next(): number {
    const s = this.s;
    const result = Math.imul(rotl(Math.imul(s[1], 5), 7), 9) >>> 0;
    const t = s[1] << 9;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 11);
    return (result >>> 8) / 16777216;
  }
}

function rotl(x: number, k: number): number {
  return ((x << k) | (x >>> (32 - k))) >>> 0;
}

export function randomSeed(): number {
  return (Math.random() * 2 ** 32) >>> 0;
}
