// Turns an OpenAI-style conversation into the prompt text the checkpoint was trained on,
// by running its own Jinja chat template the way transformers' apply_chat_template does,
// with llama-server's additions: the date variables its templates read, and tool calls and
// tool results written as JSON text where the template has no place for them.
import { Template } from '@huggingface/jinja';

export interface TextContentPart {
  type: 'text';
  text: string;
}

/** Any other part type (image_url, input_audio, …); text-only models reject them upstream. */
export interface OtherContentPart {
  type: string;
  [key: string]: unknown;
}

export type ContentPart = TextContentPart | OtherContentPart;

export interface ChatMessage {
  role: string;
  content?: string | ContentPart[] | null;
  name?: string;
  [key: string]: unknown;
}

export interface RenderChatOptions {
  /** Rendered only when non-empty: templates test `if tools`, and `[]` must behave as absent. */
  tools?: readonly unknown[];
  /** chat_template_kwargs, forwarded verbatim (e.g. enable_thinking). */
  kwargs?: Readonly<Record<string, unknown>>;
  /** The template's add_generation_prompt: open the assistant's turn after the messages (default true). */
  addGenerationPrompt?: boolean;
  /** The time the date variables tell (default: now). */
  now?: Date;
}

export class ChatTemplateError extends Error {}

/**
 * Used when the checkpoint ships no chat template. ChatML is what llama-server falls back
 * to; the BOS prefix keeps the "template owns the special tokens" rule, so the rendered
 * text is always tokenized without adding special tokens.
 */
export const FALLBACK_CHAT_TEMPLATE =
  '{% if bos_token %}{{ bos_token }}{% endif %}' +
  "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
const pad2 = (n: number) => String(n).padStart(2, '0');

/**
 * The date variables llama-server gives templates beside strftime_now: Llama 3.x's
 * `date_string` (strftime "%d %b %Y", local time, as strftime_now) and FireFunction v2's
 * `datetime` ("%b %d %Y %H:%M:%S GMT", in UTC).
 */
export function templateDates(now: Date): { date_string: string; datetime: string } {
  const date_string = `${pad2(now.getDate())} ${MONTHS[now.getMonth()]} ${now.getFullYear()}`;
  const time = `${pad2(now.getUTCHours())}:${pad2(now.getUTCMinutes())}:${pad2(now.getUTCSeconds())}`;
  const datetime = `${MONTHS[now.getUTCMonth()]} ${pad2(now.getUTCDate())} ${now.getUTCFullYear()} ${time} GMT`;
  return { date_string, datetime };
}

/** What the template renders of a tool-calling round, found once by rendering probes. */
interface ToolSupport {
  /** An assistant turn's tool_calls show in the prompt. */
  calls: boolean;
  /** A `tool` message's content shows in the prompt (the template takes the role). */
  responses: boolean;
}

const PROBE_ARGUMENT = 'probe-argument-value';
const PROBE_RESULT = 'probe-tool-result';

export class ChatTemplate {
  private readonly template: Template;
  /**
   * The template tells a tool-calling turn by its null content (DeepSeek's `content is none`);
   * other fields' tests (Qwen3's `reasoning_content is not none`) do not count.
   */
  private readonly testsNullContent: boolean;
  private readonly toolSupport: ToolSupport;
  /** The template's output depends on enable_thinking (llama-server's test for a thinking switch). */
  readonly readsEnableThinking: boolean;

  /** Parses once; `source` undefined selects FALLBACK_CHAT_TEMPLATE. */
  constructor(
    source: string | undefined,
    private readonly specialTokens: { bosToken?: string; eosToken?: string },
  ) {
    this.template = new Template(source ?? FALLBACK_CHAT_TEMPLATE);
    this.testsNullContent = /(?<!\w)content['"]?\]?\s+is\s+(not\s+)?none/.test(source ?? '');
    this.toolSupport = this.probeToolSupport();
    const probe = [{ role: 'user', content: 'test' }];
    const now = new Date();
    const thinking = (on: boolean) => this.tryRender(probe, { kwargs: { enable_thinking: on }, now });
    this.readsEnableThinking = thinking(true) !== thinking(false);
  }

  /** The prompt text for the next assistant turn. Throws ChatTemplateError on template failure. */
  render(messages: readonly ChatMessage[], options: RenderChatOptions = {}): string {
    try {
      return this.renderMessages(this.polyfill(messages), options);
    } catch (err) {
      // Templates validate conversations with raise_exception (e.g. "roles must alternate").
      throw new ChatTemplateError(`chat template failed: ${(err as Error).message}`);
    }
  }

  private renderMessages(messages: readonly ChatMessage[], options: RenderChatOptions): string {
    const tools = options.tools && options.tools.length > 0 ? options.tools : undefined;
    const context: Record<string, unknown> = {
      // FireFunction v2's template lists the tools from `functions`, as llama-server gives it.
      functions: tools ? JSON.stringify(tools, null, 2) : '',
      ...templateDates(options.now ?? new Date()),
      ...options.kwargs,
      messages: messages.map((m) => this.withContent(m)),
      add_generation_prompt: options.addGenerationPrompt ?? true,
      // "" where the model has none, as llama-server gives them: templates concatenate them.
      bos_token: this.specialTokens.bosToken ?? '',
      eos_token: this.specialTokens.eosToken ?? '',
    };
    if (tools) context.tools = tools;
    return this.template.render(context);
  }

  /**
   * Most templates concatenate `message.content` as a string, so text parts are joined the
   * way llama-server and vLLM join them (newline-separated), and missing content becomes "".
   * A tool-calling turn without text is null content for templates that test for it
   * (they render the calls only then), whatever form the client sent it in.
   */
  private withContent(message: ChatMessage): ChatMessage {
    const { content } = message;
    const text = typeof content === 'string' ? content : (content ?? []).filter((p): p is TextContentPart => p.type === 'text').map((p) => p.text).join('\n');
    if (this.testsNullContent && text === '' && (content == null || hasToolCalls(message))) return { ...message, content: null };
    return typeof content === 'string' ? message : { ...message, content: text };
  }

  /**
   * llama-server's polyfills for templates without a place for tools: an assistant turn's
   * calls become its content, `{"tool_calls": [{name, arguments, id}], "content"}` as JSON
   * text, and a tool result a user turn `{"tool_response": {tool, content, tool_call_id}}`,
   * so the model still sees the round.
   */
  private polyfill(messages: readonly ChatMessage[]): readonly ChatMessage[] {
    const { calls, responses } = this.toolSupport;
    if (calls && responses) return messages;
    return messages.map((message) => {
      if (!calls && hasToolCalls(message)) {
        const { tool_calls: toolCalls, ...rest } = message;
        const text = this.withContent(rest).content;
        const json = {
          tool_calls: (toolCalls as ToolCallLike[]).map((call) => ({
            name: call.function?.name,
            arguments: parsedArguments(call.function?.arguments),
            ...(call.id === undefined ? {} : { id: call.id }),
          })),
          ...(text ? { content: text } : {}),
        };
        return { ...rest, content: JSON.stringify(json, null, 2) };
      }
      if (!responses && message.role === 'tool') {
        const { name, tool_call_id: id, ...rest } = message;
        const response = { ...(name === undefined ? {} : { tool: name }), content: this.withContent(message).content ?? '', ...(id === undefined ? {} : { tool_call_id: id }) };
        return { ...rest, role: 'user', content: JSON.stringify({ tool_response: response }, null, 2) };
      }
      return message;
    });
  }

  /** Renders a tool round (arguments as text, then as an object) and looks for its parts. */
  private probeToolSupport(): ToolSupport {
    const support: ToolSupport = { calls: false, responses: false };
    for (const args of [JSON.stringify({ probe: PROBE_ARGUMENT }), { probe: PROBE_ARGUMENT }]) {
      const call = { role: 'assistant', content: null, tool_calls: [{ id: 'call_probe', type: 'function', function: { name: 'probe_tool', arguments: args } }] };
      const result = { role: 'tool', tool_call_id: 'call_probe', name: 'probe_tool', content: PROBE_RESULT };
      const out = this.tryRender([{ role: 'user', content: 'probe' }, call, result]) ?? this.tryRender([{ role: 'user', content: 'probe' }, call]);
      support.calls ||= out?.includes(PROBE_ARGUMENT) ?? false;
      support.responses ||= out?.includes(PROBE_RESULT) ?? false;
    }
    return support;
  }

  private tryRender(messages: ChatMessage[], options: RenderChatOptions = { addGenerationPrompt: false }): string | undefined {
    try {
      return this.renderMessages(messages, options);
    } catch {
      return undefined;
    }
  }
}

interface ToolCallLike {
  id?: string;
  function?: { name?: string; arguments?: unknown };
}

/** An assistant turn that called tools. */
export function hasToolCalls(message: ChatMessage): boolean {
  return Array.isArray(message.tool_calls) && message.tool_calls.length > 0;
}

/** Arguments sent as JSON text are shown as the object they hold. */
function parsedArguments(args: unknown): unknown {
  if (typeof args !== 'string') return args;
  try {
    return JSON.parse(args);
  } catch {
    return args;
  }
}
