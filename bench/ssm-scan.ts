// The Mamba-2 scan alone, in both of its layouts (src/runtime/ops/ssm.ts): a CPU adapter's
// walk over every chunk (ssm_scan.wgsl), and a GPU's chunked-parallel scan of a prefill
// chunk (ssm_scan_chunk.wgsl) beside the walk for decode steps. Shape: Nemotron-Nano-9B-v2's
// mixer (head_dim 80, 8 groups, state 128) with SCAN_HEADS heads (default its 128); one
// sequence's prefill chunk of SCAN_TOKENS tokens (default 256, median of 3) and one decode
// step (median of 5), each run alone and awaited.
// Run: npx tsx bench/ssm-scan.ts (the test harness's adapter: llvmpipe here; the GPU layout
// is forced onto it by SCAN_LAYOUT=gpu, default both).
import { Harness, randomF32, rng } from '../test/kernels/harness.js';

const H = Number(process.env.SCAN_HEADS ?? 128);
const T = Number(process.env.SCAN_TOKENS ?? 256);
const [P, G, N] = [80, 8, 128];
const INNER = H * P;
const CONV = INNER + 2 * G * N;
const PROJ = 2 * INNER + 2 * G * N + H;
const layouts = process.env.SCAN_LAYOUT ? [process.env.SCAN_LAYOUT] : ['cpu', 'gpu'];

async function measure(layout: string): Promise<string> {
  const h = await Harness.open({ asGpu: layout === 'gpu' });
  try {
    const rand = rng(1);
    const chunks = h.activation(4 * T, 'chunks');
    const proj = h.uploadF32(randomF32(rand, T * PROJ, -1, 1));
    const xbc = h.uploadF32(randomF32(rand, T * CONV, -1, 1));
    const weights = { aLog: h.uploadF32(randomF32(rand, H, -2, 0)), dtBias: h.uploadF32(randomF32(rand, H, -3, -1)), d: h.uploadF32(randomF32(rand, H, 0.5, 1.5)) };
    const scan = h.ops.ssmScan('scan', chunks, xbc, proj, weights, h.activation(INNER * N, 'state'), h.activation(T * INNER, 'y'), {
      heads: H, headDim: P, groups: G, stateSize: N, convDim: CONV, projStride: PROJ, dtOffset: INNER + CONV,
    });
    const median = async (tokens: number, reps: number) => {
      h.write(chunks, Uint32Array.from([0, tokens, 0, 0]));
      await h.run(scan, { tokens, seqs: 0, chunks: 1 });
      const ms: number[] = [];
      for (let i = 0; i < reps; i++) {
        const t0 = performance.now();
        await h.run(scan, { tokens, seqs: 0, chunks: 1 });
        ms.push(performance.now() - t0);
      }
      return ms.sort((a, b) => a - b)[reps >> 1]!;
    };
    return `| ${layout} | ${H} | ${T} | ${(await median(T, 3)).toFixed(1)} | ${(await median(1, 5)).toFixed(2)} |`;
  } finally {
    h.destroy();
  }
}

console.log('| layout | heads | chunk tokens | prefill chunk (ms) | decode step (ms) |\n|---|---:|---:|---:|---:|');
for (const layout of layouts) console.log(await measure(layout));
