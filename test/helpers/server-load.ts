// Putting load on a live server from a test: long generations that hold a slot until
// the test lets go, bounded polling, and the observability routes read over HTTP.
import { expect } from 'vitest';

export type SlotEntry = { id: number; state: 'decoding' | 'idle' | 'queued'; model: string; context_size: number; n_ctx: number; is_processing: boolean };

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

/** Prometheus text -> sample values by name, plus the HELP and TYPE lines by name. */
export function parseMetrics(text: string) {
  const values = new Map<string, number>();
  const help = new Map<string, string>();
  const type = new Map<string, string>();
  for (const line of text.split('\n')) {
    let m: RegExpMatchArray | null;
    if ((m = line.match(/^# HELP (\S+) (.*)$/))) help.set(m[1]!, m[2]!);
    else if ((m = line.match(/^# TYPE (\S+) (\S+)$/))) type.set(m[1]!, m[2]!);
    else if ((m = line.match(/^([a-z_]+) (\S+)$/))) values.set(m[1]!, Number(m[2]));
  }
  return { values, help, type };
}
