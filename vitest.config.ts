import { defineConfig } from 'vitest/config';

// GPU tests share one Dawn device per worker; llvmpipe already uses both cores, so
// running test files in parallel only makes them contend. One fork, files in sequence.
export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    pool: 'forks',
    poolOptions: { forks: { singleFork: true } },
    fileParallelism: false,
    testTimeout: 120_000,
    hookTimeout: 300_000,
    env: { EGL_PLATFORM: 'surfaceless' },
  },
});
