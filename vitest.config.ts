import { defineConfig } from 'vitest/config';

// llvmpipe already spreads each dispatch over both cores: test files run one at a time.
export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    pool: 'forks',
    maxWorkers: 1,
    fileParallelism: false,
    testTimeout: 120_000,
    hookTimeout: 300_000,
    env: { EGL_PLATFORM: 'surfaceless' },
  },
});
