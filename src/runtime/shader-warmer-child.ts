// The second process of shader-warmer.ts: `node shader-warmer-child.js DIR BACKEND` opens
// the adapter the server opened and compiles the pipelines the server writes to DIR, in
// the order it created them, each it claims first, until the server writes DIR/end or
// goes away.
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { openGpu, type Backend } from './gpu.js';
import { claim, compileWithStandIns, WARM_POLL_MS, warmEnd, warmFiles, type WarmJob } from './shader-warmer.js';

const [dir, backend] = process.argv.slice(2) as [string, Backend];
const parent = process.ppid;
const gpu = await openGpu(backend, { quietDawn: true });
for (let i = 0; existsSync(dir) && !existsSync(warmEnd(dir)) && process.ppid === parent;) {
  const files = warmFiles(dir, i);
  if (!existsSync(files.job)) {
    await new Promise((r) => setTimeout(r, WARM_POLL_MS));
    continue;
  }
  if (claim(dir, i)) {
    await compileWithStandIns(gpu.device, JSON.parse(readFileSync(files.job, 'utf8')) as WarmJob);
    writeFileSync(files.done, '');
  }
  i++;
}
process.exit(0);
