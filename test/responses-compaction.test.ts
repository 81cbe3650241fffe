// Compaction on crafted histories: where splits may fall (tool groups never split), what
// is retained, the capsule and its replay, and every refusal. Token counts come from a
// fake counter (one token per word), so each expectation can be checked by hand.
import { describe, expect, it, vi } from 'vitest';
import {
  chooseCut,
  compactItems,
  decodeCapsule,
  defaultKeepTokens,
  encodeCapsule,
  resolveItems,
  splitPoints,
  type CompactionDeps,
} from '../src/server/responses/compaction.js';
import { ApiError } from '../src/server/errors.js';
import { itemsToMessages, normalizeInput, SUMMARY_MARK, type Item } from '../src/server/responses/items.js';

const user = (text: string): Item => ({ type: 'message', role: 'user', content: text });
const assistant = (text: string): Item => ({ type: 'message', role: 'assistant', content: [{ type: 'output_text', text }] });
const system = (text: string): Item => ({ type: 'message', role: 'system', content: text });
const call = (id: string, args = '{}'): Item => ({ type: 'function_call', call_id: id, name: 'lookup', arguments: args });
const output = (id: string, text = 'result'): Item => ({ type: 'function_call_output', call_id: id, output: text });

/** One token per word of an item's text, plus one for the item itself. */
function words(item: Item): number {
  const text = JSON.stringify(item.content ?? item.arguments ?? item.output ?? '');
  return text.split(/\s+/).length + 1;
}
const count = (items: Item[]) => items.reduce((n, item) => n + words(item), 0);
const asyncCount = async (items: Item[]) => count(items);

/** The calls still waiting for an output just before index `at`. */
function pendingAt(items: Item[], at: number): Set<string> {
  const pending = new Set<string>();
  for (const item of items.slice(0, at)) {
    if (item.type === 'function_call') pending.add(item.call_id as string);
    if (item.type === 'function_call_output') pending.delete(item.call_id as string);
  }
  return pending;
}

describe('split points', () => {
  it('fall before user messages and after completed tool groups', () => {
    const conversation = [user('u1'), assistant('a1'), user('u2'), call('c1'), output('c1'), assistant('a2'), user('u3'), assistant('a3')];
    expect(splitPoints(conversation)).toEqual([2, 5, 6]);
  });

  it('never separate parallel calls from their outputs', () => {
    const conversation = [user('u1'), call('a'), call('b'), output('a'), output('b'), assistant('done'), user('u2')];
    // Not 2 (between the calls), 3 (b pending) or 4 (b pending): only after the group.
    expect(splitPoints(conversation)).toEqual([5, 6]);
  });

  it('do not fall before a user message while a call waits for its output', () => {
    const conversation = [user('u1'), call('a'), user('interjection'), output('a'), user('u3')];
    expect(splitPoints(conversation)).toEqual([4]);
  });

  it('fall between consecutive complete tool groups', () => {
    const conversation = [user('u1'), call('a'), output('a'), call('b'), output('b'), assistant('done')];
    expect(splitPoints(conversation)).toEqual([3, 5]);
  });

  it('on any crafted history, no split ever leaves a call pending', () => {
    const histories: Item[][] = [
      [user('q'), call('a'), call('b'), output('b'), output('a'), call('c'), output('c'), assistant('x'), user('q2'), call('d'), output('d')],
      [call('a'), output('a'), user('q'), call('b'), user('late'), output('b'), assistant('y'), user('q3')],
      [user('q'), assistant('x'), user('q2'), call('a'), call('b'), call('c'), output('c'), output('a'), output('b'), user('q3')],
    ];
    for (const history of histories) {
      for (const point of splitPoints(history)) expect(pendingAt(history, point).size).toBe(0);
    }
  });
});

describe('the retained part', () => {
  const conversation = [
    user('first question with several words in it'),
    assistant('a long first answer with many words to make it cost'),
    user('second question'),
    call('c1', '{"q": "x"}'),
    output('c1', 'tool says something'),
    assistant('second answer'),
    user('latest question'),
  ];

  it('is at least the latest user message and what follows it', async () => {
    expect(await chooseCut(conversation, 1, asyncCount)).toBe(6);
    const withTail = [...conversation, call('c2'), output('c2')];
    // Retained = latest user message + its unanswered tool traffic, whatever keep_tokens says.
    expect(await chooseCut(withTail, 1, asyncCount)).toBe(6);
  });

  it('grows by whole turns while within keep_tokens', async () => {
    const fromSecondAnswer = count(conversation.slice(5));
    const fromSecondQuestion = count(conversation.slice(2));
    expect(await chooseCut(conversation, fromSecondAnswer, asyncCount)).toBe(5);
    expect(await chooseCut(conversation, fromSecondQuestion - 1, asyncCount)).toBe(5);
    expect(await chooseCut(conversation, fromSecondQuestion, asyncCount)).toBe(2);
    // Everything fits: the cut stops at the first split, never at 0.
    expect(await chooseCut(conversation, 10_000, asyncCount)).toBe(2);
  });

  it('never starts inside a tool group, whatever keep_tokens', async () => {
    for (let keep = 1; keep < 60; keep++) {
      const cut = await chooseCut(conversation, keep, asyncCount);
      expect(pendingAt(conversation, cut).size).toBe(0);
      expect(conversation[cut - 1]?.type).not.toBe('function_call');
    }
  });

  it('skips a split the template refuses to render', async () => {
    const refusing = (items: Item[]) => {
      if (items[0]?.type === 'message' && items[0].role === 'assistant') throw new ApiError(400, 'invalid_request_error', 'roles must alternate');
      return count(items);
    };
    expect(await chooseCut(conversation, 10_000, async (items) => refusing(items))).toBe(2);
    expect(await chooseCut(conversation, count(conversation.slice(5)), async (items) => refusing(items))).toBe(6);
  });

  it('defaults keep_tokens to 1/16 of the context, at most 8192', () => {
    expect(defaultKeepTokens(512)).toBe(32);
    expect(defaultKeepTokens(40_960)).toBe(2560);
    expect(defaultKeepTokens(1_000_000)).toBe(8192);
  });
});

describe('the capsule', () => {
  it('round-trips as base64url', () => {
    const capsule = { summary: 'They discussed ünïcode & "quotes".', items: [user('latest')] };
    const text = encodeCapsule(capsule);
    expect(text).toMatch(/^[A-Za-z0-9_-]+$/);
    expect(decodeCapsule(text, 'input[0]')).toEqual(capsule);
  });

  it('rejects anything this server did not issue', () => {
    for (const bad of ['not base64!', Buffer.from('{"x":1}').toString('base64url'), Buffer.from('[]').toString('base64url'), '']) {
      expect(() => decodeCapsule(bad, 'input[3]')).toThrow(/input\[3\]\.encrypted_content is not a compaction capsule/);
    }
    const nested = encodeCapsule({ summary: 's', items: [{ type: 'compaction', encrypted_content: 'x' }] });
    expect(() => decodeCapsule(nested, 'input[0]')).toThrow(ApiError);
  });

  it('replays as instructions, summary, retained items, then what follows', () => {
    const capsule = encodeCapsule({ summary: 'S', items: [user('kept question'), assistant('kept answer')] });
    const compaction = { type: 'compaction', id: 'cmp_1', encrypted_content: capsule };
    const resolved = resolveItems([system('be brief'), user('kept question'), compaction, user('new question')]);
    expect(resolved).toEqual([
      system('be brief'),
      { type: 'message', role: 'user', content: 'Summary of the earlier conversation:\nS', [SUMMARY_MARK]: true },
      user('kept question'),
      assistant('kept answer'),
      user('new question'),
    ]);
    // A full history before the capsule is what it replaced: only instructions survive.
    const full = resolveItems([system('be brief'), user('old'), assistant('old answer'), compaction, user('new question')]);
    expect(full).toEqual(resolved);
  });

  it('replays the summary merged into a following user message, so roles still alternate', () => {
    const capsule = encodeCapsule({ summary: 'S', items: [user('kept question')] });
    const messages = itemsToMessages(resolveItems([{ type: 'compaction', encrypted_content: capsule }]));
    expect(messages).toEqual([
      {
        role: 'user',
        content: [
          { type: 'text', text: 'Summary of the earlier conversation:\nS' },
          { type: 'text', text: 'kept question' },
        ],
      },
    ]);
  });
});

describe('compactItems', () => {
  const history = [
    system('instructions'),
    user('tell me about the first topic in detail please'),
    assistant('here is a long answer about the first topic with plenty of words'),
    user('now a second topic'),
    call('c1', '{"topic": "second"}'),
    output('c1', 'the tool found many facts about the second topic'),
    assistant('a summary of those facts for the user'),
    user('and finally this'),
  ];

  function deps(over: Partial<CompactionDeps> = {}): CompactionDeps {
    return {
      contextSize: 200,
      count: asyncCount,
      summaryPromptTokens: asyncCount,
      summarize: vi.fn(async () => ({ text: 'brief summary', promptTokens: 40, completionTokens: 3 })),
      ...over,
    };
  }

  it('keeps instructions and retained items and appends one compaction item', async () => {
    const d = deps();
    const result = await compactItems(history, d, { keepTokens: 4, maxOutputTokens: 16 });
    expect(result.output.map((i) => i.type)).toEqual(['message', 'message', 'compaction']);
    expect(result.output[0]).toEqual(system('instructions'));
    expect(result.output[1]).toEqual(user('and finally this'));
    expect(result.inputTokensBefore).toBe(count(history));
    expect(result.inputTokensAfter).toBe(count(resolveItems(result.output)));
    expect(result.inputTokensAfter).toBeLessThan(result.inputTokensBefore);
    // One summary generation, over the instructions and the head, bounded as asked.
    expect(d.summarize).toHaveBeenCalledTimes(1);
    const [request, maxTokens] = (d.summarize as ReturnType<typeof vi.fn>).mock.calls[0]!;
    expect(maxTokens).toBe(16);
    expect(request.slice(0, -1)).toEqual(history.slice(0, -1));
    expect(request.at(-1)).toMatchObject({ role: 'user', content: expect.stringMatching(/^Summarize the conversation above/) });
    expect(decodeCapsule(result.item.encrypted_content as string, 'x')).toEqual({ summary: 'brief summary', items: [user('and finally this')] });
  });

  it('compacts a history that already holds a compaction item', async () => {
    const first = await compactItems(history, deps(), { keepTokens: 4, maxOutputTokens: 16 });
    const next = [...first.output, assistant('an answer with a good number of words in it, really quite a few'), user('more?'), assistant('yes, and here is more text again'), user('last one')];
    const second = await compactItems(next, deps(), { keepTokens: 3, maxOutputTokens: 16 });
    expect(second.output.filter((i) => i.type === 'compaction')).toHaveLength(1);
    expect(second.output.at(-2)).toEqual(user('last one'));
  });

  const refusal = async (items: Item[], d: CompactionDeps, keepTokens = 4, maxOutputTokens = 16) => {
    const err = await compactItems(items, d, { keepTokens, maxOutputTokens }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    return err as ApiError;
  };

  it('refuses a history longer than the context window', async () => {
    const d = deps({ contextSize: count(history) - 1 });
    const err = await refusal(history, d);
    expect(err).toMatchObject({ status: 400, code: 'context_length_exceeded' });
    expect(err.message).toMatch(/more than the context window/);
    expect(d.summarize).not.toHaveBeenCalled();
  });

  it('refuses when the summary prompt and max_output_tokens do not fit', async () => {
    const d = deps({ contextSize: count(history) + 10 });
    const err = await refusal(history, d, 4, 1000);
    expect(err).toMatchObject({ status: 400, code: 'context_length_exceeded' });
    expect(err.message).toMatch(/summary prompt has \d+ tokens, which with max_output_tokens 1000 does not fit/);
    expect(d.summarize).not.toHaveBeenCalled();
  });

  it('refuses a result that is not shorter than the input', async () => {
    const d = deps({ summarize: async () => ({ text: 'word '.repeat(100), promptTokens: 40, completionTokens: 100 }) });
    const err = await refusal(history, d);
    expect(err).toMatchObject({ status: 400, code: 'context_length_exceeded' });
    expect(err.message).toMatch(/would not be shorter than the input/);
  });

  it('refuses a history whose retained part is all of it', async () => {
    const err = await refusal([system('s'), user('only'), call('a'), output('a')], deps());
    expect(err).toMatchObject({ status: 400, code: 'context_length_exceeded' });
    expect(err.message).toMatch(/nothing precedes the retained turns/);
  });

  it('refuses an empty summary instead of storing one', async () => {
    const err = await refusal(history, deps({ summarize: async () => ({ text: '  \n', promptTokens: 40, completionTokens: 2 }) }));
    expect(err).toMatchObject({ status: 400, type: 'invalid_request_error', code: 'context_length_exceeded' });
    expect(err.message).toMatch(/summary generation produced no text within max_output_tokens \d+; nothing was changed/);
  });
});

describe('input items', () => {
  it('reads role-only items as messages and checks every part', () => {
    expect(normalizeInput([{ role: 'user', content: 'hi' }])).toEqual([{ type: 'message', role: 'user', content: 'hi' }]);
    expect(() => normalizeInput([{ role: 'user', content: [{ type: 'input_file', file_id: 'f' }] }])).toThrow(/input\[0\]\.content\[0\]: input_file content parts are not supported/);
    expect(() => normalizeInput([{ type: 'web_search_call', id: 'x' }])).toThrow(/built-in tools/);
    expect(() => normalizeInput([{ role: 'robot', content: 'x' }])).toThrow(/role must be one of/);
    // Chat-completions parts are read the same way as their Responses spellings.
    const chatParts = normalizeInput([{ role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'image_url', image_url: { url: 'https://x/i.png' } }] }]);
    const responsesParts = normalizeInput([{ role: 'user', content: [{ type: 'input_text', text: 'a' }, { type: 'input_image', image_url: 'https://x/i.png' }] }]);
    expect(itemsToMessages(chatParts)).toEqual(itemsToMessages(responsesParts));
  });

  it('replays a previous output: reasoning, text, refusals and function calls', () => {
    const items = normalizeInput([
      { role: 'developer', content: 'dev rules' },
      { role: 'user', content: [{ type: 'input_text', text: 'q' }] },
      { type: 'reasoning', id: 'rs_1', summary: [], content: [{ type: 'reasoning_text', text: 'think' }] },
      { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'calling' }, { type: 'refusal', refusal: ' (no)' }] },
      { type: 'function_call', call_id: 'c1', name: 'f', arguments: '{"a":1}' },
      { type: 'function_call', call_id: 'c2', name: 'g', arguments: 'not json' },
      { type: 'function_call_output', call_id: 'c1', output: 'one' },
      { type: 'function_call_output', call_id: 'c2', output: [{ type: 'input_text', text: 'two' }] },
    ]);
    expect(itemsToMessages(items)).toEqual([
      { role: 'system', content: 'dev rules' },
      { role: 'user', content: [{ type: 'text', text: 'q' }] },
      {
        role: 'assistant',
        content: 'calling (no)',
        reasoning_content: 'think',
        tool_calls: [
          { id: 'c1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } },
          { id: 'c2', type: 'function', function: { name: 'g', arguments: 'not json' } },
        ],
      },
      { role: 'tool', tool_call_id: 'c1', name: 'f', content: 'one' },
      { role: 'tool', tool_call_id: 'c2', name: 'g', content: [{ type: 'text', text: 'two' }] },
    ]);
  });
});
