// Golden tests of every tool-call format: a realistic reply is tokenized with a real
// tokenizer and fed token by token through the stream filter and parser; the chunks a
// client receives (adjacent pieces of one kind merged) must equal the expected sequence.
// Each reply is also fed one character at a time, which splits every delimiter at every
// position, and must give the same chunks. Content never carries markup, argument pieces
// add up to the final arguments, and the four incrementally streamed formats really do
// send their arguments in several pieces.
import { describe, expect, it } from 'vitest';
import type { ChatOutputConfig } from '../src/chat/chat-output.js';
import type { ThinkTags } from '../src/chat/tool-calls/registry.js';
import { TOOL_CALL_FORMATS } from '../src/chat/tool-calls/registry.js';
import type { ToolCallFormat, ToolDefinition } from '../src/chat/tool-calls/types.js';
import { markupTokens, specialIds } from '../src/server/chat-prepare.js';
import { argumentPieces, coalesce, lenmlTokenizer, streamChars, streamReply, type GoldenChunk, type LenmlName } from './helpers/tool-golden.js';

const weather: ToolDefinition = {
  type: 'function',
  function: {
    name: 'get_weather',
    parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] },
  },
};
const time: ToolDefinition = {
  type: 'function',
  function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { type: 'string' } } } },
};
const TOOLS = [weather, time];

const format = (name: string): ToolCallFormat => TOOL_CALL_FORMATS.find((f) => f.name === name)!;
const THINK: ThinkTags = { open: '<think>', close: '</think>' };

interface Golden {
  name: string;
  format: string;
  tokenizer: LenmlName;
  reply: string;
  expected: GoldenChunk[];
  reasoning?: ThinkTags;
  /** Markup that must never reach content. */
  markers: string[];
  /** Calls whose arguments must arrive in more than one piece. */
  incremental?: boolean;
}

const weatherThenTime = (a0: string, a1: string): GoldenChunk[] => [
  { call: 0, name: 'get_weather' },
  { args: 0, text: a0 },
  { call: 1, name: 'get_time' },
  { args: 1, text: a1 },
];
const XML_ARGS: [string, string] = ['{"city":"Paris","days":3}', '{"zone":"CET"}'];
const JSON_ARGS: [string, string] = ['{"city": "Paris", "days": 3}', '{"zone": "CET"}'];

const GOLDENS: Golden[] = [
  {
    name: 'Hermes/Qwen: reasoning, prose, two parallel calls',
    format: 'hermes',
    tokenizer: 'qwen3',
    reasoning: THINK,
    reply:
      '<think>\nThe user wants the weather and the time.\n</think>\n\nLet me check both.\n' +
      '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>\n' +
      '<tool_call>\n{"name": "get_time", "arguments": {"zone": "CET"}}\n</tool_call>',
    expected: [{ reasoning: 'The user wants the weather and the time.' }, { content: 'Let me check both.' }, ...weatherThenTime(...JSON_ARGS)],
    markers: ['<tool_call>', '</tool_call>', '"name"', '<think>'],
    incremental: true,
  },
  {
    name: 'Hermes 2 Pro key order (arguments before name)',
    format: 'hermes',
    tokenizer: 'llama3_1',
    reply: '<tool_call>\n{"arguments": {"city": "Paris", "days": 3}, "name": "get_weather"}\n</tool_call>',
    expected: [
      { call: 0, name: 'get_weather' },
      { args: 0, text: JSON_ARGS[0] },
    ],
    markers: ['<tool_call>', '"name"'],
  },
  {
    name: 'DeepSeek V3 native tokens',
    format: 'deepseek',
    tokenizer: 'deepseek_v3',
    reply:
      'Let me check.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city": "Paris", "days": 3}\n```<｜tool▁call▁end｜>\n' +
      '<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{"zone": "CET"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    expected: [{ content: 'Let me check.' }, ...weatherThenTime(...JSON_ARGS)],
    markers: ['tool▁call', '```'],
  },
  {
    name: 'Qwen3-Coder XML',
    format: 'qwen3_coder',
    tokenizer: 'qwen3',
    reply:
      "I'll look that up.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n" +
      '<tool_call>\n<function=get_time>\n<parameter=zone>\nPST\n</parameter>\n</function>\n</tool_call>',
    expected: [{ content: "I'll look that up." }, ...weatherThenTime('{"city":"San Francisco","days":3}', '{"zone":"PST"}')],
    markers: ['<tool_call>', '<function=', '<parameter='],
    incremental: true,
  },
  {
    name: 'Mistral Nemo JSON list',
    format: 'mistral_nemo',
    tokenizer: 'qwen3',
    reply:
      '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}, "id": "a1b2c3d4e"}, ' +
      '{"name": "get_time", "arguments": {"zone": "CET"}, "id": "f5g6h7i8j"}]',
    expected: weatherThenTime(...JSON_ARGS),
    markers: ['[TOOL_CALLS]', '"id"'],
    incremental: true,
  },
  {
    name: 'Mistral bracketed, prose first',
    format: 'mistral',
    tokenizer: 'llama3_1',
    reply: 'Checking now.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3}[TOOL_CALLS]get_time[ARGS]{"zone": "CET"}',
    expected: [{ content: 'Checking now.' }, ...weatherThenTime(...JSON_ARGS)],
    markers: ['[TOOL_CALLS]', '[ARGS]'],
    incremental: true,
  },
  {
    name: 'MiniMax M2',
    format: 'minimax_m2',
    tokenizer: 'qwen3',
    reply:
      'Let me check.\n<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n<parameter name="days">3</parameter>\n</invoke>\n' +
      '<invoke name="get_time">\n<parameter name="zone">CET</parameter>\n</invoke>\n</minimax:tool_call>',
    expected: [{ content: 'Let me check.' }, ...weatherThenTime(...XML_ARGS)],
    markers: ['<invoke', '<parameter', 'minimax'],
  },
  {
    name: 'Functionary v3.1',
    format: 'functionary_v3_1',
    tokenizer: 'llama3_1',
    reply: 'Let me check.<function=get_weather>{"city": "Paris", "days": 3}</function><function=get_time>{"zone": "CET"}</function>',
    expected: [{ content: 'Let me check.' }, ...weatherThenTime(...JSON_ARGS)],
    markers: ['<function', '</function>'],
  },
  {
    name: 'Functionary v3.2 (after the prompt\'s ">>>")',
    format: 'functionary_v3_2',
    tokenizer: 'llama3_1',
    reply: 'all\nLet me check.>>>get_weather\n{"city": "Paris", "days": 3}>>>get_time\n{"zone": "CET"}',
    expected: [{ content: 'Let me check.' }, ...weatherThenTime(...JSON_ARGS)],
    markers: ['>>>', 'all\n'],
  },
  {
    name: 'Command R7B: thinking, then an action list',
    format: 'command_r',
    tokenizer: 'qwen3',
    reasoning: { open: '<|START_THINKING|>', close: '<|END_THINKING|>' },
    reply:
      '<|START_THINKING|>I need the weather and the time.<|END_THINKING|><|START_ACTION|>[\n' +
      '    {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris", "days": 3}},\n' +
      '    {"tool_call_id": "1", "tool_name": "get_time", "parameters": {"zone": "CET"}}\n]<|END_ACTION|>',
    expected: [{ reasoning: 'I need the weather and the time.' }, ...weatherThenTime(...JSON_ARGS)],
    markers: ['ACTION', 'THINKING', 'tool_name'],
  },
  {
    name: 'Command R ReAct "Action:" lines, prose mentioning Action: mid-line',
    format: 'command_r',
    tokenizer: 'llama3_1',
    reply: 'The next step is the Action: lookup.\nAction: get_weather\nAction Input: {"city": "Paris", "days": 3}',
    expected: [
      { content: 'The next step is the Action: lookup.' },
      { call: 0, name: 'get_weather' },
      { args: 0, text: JSON_ARGS[0] },
    ],
    markers: ['Action Input'],
  },
  {
    name: 'Granite 3.3: thinking, response wrapper, <|tool_call|> list',
    format: 'granite',
    tokenizer: 'qwen3',
    reasoning: THINK,
    reply:
      '<think>The user asks for weather and time.</think><response>Let me check.</response>' +
      '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}, {"name": "get_time", "arguments": {"zone": "CET"}}]',
    expected: [{ reasoning: 'The user asks for weather and time.' }, { content: 'Let me check.' }, ...weatherThenTime(...JSON_ARGS)],
    markers: ['<response>', '</response>', 'tool_call'],
  },
  {
    name: 'Gemma 4',
    format: 'gemma4',
    tokenizer: 'gemma3',
    reply: 'Let me check.<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|><|tool_call>call:get_time{zone:<|"|>CET<|"|>}<tool_call|>',
    expected: [{ content: 'Let me check.' }, ...weatherThenTime(...XML_ARGS)],
    markers: ['tool_call', 'call:', '<|"|>'],
  },
  {
    name: 'Llama 3.x JSON, two calls separated by ";"',
    format: 'llama3_json',
    tokenizer: 'llama3_1',
    reply: '{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}; {"name": "get_time", "parameters": {"zone": "CET"}}',
    expected: weatherThenTime(...JSON_ARGS),
    markers: ['"name"', '"parameters"', ';'],
    incremental: true,
  },
  {
    name: 'Llama 3.1 built-in tool after <|python_tag|>',
    format: 'llama3_json',
    tokenizer: 'llama3_1',
    reply: '<|python_tag|>brave_search.call(query="weather in Paris")',
    expected: [
      { call: 0, name: 'brave_search' },
      { args: 0, text: '{"query":"weather in Paris"}' },
    ],
    markers: ['python_tag', '.call('],
  },
  {
    name: 'Generic JSON list',
    format: 'generic_json',
    tokenizer: 'qwen3',
    reply: '[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}, {"name": "get_time", "arguments": {"zone": "CET"}}]',
    expected: weatherThenTime(...JSON_ARGS),
    markers: ['"name"'],
  },
  {
    name: 'Function-calling Gemma',
    format: 'function_gemma',
    tokenizer: 'gemma3',
    reply:
      'Let me check.<start_function_call>call:get_weather{city:<escape>Paris<escape>,days:3}<end_function_call>' +
      '<start_function_call>call:get_time{zone:<escape>CET<escape>}<end_function_call>',
    expected: [{ content: 'Let me check.' }, ...weatherThenTime(...XML_ARGS)],
    markers: ['function_call', '<escape>'],
  },
  {
    name: 'Kimi K2',
    format: 'kimi_k2',
    tokenizer: 'qwen3',
    reply:
      'Let me check.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris", "days": 3}<|tool_call_end|>' +
      '<|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>{"zone": "CET"}<|tool_call_end|><|tool_calls_section_end|>',
    expected: [{ content: 'Let me check.' }, ...weatherThenTime(...JSON_ARGS)],
    markers: ['<|tool_call', 'functions.'],
  },
  {
    name: 'MiniMax M3 namespaced XML',
    format: 'minimax_m3',
    tokenizer: 'qwen3',
    reply:
      'Let me check.]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="get_weather">\n]<]minimax[>[<city>Paris]<]minimax[>[</city>\n' +
      ']<]minimax[>[<days>3]<]minimax[>[</days>\n]<]minimax[>[</invoke>\n]<]minimax[>[<invoke name="get_time">\n' +
      ']<]minimax[>[<zone>CET]<]minimax[>[</zone>\n]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>',
    expected: [{ content: 'Let me check.' }, ...weatherThenTime(...XML_ARGS)],
    markers: ['minimax', '<invoke'],
  },
  {
    name: 'Pythonic between <|tool_call_start|> and <|tool_call_end|>',
    format: 'pythonic',
    tokenizer: 'qwen3',
    reply: "Let me check.<|tool_call_start|>[get_weather(city=\"Paris\", days=3), get_time(zone='CET')]<|tool_call_end|>",
    expected: [{ content: 'Let me check.' }, ...weatherThenTime(...XML_ARGS)],
    markers: ['tool_call', 'get_weather('],
  },
  {
    name: 'Pythonic bare list',
    format: 'pythonic',
    tokenizer: 'llama3_1',
    reply: '[get_weather(city="Paris", days=3), get_time(zone="CET")]',
    expected: weatherThenTime(...XML_ARGS),
    markers: ['get_weather('],
  },
  {
    name: 'GLM-4.7',
    format: 'glm47',
    tokenizer: 'qwen3',
    reply:
      'Let me check.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key><arg_value>3</arg_value></tool_call>' +
      '<tool_call>get_time<arg_key>zone</arg_key><arg_value>CET</arg_value></tool_call>',
    expected: [{ content: 'Let me check.' }, ...weatherThenTime(...XML_ARGS)],
    markers: ['tool_call', 'arg_'],
  },
  {
    name: 'LongCat-Flash',
    format: 'longcat',
    tokenizer: 'qwen3',
    reply:
      'Let me check.\n<longcat_tool_call>get_weather\n<longcat_arg_key>city</longcat_arg_key>\n<longcat_arg_value>Paris</longcat_arg_value>\n' +
      '<longcat_arg_key>days</longcat_arg_key>\n<longcat_arg_value>3</longcat_arg_value>\n</longcat_tool_call>\n' +
      '<longcat_tool_call>get_time\n<longcat_arg_key>zone</longcat_arg_key>\n<longcat_arg_value>CET</longcat_arg_value>\n</longcat_tool_call>',
    expected: [{ content: 'Let me check.' }, ...weatherThenTime(...XML_ARGS)],
    markers: ['longcat'],
  },
];

function config(g: { format: string; reasoning?: ThinkTags }): ChatOutputConfig {
  return {
    ...(g.reasoning ? { reasoning: { tags: g.reasoning, startsInside: false } } : {}),
    tools: { format: format(g.format), declared: TOOLS },
  };
}

async function keepIds(g: Golden) {
  const tok = await lenmlTokenizer(g.tokenizer);
  return specialIds(tok, markupTokens({ toolFormat: format(g.format), harmony: false, ...(g.reasoning ? { reasoning: g.reasoning } : {}) }, true));
}

describe('tool-call formats, golden chunk sequences', () => {
  it('covers every format in the registry', () => {
    const covered = new Set([...GOLDENS.map((g) => g.format)]);
    expect(TOOL_CALL_FORMATS.map((f) => f.name).filter((n) => !covered.has(n))).toEqual([]);
  });

  for (const g of GOLDENS) {
    it(g.name, async () => {
      const tok = await lenmlTokenizer(g.tokenizer);
      const streamed = await streamReply(tok, g.reply, config(g), await keepIds(g));
      expect(coalesce(streamed.chunks)).toEqual(g.expected);
      expect(streamed.warnings).toEqual([]);
      for (const chunk of streamed.chunks) {
        if (typeof chunk.content === 'string') for (const m of g.markers) expect(chunk.content).not.toContain(m);
      }
      // The pieces of each call add up to its final arguments.
      const pieces = argumentPieces(streamed.chunks);
      streamed.reply.toolCalls.forEach((call, i) => expect(pieces.get(i)!.join('')).toBe(call.function.arguments));
      if (g.incremental) expect([...pieces.values()].some((p) => p.length > 2)).toBe(true);
      else for (const p of pieces.values()) expect(p).toHaveLength(1);

      const chars = streamChars(g.reply, config(g));
      expect(coalesce(chars.chunks)).toEqual(g.expected);
      expect(chars.warnings).toEqual([]);
    });
  }
});

describe('malformed calls come back as content, never a crash', () => {
  const cases: Array<{ name: string; format: string; tokenizer: LenmlName; reply: string }> = [
    { name: 'Hermes with an unquoted name', format: 'hermes', tokenizer: 'qwen3', reply: 'Sure.\n<tool_call>\n{"name": get_weather}\n</tool_call>' },
    { name: 'Qwen3-Coder without a function', format: 'qwen3_coder', tokenizer: 'qwen3', reply: 'Sure.\n<tool_call>\nnot a function\n</tool_call>' },
    { name: 'Mistral marker followed by prose', format: 'mistral', tokenizer: 'llama3_1', reply: '[TOOL_CALLS] I cannot call a tool for that.\nSorry.' },
    { name: 'Gemma 4 with an unterminated string', format: 'gemma4', tokenizer: 'gemma3', reply: 'Sure.<|tool_call>call:get_weather{city:<|"|>Paris}<tool_call|>' },
    { name: 'pythonic with a non-literal argument', format: 'pythonic', tokenizer: 'qwen3', reply: '<|tool_call_start|>[get_weather(city=get_city())]<|tool_call_end|>' },
    { name: 'GLM without a name', format: 'glm47', tokenizer: 'qwen3', reply: 'x<tool_call><arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>' },
    { name: 'Kimi without arguments', format: 'kimi_k2', tokenizer: 'qwen3', reply: '<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_end|><|tool_calls_section_end|>' },
  ];
  for (const c of cases) {
    it(c.name, async () => {
      const tok = await lenmlTokenizer(c.tokenizer);
      const keep = specialIds(tok, markupTokens({ toolFormat: format(c.format), harmony: false }, true));
      const streamed = await streamReply(tok, c.reply, config(c), keep);
      expect(streamed.reply.toolCalls).toEqual([]);
      expect(streamed.reply.content).toBe(c.reply);
      expect(coalesce(streamed.chunks)).toEqual([{ content: c.reply }]);
      expect(streamChars(c.reply, config(c)).reply.content).toBe(c.reply);
    });
  }
});

describe('a call cut off by max_tokens is never content', () => {
  it('keeps a streamed call with the arguments read so far, and the same in the final parse', async () => {
    const tok = await lenmlTokenizer('qwen3');
    const reply = 'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa';
    const streamed = await streamReply(tok, reply, config({ format: 'hermes' }), new Set(), 'Hi', true);
    expect(streamed.reply.content).toBe('Sure.');
    expect(streamed.reply.cutOff).toBe(true);
    expect(streamed.reply.toolCalls.map((c) => c.function.name)).toEqual(['get_weather']);
    const chunks = coalesce(streamed.chunks);
    expect(chunks.filter((c) => 'content' in c)).toEqual([{ content: 'Sure.' }]);
    const pieces = argumentPieces(streamed.chunks);
    expect(pieces.get(0)!.join('')).toBe(streamed.reply.toolCalls[0]!.function.arguments);
    expect(streamed.warnings).toEqual([]);
    // The one-shot parse (a non-streaming answer) reads the same call.
    const chars = streamChars(reply, config({ format: 'hermes' }), true);
    expect(chars.reply).toMatchObject({ content: 'Sure.', cutOff: true });
    expect(chars.reply.toolCalls.map((c) => [c.function.name, c.function.arguments])).toEqual(
      streamed.reply.toolCalls.map((c) => [c.function.name, c.function.arguments]),
    );
  });

  it('keeps a call cut off before its name: nameless among several tools, named when one is declared', async () => {
    const tok = await lenmlTokenizer('qwen3');
    const reply = 'Sure.\n<tool_call>\n{"na';
    const streamed = await streamReply(tok, reply, config({ format: 'hermes' }), new Set(), 'Hi', true);
    expect(streamed.reply).toMatchObject({ content: 'Sure.', cutOff: true });
    expect(streamed.reply.toolCalls.map((c) => c.function)).toEqual([{ name: '', arguments: '' }]);
    expect(coalesce(streamed.chunks)).toEqual([{ content: 'Sure.' }, { call: 0, name: '' }]);
    expect(streamed.warnings).toEqual([]);
    const one: ChatOutputConfig = { tools: { format: format('hermes'), declared: [weather] } };
    for (const out of [await streamReply(tok, reply, one, new Set(), 'Hi', true), streamChars(reply, one, true)]) {
      expect(out.reply.toolCalls.map((c) => c.function)).toEqual([{ name: 'get_weather', arguments: '' }]);
      expect(coalesce(out.chunks)).toEqual([{ content: 'Sure.' }, { call: 0, name: 'get_weather' }]);
    }
  });

  it('keeps a cut-off call of a format that sends calls whole, without its arguments', () => {
    const reply = 'Sure.<|tool_call_start|>[get_weather(city="Pa';
    const out = streamChars(reply, { tools: { format: format('pythonic'), declared: [weather] } }, true);
    expect(out.reply).toMatchObject({ content: 'Sure.', cutOff: true });
    expect(out.reply.toolCalls.map((c) => c.function)).toEqual([{ name: 'get_weather', arguments: '' }]);
    expect(coalesce(out.chunks)).toEqual([{ content: 'Sure.' }, { call: 0, name: 'get_weather' }]);
  });

  it('drops a marker cut short; a forced reply makes it a started call', async () => {
    const tok = await lenmlTokenizer('qwen3');
    for (const reply of ['<tool_call', '<', '\n<tool_c']) {
      const auto = streamChars(`Sure. ${reply}`, config({ format: 'hermes' }), true);
      expect(auto.reply).toMatchObject({ content: 'Sure.', toolCalls: [], cutOff: false });
      expect(coalesce(auto.chunks)).toEqual([{ content: 'Sure.' }]);
      const forced: ChatOutputConfig = { tools: { format: format('hermes'), declared: [weather], forced: true } };
      for (const out of [streamChars(reply, forced, true), await streamReply(tok, reply, forced, new Set(), 'Hi', true)]) {
        expect(out.reply).toMatchObject({ content: '', cutOff: true });
        expect(out.reply.toolCalls.map((c) => c.function)).toEqual([{ name: 'get_weather', arguments: '' }]);
        expect(coalesce(out.chunks)).toEqual([{ call: 0, name: 'get_weather' }]);
      }
      // Text before the marker: the forced reply did not start with a call.
      expect(streamChars(`Sure. ${reply}`, forced, true).reply).toMatchObject({ content: 'Sure.', toolCalls: [] });
    }
    // Without the limit the same text is content.
    expect(streamChars('Sure. <tool_call', config({ format: 'hermes' })).reply.content).toBe('Sure. <tool_call');
    // After a complete call it is dropped, and the call stands (the reply is not cut inside it).
    const after = streamChars('<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>\n<tool_c', config({ format: 'hermes' }), true);
    expect(after.reply).toMatchObject({ content: '', cutOff: false });
    expect(after.reply.toolCalls.map((c) => c.function)).toEqual([{ name: 'get_time', arguments: '{}' }]);
  });

  it('a reasoning tag cut short by the limit is dropped', () => {
    const inside = streamChars('Thinking.\n</thi', { reasoning: { tags: THINK, startsInside: true } }, true);
    expect(inside.reply).toMatchObject({ reasoning: 'Thinking.', content: '' });
    const opening = streamChars('<thi', { reasoning: { tags: THINK, startsInside: false } }, true);
    expect(opening.reply).toMatchObject({ reasoning: '', content: '' });
    expect(streamChars('<thi', { reasoning: { tags: THINK, startsInside: false } }).reply.content).toBe('<thi');
  });

  it('the same markup without the limit (an end-of-generation token) is content', async () => {
    const tok = await lenmlTokenizer('qwen3');
    const reply = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa';
    const streamed = await streamReply(tok, reply, config({ format: 'hermes' }), new Set());
    expect(streamed.reply).toMatchObject({ content: reply, toolCalls: [], cutOff: false });
    // The name and part of the arguments had already gone out: that disagreement is logged.
    expect(streamed.warnings.length).toBeGreaterThan(0);
  });
});

describe('partial delimiters', () => {
  it('text that only looks like the start of a marker is released as content', async () => {
    for (const [name, reply] of [
      ['hermes', 'Use <tool> or <tool_c to mark it, then <tool_call'],
      ['mistral', 'The [TOOL] token and [TOOL_CALLS are different; so is [TOOL_CALLS'],
      ['llama3_json', '{"answer": 42}'],
      ['functionary_v3_2', 'allowance is >> than >>'],
    ] as const) {
      const tok = await lenmlTokenizer('qwen3');
      const streamed = await streamReply(tok, reply, config({ format: name }), new Set());
      expect(streamed.reply).toMatchObject({ content: reply, toolCalls: [] });
      expect(coalesce(streamed.chunks)).toEqual([{ content: reply }]);
      expect(streamChars(reply, config({ format: name })).reply.content).toBe(reply);
    }
  });

  it('holds a marker split across tokens back until it is complete', () => {
    const out = streamChars('Hi <tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>', config({ format: 'hermes' }));
    expect(coalesce(out.chunks)).toEqual([{ content: 'Hi' }, { call: 0, name: 'get_time' }, { args: 0, text: '{}' }]);
  });
});

describe('parallel_tool_calls: false keeps the first call', () => {
  it('drops the second call from the stream and the reply', async () => {
    const tok = await lenmlTokenizer('qwen3');
    const g = GOLDENS[0]!;
    const streamed = await streamReply(tok, g.reply, { ...config(g), tools: { format: format('hermes'), declared: TOOLS, maxCalls: 1 } }, await keepIds(g));
    expect(streamed.reply.toolCalls.map((c) => c.function.name)).toEqual(['get_weather']);
    expect(coalesce(streamed.chunks).filter((c) => 'call' in c)).toEqual([{ call: 0, name: 'get_weather' }]);
  });
});

describe('reasoning', () => {
  it('a prompt that opens <think> makes the reply start inside the block', async () => {
    const tok = await lenmlTokenizer('qwen3');
    const c: ChatOutputConfig = { reasoning: { tags: THINK, startsInside: true } };
    const streamed = await streamReply(tok, 'Two plus two is four.\n</think>\n\nThe answer is 4.', c, new Set());
    expect(coalesce(streamed.chunks)).toEqual([{ reasoning: 'Two plus two is four.' }, { content: 'The answer is 4.' }]);
  });

  it('an unclosed block (max_tokens) is all reasoning', async () => {
    const tok = await lenmlTokenizer('qwen3');
    const streamed = await streamReply(tok, '<think>\nStill thinking about', { reasoning: { tags: THINK, startsInside: false } }, new Set());
    expect(streamed.reply).toMatchObject({ reasoning: 'Still thinking about', content: '' });
  });

  it('<think> later in the reply is content, not reasoning', async () => {
    const tok = await lenmlTokenizer('qwen3');
    const reply = 'Use the <think> tag.';
    const streamed = await streamReply(tok, reply, { reasoning: { tags: THINK, startsInside: false } }, new Set());
    expect(streamed.reply).toMatchObject({ reasoning: '', content: reply });
  });
});

describe('Harmony (GPT-OSS), tokenized with its own tokenizer', () => {
  const harmonyConfig = (tools: boolean): ChatOutputConfig => ({ harmony: true, ...(tools ? { tools: { declared: TOOLS } } : {}) });
  const keep = async () => specialIds(await lenmlTokenizer('gptoss'), markupTokens({ harmony: true }, true));

  it('analysis is reasoning, final is content', async () => {
    const tok = await lenmlTokenizer('gptoss');
    const reply = '<|channel|>analysis<|message|>The user greets me.<|end|><|start|>assistant<|channel|>final<|message|>Hello there!';
    const streamed = await streamReply(tok, reply, harmonyConfig(false), await keep());
    expect(coalesce(streamed.chunks)).toEqual([{ reasoning: 'The user greets me.' }, { content: 'Hello there!' }]);
    expect(coalesce(streamChars(reply, harmonyConfig(false)).chunks)).toEqual(coalesce(streamed.chunks));
  });

  it('a commentary message to functions.NAME is a call (generation ends at <|call|>)', async () => {
    const tok = await lenmlTokenizer('gptoss');
    const reply =
      '<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris","days":3}';
    const streamed = await streamReply(tok, reply, harmonyConfig(true), await keep());
    expect(coalesce(streamed.chunks)).toEqual([
      { reasoning: 'Need the weather.' },
      { call: 0, name: 'get_weather' },
      { args: 0, text: '{"city":"Paris","days":3}' },
    ]);
    for (const chunk of streamed.chunks) if (typeof chunk.content === 'string') expect(chunk.content).not.toMatch(/<\||functions\./);
  });

  it('the recipient may come before the channel', async () => {
    const tok = await lenmlTokenizer('gptoss');
    const reply = ' to=functions.get_time<|channel|>commentary json<|message|>{"zone": "CET"}';
    const streamed = await streamReply(tok, reply, harmonyConfig(true), await keep());
    expect(coalesce(streamed.chunks)).toEqual([
      { call: 0, name: 'get_time' },
      { args: 0, text: '{"zone": "CET"}' },
    ]);
  });

  it('a call cut off mid-arguments by max_tokens keeps its name and the arguments written', async () => {
    const tok = await lenmlTokenizer('gptoss');
    const text = '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Par';
    const streamed = await streamReply(tok, text, harmonyConfig(true), await keep(), 'Hi', true);
    expect(streamed.reply).toMatchObject({ content: '', cutOff: true });
    expect(streamed.reply.toolCalls.map((c) => c.function)).toEqual([{ name: 'get_weather', arguments: '{"city": "Par' }]);
    expect(coalesce(streamed.chunks)).toEqual([
      { call: 0, name: 'get_weather' },
      { args: 0, text: '{"city": "Par' },
    ]);
  });

  it('a header cut off by max_tokens is no content; naming a recipient, it is a started call', () => {
    const header = streamChars('<|channel|>commentary to=functions.get_wea', harmonyConfig(true), true);
    expect(header.reply).toMatchObject({ content: '', cutOff: true });
    expect(header.reply.toolCalls.map((c) => c.function)).toEqual([{ name: 'get_weather', arguments: '' }]);
    expect(streamChars('<|channel|>fin', harmonyConfig(true), true).reply).toMatchObject({ content: '', toolCalls: [], cutOff: false });
  });

  it('a call ended without its terminator and without the limit is content', async () => {
    const tok = await lenmlTokenizer('gptoss');
    const body = '{"city": "Par';
    const streamed = await streamReply(tok, `<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>${body}`, harmonyConfig(true), await keep());
    expect(streamed.reply).toMatchObject({ content: body, toolCalls: [] });
  });
});

describe('argument coercion against the tool schema', () => {
  const tools: ToolDefinition[] = [
    {
      type: 'function',
      function: {
        name: 'f',
        parameters: {
          type: 'object',
          properties: { zip: { type: 'string' }, n: { type: 'integer' }, ok: { type: 'boolean' }, tags: { type: 'array' }, opt: { type: ['number', 'null'] } },
        },
      },
    },
  ];
  it('string parameters keep their raw text; others are read as JSON or loose literals', () => {
    const reply =
      '<tool_call>\n<function=f>\n<parameter=zip>\n01234\n</parameter>\n<parameter=n>\n7\n</parameter>\n<parameter=ok>\nTrue\n</parameter>\n' +
      '<parameter=tags>\n["a", "b"]\n</parameter>\n<parameter=opt>\nNone\n</parameter>\n<parameter=free>\n12\n</parameter>\n</function>\n</tool_call>';
    const out = streamChars(reply, { tools: { format: format('qwen3_coder'), declared: tools } });
    expect(JSON.parse(out.reply.toolCalls[0]!.function.arguments)).toEqual({ zip: '01234', n: 7, ok: true, tags: ['a', 'b'], opt: null, free: '12' });
  });
});
