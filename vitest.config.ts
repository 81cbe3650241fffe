import { defineConfig } from 'vitest/config';

// Two test files at a time: much of a file's time is single-threaded (writing checkpoints and
// GGUFs, tokenizing, HTTP and JSON), which the other file's kernels fill. Files share their
// worker's modules (isolate: false) rather than importing the server, the engine and the
// clients afresh each, so a test restores what it changes (spies, timers) and closes what it
// opens (engines, servers, temporary folders). In the test workers llvmpipe runs each
// dispatch on the calling thread (LP_NUM_THREADS=0) rather than handing it to the server's
// default pool of two threads per core: the two files already keep both cores busy, and the
// hand-offs cost the tiny test models' many small dispatches more than the parallel work
// saves. The servers tests start as processes keep the default (helpers/server-process.ts).
export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    pool: 'forks',
    maxWorkers: 2,
    fileParallelism: true,
    isolate: false,
    testTimeout: 120_000,
    hookTimeout: 300_000,
    env: { EGL_PLATFORM: 'surfaceless', LP_NUM_THREADS: '0' },
  },
});
