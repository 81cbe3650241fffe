import { describe, expect, it } from 'vitest';
import type { Engine } from '../src/engine/engine.js';
import { generateTexts, type TextGenerationEvent, type TextGenerationParams } from '../src/chat/text-generation.js';
import { FakeEngine, ONCE_UPON_A_TIME_IDS, ONCE_UPON_A_TIME_TEXT } from './helpers/fake-engine.js';

const PROMPT = [1, 403, 407, 261, 378];

const generateText = (engine: Engine, p: TextGenerationParams) => generateTexts(engine, [p])[0]!;

async function collectText(events: AsyncIterable<TextGenerationEvent>) {
  for await (const event of events) if (event.type === 'done') return event.result;
  return undefined;
}

function params(overrides: Partial<TextGenerationParams> = {}): TextGenerationParams {
  return { promptTokens: PROMPT, maxTokens: 100, sampling: { temperature: 0, topK: 0, topP: 1 }, stop: [], ...overrides };
}

describe('generateTexts (one choice)', () => {
  it('streams deltas whose concatenation is the final text, with engine usage', async () => {
    const engine = await FakeEngine.create();
    let streamed = '';
    let done;
    for await (const event of generateText(engine, params())) {
      if (event.type === 'text') streamed += event.text;
      else done = event.result;
    }
    expect(streamed).toBe(ONCE_UPON_A_TIME_TEXT);
    expect(done).toMatchObject({
      finishReason: 'stop',
      text: ONCE_UPON_A_TIME_TEXT,
      usage: { prompt_tokens: 5, completion_tokens: 64, total_tokens: 69 },
      timings: { predicted_n: 64 },
    });
  });

  it('reports length when maxTokens ends generation', async () => {
    const engine = await FakeEngine.create();
    const result = await collectText(generateText(engine, params({ maxTokens: 3 })));
    expect(result).toMatchObject({ finishReason: 'length', text: ', there was', usage: { completion_tokens: 3 } });
  });

  it('ends at a stop string, drops it, and stops the engine', async () => {
    const engine = await FakeEngine.create();
    const result = await collectText(generateText(engine, params({ stop: ['little girl'] })));
    expect(result).toMatchObject({ finishReason: 'stop', stopString: 'little girl', text: ', there was a ' });
    // ", ▁there ▁was ▁a ▁little ▁g ir l": the 8th token completes the stop; the engine is left there.
    expect(result!.usage.completion_tokens).toBe(8);
    expect(engine.cancelled).toBe(1);
    expect(result!.timings.predicted_n).toBe(8);
  });

  it('applies a stop string that only the final flush completes', async () => {
    const engine = await FakeEngine.create({ script: () => ONCE_UPON_A_TIME_IDS.slice(0, 3) });
    const result = await collectText(generateText(engine, params({ stop: ['was'] })));
    expect(result).toMatchObject({ finishReason: 'stop', stopString: 'was', text: ', there ' });
  });

  it('answers maxTokens 0 without calling the engine', async () => {
    const engine = await FakeEngine.create();
    const result = await collectText(generateText(engine, params({ maxTokens: 0 })));
    expect(result).toMatchObject({ finishReason: 'length', text: '', usage: { completion_tokens: 0, prompt_tokens: 5 } });
    expect(engine.requests).toHaveLength(0);
  });

  it('queues the request at once, so a full queue throws before iteration', async () => {
    const engine = await FakeEngine.create({ tokenDelayMs: 5, maxQueue: 0 });
    const first = collectText(generateText(engine, params({ maxTokens: 3 })));
    expect(engine.requests).toHaveLength(1);
    await new Promise((r) => setTimeout(r, 1));
    expect(() => generateText(engine, params())).toThrow(/queue is full/);
    expect((await first)?.text).toBe(', there was');
  });

  it('does not queue for a client that is already gone', async () => {
    const engine = await FakeEngine.create();
    const controller = new AbortController();
    controller.abort();
    expect(await collectText(generateText(engine, params({ signal: controller.signal })))).toBeUndefined();
    expect(engine.requests).toHaveLength(0);
  });

  it('ends without a result when the signal aborts', async () => {
    const engine = await FakeEngine.create({ tokenDelayMs: 5 });
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 30);
    expect(await collectText(generateText(engine, params({ signal: controller.signal })))).toBeUndefined();
    expect(engine.cancelled).toBe(1);
  });
});
