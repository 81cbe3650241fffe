// The request-side rules: chat_template_kwargs precedence and merge, the rolling
// reasoning checkpoint, tool_choice (every refusal), where the forced-choice instruction
// goes, the thinking-budget aliases and the budget constraint, the forced-call document,
// and which format a template's text selects.
import { describe, expect, it } from 'vitest';
import {
  applyRollingCheckpoint,
  ChatRequestError,
  forcedInstruction,
  placeInstruction,
  planTools,
  resolveTemplateKwargs,
  thinkingBudget,
  withObjectArguments,
} from '../src/chat/chat-request.js';
import type { ChatMessage } from '../src/chat/template.js';
import { CliError, parseCli } from '../src/cli-options.js';
import { ThinkingBudget } from '../src/chat/thinking-budget.js';
import { forcedCallDocument } from '../src/chat/tool-constraint.js';
import { detectChatFormat, supportsTools, TOOL_CALL_FORMATS } from '../src/chat/tool-calls/registry.js';
import type { ToolDefinition } from '../src/chat/tool-calls/types.js';

const THINK = { open: '<think>', close: '</think>' };
const tool = (name: string, parameters?: Record<string, unknown>): ToolDefinition => ({ type: 'function', function: { name, ...(parameters ? { parameters } : {}) } });
const TOOLS = [tool('get_weather', { type: 'object', properties: { city: { type: 'string', maxLength: 8 } }, required: ['city'] }), tool('get_time')];

describe('chat_template_kwargs', () => {
  it('takes the first shape present: top level, then extra_body.chat_template_kwargs, then extra_body.preserve_thinking', () => {
    const extra = { chat_template_kwargs: { from: 'extra' }, preserve_thinking: true };
    expect(resolveTemplateKwargs({ chat_template_kwargs: { from: 'top' }, extra_body: extra })).toEqual({ from: 'top' });
    expect(resolveTemplateKwargs({ extra_body: extra })).toEqual({ from: 'extra' });
    expect(resolveTemplateKwargs({ extra_body: { preserve_thinking: true } })).toEqual({ preserve_thinking: true });
    expect(resolveTemplateKwargs({})).toEqual({});
  });

  it('merges over the server default, request keys winning, unknown keys forwarded', () => {
    const server = { enable_thinking: false, reasoning_effort: 'low' };
    expect(resolveTemplateKwargs({ chat_template_kwargs: { enable_thinking: true, brand_new_kwarg: 7 } }, server)).toEqual({
      enable_thinking: true,
      reasoning_effort: 'low',
      brand_new_kwarg: 7,
    });
    expect(resolveTemplateKwargs({}, server)).toEqual(server);
  });
});

describe('rolling reasoning checkpoint', () => {
  const history: ChatMessage[] = [
    { role: 'user', content: 'First question' },
    { role: 'assistant', content: '<think>\nold reasoning\n</think>\n\nFirst answer', reasoning_content: 'old reasoning' },
    { role: 'user', content: 'Second question' },
    { role: 'assistant', content: '<think>\ncurrent reasoning\n</think>\n\n', tool_calls: [] },
    { role: 'user', content: '<tool_response>\n42\n</tool_response>' },
  ];

  it('strips reasoning from assistant replies before the latest non-tool user turn only', () => {
    const out = applyRollingCheckpoint(history, THINK);
    expect(out[1]).toEqual({ role: 'assistant', content: 'First answer' });
    // After "Second question" (a tool response is not a user turn): kept.
    expect(out[3]).toBe(history[3]);
    expect(history[1]!.content).toContain('old reasoning');
  });

  it('drops a reasoning block whose opening tag came from the prompt', () => {
    const out = applyRollingCheckpoint([{ role: 'assistant', content: 'thoughts\n</think>\n\nAnswer' }, { role: 'user', content: 'Next' }], THINK);
    expect(out[0]!.content).toBe('Answer');
  });
});

describe('tool_choice', () => {
  const reject = (tools: ToolDefinition[] | undefined, choice: unknown, message: RegExp) => {
    expect(() => planTools(tools, choice)).toThrow(ChatRequestError);
    expect(() => planTools(tools, choice)).toThrow(message);
  };

  it('auto and absent render every tool; none renders none', () => {
    expect(planTools(TOOLS, undefined)).toEqual({ rendered: TOOLS, parsed: TOOLS });
    expect(planTools(TOOLS, 'auto')).toEqual({ rendered: TOOLS, parsed: TOOLS });
    expect(planTools(TOOLS, 'none')).toEqual({ rendered: [], parsed: [] });
    expect(planTools(undefined, 'none')).toEqual({ rendered: [], parsed: [] });
  });

  it('required forces a call to any declared tool; the named form narrows to one', () => {
    expect(planTools(TOOLS, 'required')).toEqual({ rendered: TOOLS, parsed: TOOLS, forced: { kind: 'required' } });
    expect(planTools(TOOLS, { type: 'function', function: { name: 'get_time' } })).toEqual({
      rendered: [TOOLS[1]],
      parsed: [TOOLS[1]],
      forced: { kind: 'named', name: 'get_time' },
    });
  });

  it('refuses required without tools, unknown names, wrong types, empty names and malformed values', () => {
    reject(undefined, 'required', /needs at least one tool/);
    reject([], 'required', /needs at least one tool/);
    reject(TOOLS, { type: 'function', function: { name: 'nope' } }, /"nope", which is not declared/);
    reject(undefined, { type: 'function', function: { name: 'get_time' } }, /not declared/);
    reject(TOOLS, { type: 'tool', function: { name: 'get_time' } }, /type must be "function"/);
    reject(TOOLS, { function: { name: 'get_time' } }, /type must be "function"/);
    reject(TOOLS, { type: 'function', function: { name: '' } }, /non-empty string/);
    reject(TOOLS, { type: 'function' }, /non-empty string/);
    reject(TOOLS, 'always', /must be "none", "auto", "required"/);
    reject(TOOLS, 3, /string or an object/);
  });
});

describe('forced-choice instruction placement', () => {
  const instruction = forcedInstruction({ kind: 'named', name: 'get_time' });

  it('goes on the first system message', () => {
    const messages: ChatMessage[] = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Time?' },
      { role: 'system', content: 'Second system' },
    ];
    const out = placeInstruction(messages, instruction);
    expect(out[0]).toEqual({ role: 'system', content: `Be brief.\n\n${instruction}` });
    expect(out.slice(1)).toEqual(messages.slice(1));
    expect(messages[0]!.content).toBe('Be brief.');
  });

  it('else on the last user message (text parts get a new part)', () => {
    const messages: ChatMessage[] = [
      { role: 'user', content: 'One' },
      { role: 'assistant', content: 'Ok' },
      { role: 'user', content: [{ type: 'text', text: 'Two' }] },
    ];
    const out = placeInstruction(messages, instruction);
    expect(out[0]).toBe(messages[0]);
    expect(out[2]).toEqual({ role: 'user', content: [{ type: 'text', text: 'Two' }, { type: 'text', text: instruction }] });
    expect(messages[2]!.content).toHaveLength(1);
  });

  it('else as a new leading system message', () => {
    const messages: ChatMessage[] = [{ role: 'assistant', content: 'Hello' }];
    expect(placeInstruction(messages, instruction)).toEqual([{ role: 'system', content: instruction }, messages[0]]);
  });

  it('names the function in the named form', () => {
    expect(instruction).toContain('"get_time"');
    expect(forcedInstruction({ kind: 'required' })).toMatch(/one or more of the provided functions/);
  });
});

describe('history tool-call arguments', () => {
  it('become objects for templates that serialise them, when they are JSON', () => {
    const messages: ChatMessage[] = [
      { role: 'assistant', content: null, tool_calls: [{ id: 'a', type: 'function', function: { name: 'f', arguments: '{"x": 1}' } }, { id: 'b', type: 'function', function: { name: 'g', arguments: 'not json' } }] },
    ];
    const out = withObjectArguments(messages);
    expect((out[0]!.tool_calls as Array<{ function: { arguments: unknown } }>).map((c) => c.function.arguments)).toEqual([{ x: 1 }, 'not json']);
    expect((messages[0]!.tool_calls as Array<{ function: { arguments: unknown } }>)[0]!.function.arguments).toBe('{"x": 1}');
  });
});

describe('thinking budget', () => {
  it('accepts thinking_budget_tokens and llama-server\'s reasoning_budget_tokens / reasoning_budget, first set wins', () => {
    expect(thinkingBudget({ thinking_budget_tokens: 16, reasoning_budget_tokens: 32 })).toBe(16);
    expect(thinkingBudget({ reasoning_budget_tokens: 32, reasoning_budget: 64 })).toBe(32);
    expect(thinkingBudget({ reasoning_budget: 0 })).toBe(0);
    expect(thinkingBudget({ thinking_budget_tokens: -1 })).toBeUndefined();
    expect(thinkingBudget({})).toBeUndefined();
    expect(() => thinkingBudget({ reasoning_budget: -2 })).toThrow(/reasoning_budget must be an integer >= -1/);
  });

  /** Drives the constraint like the engine: sample from the mask, or take the model's pick. */
  function run(budget: ThinkingBudget, modelTokens: number[]): number[] {
    const out: number[] = [];
    for (const wanted of modelTokens) {
      const mask = budget.allowed();
      let token = wanted;
      if (mask) {
        token = mask.findIndex((w) => w !== 0) * 32 + Math.log2(mask.find((w) => w !== 0)! >>> 0);
      }
      budget.accept(token);
      out.push(token);
    }
    return out;
  }

  const pieces: Record<number, string> = { 1: '<think>', 2: '</think>', 3: 'hmm', 4: ' ok', 5: '\n\n', 6: 'Answer' };
  const options = { open: '<think>', close: '</think>', forced: [5, 2], vocabSize: 40, piece: (id: number) => pieces[id] ?? '?' };

  it('counts reasoning tokens from the opening tag and forces the close when they run out', () => {
    const b = new ThinkingBudget({ ...options, budget: 3, startsInside: false });
    expect(run(b, [1, 3, 3, 3, 3, 3, 6, 6])).toEqual([1, 3, 3, 3, 5, 2, 6, 6]);
    expect(b.reasoningTokens).toBe(3);
  });

  it('starts counting at once when the prompt opened the block; budget 0 closes it immediately', () => {
    expect(run(new ThinkingBudget({ ...options, budget: 0, startsInside: true }), [3, 3, 6])).toEqual([5, 2, 6]);
  });

  it('leaves a block that closes within budget alone', () => {
    expect(run(new ThinkingBudget({ ...options, budget: 5, startsInside: true }), [3, 2, 6, 6, 6, 6, 6, 6])).toEqual([3, 2, 6, 6, 6, 6, 6, 6]);
  });
});

describe('forced-call document', () => {
  const hermes = TOOL_CALL_FORMATS.find((f) => f.name === 'hermes')!;
  const llama = TOOL_CALL_FORMATS.find((f) => f.name === 'llama3_json')!;
  const nemo = TOOL_CALL_FORMATS.find((f) => f.name === 'mistral_nemo')!;
  const qwenCoder = TOOL_CALL_FORMATS.find((f) => f.name === 'qwen3_coder')!;

  it('is the wrapper, one call object per declared tool, and the closing wrapper', () => {
    expect(forcedCallDocument(hermes, TOOLS, { kind: 'required' })).toEqual({
      prefix: '<tool_call>\n',
      suffix: '\n</tool_call>',
      schema: {
        anyOf: [
          {
            type: 'object',
            properties: { name: { const: 'get_weather' }, arguments: TOOLS[0]!.function.parameters },
            required: ['name', 'arguments'],
            additionalProperties: false,
          },
          { type: 'object', properties: { name: { const: 'get_time' }, arguments: { type: 'object' } }, required: ['name', 'arguments'], additionalProperties: false },
        ],
      },
    });
    expect(forcedCallDocument(nemo, [TOOLS[1]!], { kind: 'named', name: 'get_time' })).toMatchObject({ prefix: '[TOOL_CALLS][', suffix: ']', schema: { required: ['name', 'arguments'] } });
    expect(forcedCallDocument(llama, [TOOLS[1]!], { kind: 'named', name: 'get_time' })).toMatchObject({ prefix: '', suffix: '', schema: { required: ['name', 'parameters'] } });
  });

  it('does not exist for formats without a JSON wire, nor for unforced choices', () => {
    expect(forcedCallDocument(qwenCoder, TOOLS, { kind: 'required' })).toBeUndefined();
    expect(forcedCallDocument(hermes, TOOLS, undefined)).toBeUndefined();
  });
});

describe('format detection from the template text', () => {
  const cases: Array<[string, string | undefined]> = [
    ['{{ "<tool_call>" }}{% if tools %}{% endif %}', 'hermes'],
    ['<tool_call>\n<function={{ name }}>\n<parameter={{ k }}>', 'qwen3_coder'],
    ['<tool_call>{{ name }}<arg_key>{{ k }}</arg_key><arg_value>', 'glm47'],
    ['[TOOL_CALLS]{{ tool_calls | tojson }}', 'mistral_nemo'],
    ['[TOOL_CALLS]{{ name }}[ARGS]{{ arguments }}', 'mistral'],
    ['<minimax:tool_call><invoke name=', 'minimax_m2'],
    [']<]minimax[>[<tool_call>', 'minimax_m3'],
    ['<function={{ name }}>{{ args }}</function>', 'functionary_v3_1'],
    ['>>>all\n{{ content }}', 'functionary_v3_2'],
    ['<|START_ACTION|>{{ calls }}<|END_ACTION|>', 'command_r'],
    ['<|tool_call|>{{ calls }}', 'granite'],
    ['<|tool_call>call:{{ name }}', 'gemma4'],
    ['<start_function_call>call:', 'function_gemma'],
    ['<|python_tag|>{{ call }}', 'llama3_json'],
    ['<|tool_calls_section_begin|>', 'kimi_k2'],
    ['<|tool_call_start|>[{{ calls }}]', 'pythonic'],
    ['<longcat_tool_call>', 'longcat'],
    ['<｜tool▁calls▁begin｜>', 'deepseek'],
    ['{% for tool in tools %}{{ tool | tojson }}{% endfor %}', 'generic_json'],
    ['{{ messages[0].content }}', undefined],
  ];
  it.each(cases)('%s → %s', (template, name) => {
    expect(detectChatFormat(template).toolFormat?.name).toBe(name);
  });

  it('Harmony templates are Harmony; reasoning tags come from the template', () => {
    expect(detectChatFormat('<|start|>assistant<|channel|>final<|message|>{{ tools }}')).toMatchObject({ harmony: true });
    expect(detectChatFormat('{{ "<think>\\n" }}{{ "</think>" }}').reasoning).toEqual(THINK);
    expect(detectChatFormat('<|START_THINKING|>').reasoning).toEqual({ open: '<|START_THINKING|>', close: '<|END_THINKING|>' });
    expect(supportsTools(detectChatFormat(undefined))).toBe(false);
    expect(detectChatFormat('{{ call.arguments | tojson }}').objectArguments).toBe(true);
    expect(detectChatFormat('{% for k, v in tool_call.arguments|items %}{% endfor %}<function=').objectArguments).toBe(true);
    expect(detectChatFormat('{% if a.arguments is string %}{{ a.arguments }}{% else %}{{ a.arguments | tojson }}{% endif %}').objectArguments).toBe(false);
  });
});

describe('--chat-template-kwargs', () => {
  it('reads a JSON object from the flag or LLAMA_ARG_CHAT_TEMPLATE_KWARGS, the flag winning', () => {
    const serve = (argv: string[], env: Record<string, string> = {}) => {
      const command = parseCli(argv, env, 'models/x');
      return command.kind === 'serve' ? command.options.chatTemplateKwargs : undefined;
    };
    expect(serve(['--chat-template-kwargs', '{"enable_thinking": false}'])).toEqual({ enable_thinking: false });
    expect(serve([], { LLAMA_ARG_CHAT_TEMPLATE_KWARGS: '{"reasoning_effort": "low"}' })).toEqual({ reasoning_effort: 'low' });
    expect(serve(['--chat-template-kwargs', '{"a": 1}'], { LLAMA_ARG_CHAT_TEMPLATE_KWARGS: '{"b": 2}' })).toEqual({ a: 1 });
    expect(serve([])).toBeUndefined();
    expect(() => serve(['--chat-template-kwargs', '[1]'])).toThrow(CliError);
    expect(() => serve(['--chat-template-kwargs', '{oops'])).toThrow(/must be a JSON object/);
  });
});
