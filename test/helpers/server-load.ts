// Putting load on a live server from a test: long generations that hold a slot until
// the test lets go, bounded polling, and the observability routes read over HTTP.
import { expect } from 'vitest';

export type SlotEntry = { id: number; state: 'decoding' | 'idle' | 'queued'; model: string; context_size: number; n_ctx: number; is_processing: boolean; kv_blocks: number };

export async function getSlots(url: string): Promise<SlotEntry[]> {
  const res = await fetch(`${url}/slots`);
  expect(res.status).toBe(200);
  return (await res.json()) as SlotEntry[];
}

export const countState = (slots: SlotEntry[], state: SlotEntry['state']) => slots.filter((s) => s.state === state).length;

/** Polls `condition` every 10 ms for at most `timeoutMs`, then asserts it. */
export async function waitFor(condition: () => boolean | Promise<boolean>, timeoutMs = 10_000, what = 'condition'): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await condition()) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  expect(await condition(), `${what} within ${timeoutMs} ms`).toBe(true);
}

export interface HeldRequest {
  /** Disconnects the client. */
  abort(): void;
  /** Settles when the response ends or the client aborted; never rejects. */
  done: Promise<{ status: number; aborted: boolean }>;
}

/**
 * A long streaming (or not) completion over raw HTTP that keeps its slot busy for the
 * length of `maxTokens` decode steps, or until `abort()`. Its body is drained so the
 * server never blocks on a full socket.
 */
export function holdSlot(url: string, options: { maxTokens?: number; stream?: boolean; priority?: string } = {}): HeldRequest {
  const controller = new AbortController();
  const headers: Record<string, string> = { 'Content-Type': 'application/json' };
  if (options.priority) headers['X-Priority'] = options.priority;
  const done = (async () => {
    try {
      const res = await fetch(`${url}/v1/completions`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: options.maxTokens ?? 450, stream: options.stream ?? true }),
        signal: controller.signal,
      });
      await res.arrayBuffer();
      return { status: res.status, aborted: false };
    } catch (err) {
      if (controller.signal.aborted) return { status: 0, aborted: true };
      throw err;
    }
  })();
  return { abort: () => controller.abort(), done };
}

/** One sample line of a scrape: the metric name, its labels and its value. */
export interface MetricSample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

const METRIC_NAME = '[a-zA-Z_:][a-zA-Z0-9_:]*';
const SAMPLE = new RegExp(`^(${METRIC_NAME})(?:\\{(.*)\\})? (\\S+)$`);
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)/y;

/**
 * Prometheus text exposition format -> sample values by name (unlabelled samples), every
 * sample with its labels, and the HELP and TYPE lines by name. Held to the format's rules:
 * each line is a comment, blank or a well-formed sample, and every sample's metric has its
 * TYPE declared before it.
 */
export function parseMetrics(text: string) {
  const values = new Map<string, number>();
  const samples: MetricSample[] = [];
  const help = new Map<string, string>();
  const type = new Map<string, string>();
  for (const line of text.split('\n')) {
    let m: RegExpMatchArray | null;
    if ((m = line.match(new RegExp(`^# HELP (${METRIC_NAME}) (.*)$`)))) help.set(m[1]!, m[2]!);
    else if ((m = line.match(new RegExp(`^# TYPE (${METRIC_NAME}) (counter|gauge|histogram|summary|untyped)$`)))) type.set(m[1]!, m[2]!);
    else if (line !== '') {
      m = line.match(SAMPLE);
      expect(m, `a sample line: ${line}`).not.toBeNull();
      const [, name, labelText, valueText] = m!;
      expect(type.has(name!), `TYPE of ${name} before its samples`).toBe(true);
      const labels: Record<string, string> = {};
      LABEL.lastIndex = 0;
      while (labelText && LABEL.lastIndex < labelText.length) {
        const l = LABEL.exec(labelText);
        expect(l, `labels of ${line}`).not.toBeNull();
        labels[l![1]!] = l![2]!;
      }
      const value = Number(valueText);
      expect(Number.isNaN(value) && valueText !== 'NaN', `value of ${line}`).toBe(false);
      samples.push({ name: name!, labels, value });
      if (!labelText) values.set(name!, value);
    }
  }
  return { values, samples, help, type };
}
