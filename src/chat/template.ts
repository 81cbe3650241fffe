// Turns an OpenAI-style conversation into the prompt text the checkpoint was trained on,
// by running its own Jinja chat template the way transformers' apply_chat_template does.
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

export class ChatTemplate {
  private readonly template: Template;
  /**
   * The template tells a tool-calling turn by its null content (DeepSeek's `content is none`);
   * other fields' tests (Qwen3's `reasoning_content is not none`) do not count.
   */
  private readonly testsNullContent: boolean;

  /** Parses once; `source` undefined selects FALLBACK_CHAT_TEMPLATE. */
  constructor(
    source: string | undefined,
    private readonly specialTokens: { bosToken?: string; eosToken?: string },
  ) {
    this.template = new Template(source ?? FALLBACK_CHAT_TEMPLATE);
    this.testsNullContent = /(?<!\w)content['"]?\]?\s+is\s+(not\s+)?none/.test(source ?? '');
  }

  /** The prompt text for the next assistant turn. Throws ChatTemplateError on template failure. */
  render(messages: readonly ChatMessage[], options: RenderChatOptions = {}): string {
    const context: Record<string, unknown> = {
      ...options.kwargs,
      messages: messages.map((m) => (m.content == null && this.testsNullContent ? { ...m, content: null } : flattenContent(m))),
      add_generation_prompt: true,
      bos_token: this.specialTokens.bosToken,
      eos_token: this.specialTokens.eosToken,
    };
    if (options.tools && options.tools.length > 0) context.tools = options.tools;
    try {
      return this.template.render(context);
    } catch (err) {
      // Templates validate conversations with raise_exception (e.g. "roles must alternate").
      throw new ChatTemplateError(`chat template failed: ${(err as Error).message}`);
    }
  }
}

/**
 * Most templates concatenate `message.content` as a string, so text parts are joined the
 * way llama-server and vLLM join them (newline-separated); null content (an assistant
 * turn that only called tools) becomes "" for the same reason.
 */
function flattenContent(message: ChatMessage): ChatMessage {
  const { content } = message;
  if (typeof content === 'string') return message;
  const text = (content ?? [])
    .filter((part): part is TextContentPart => part.type === 'text')
    .map((part) => part.text)
    .join('\n');
  return { ...message, content: text };
}
