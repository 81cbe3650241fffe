// The load's progress display: a bar on a terminal, a plain line every 5 s in a log, and the
// counters /health shows.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { LoadDisplay } from '../src/load-progress.js';

afterEach(() => {
  vi.useRealTimers();
});

describe('load progress', () => {
  it('on a terminal, redraws a bar of tensors and pipelines, and clears it for other lines', () => {
    vi.useFakeTimers();
    const written: string[] = [];
    const display = new LoadDisplay({ write: (t: string) => written.push(t), isTTY: true, columns: 80 }, 'x: ');
    display.update({ tensors: 1, tensorsTotal: 4, pipelines: 0 });
    expect(written).toEqual([]);
    vi.advanceTimersByTime(100);
    display.update({ tensors: 2, tensorsTotal: 4, pipelines: 3 });
    display.update({ tensors: 3, tensorsTotal: 4, pipelines: 3 });
    display.clear();
    display.clear();
    expect(written).toEqual(['\rloading [###############...............] 2/4 tensors, 3 pipelines\x1b[K', '\r\x1b[K']);
    expect(display.snapshot()).toEqual({ stage: 'load', tensors_done: 3, tensors_total: 4, pipelines_compiled: 3 });
  });

  it('in a log, writes a plain line every 5 s', () => {
    vi.useFakeTimers();
    const written: string[] = [];
    const display = new LoadDisplay({ write: (t: string) => written.push(t) }, 'x: ');
    display.update({ tensors: 10, tensorsTotal: 290, pipelines: 0 });
    vi.advanceTimersByTime(5000);
    display.update({ tensors: 120, tensorsTotal: 290, pipelines: 14 });
    vi.advanceTimersByTime(4999);
    display.update({ tensors: 290, tensorsTotal: 290, pipelines: 20 });
    display.clear();
    expect(written).toEqual(['x: loading: 120 of 290 tensors uploaded, 14 pipelines compiled\n']);
  });
});
