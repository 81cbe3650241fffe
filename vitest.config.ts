import { defineConfig } from 'vitest/config';

// Two test files at a time: much of a file's time is single-threaded (writing checkpoints and
// GGUFs, tokenizing, HTTP and JSON), which the other file's kernels fill.
export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    pool: 'forks',
    maxWorkers: 2,
    fileParallelism: true,
    testTimeout: 120_000,
    hookTimeout: 300_000,
    env: { EGL_PLATFORM: 'surfaceless' },
  },
});
