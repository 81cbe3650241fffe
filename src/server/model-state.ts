// The server listens before the model has loaded, so routes ask this holder for the
// model on every request and answer 503 until it is there.
import { ChatTemplate } from '../chat/template.js';
import { detectChatFormat, type ChatFormat } from '../chat/tool-calls/registry.js';
import type { Engine } from '../engine/engine.js';
import { prepareConstrainedDecoding } from '../grammar/index.js';
import { ApiError } from './errors.js';
import { mediaPolicy, type MediaPolicy } from './media/policy.js';

/** The loaded engine plus what the routes derive from it once. */
export interface ServedModel {
  engine: Engine;
  chatTemplate: ChatTemplate;
  /** The named "tool_use" template some checkpoints carry: used for requests with tools. */
  toolUseTemplate?: ChatTemplate;
  /** Tool-call format and reasoning tags, read off the template tools are rendered with. */
  chatFormat: ChatFormat;
  /** Unix seconds when loading finished: the model's `created` in /v1/models. */
  created: number;
  /**
   * The most messages a conversation may have: more than the context can hold at half the
   * template's per-message overhead (its turn markers) are refused before rendering, which
   * costs time in the number of messages. Undefined when the overhead cannot be measured.
   */
  maxMessages: number | undefined;
  /** How image parts are fetched and bounded (the server's media flags). */
  media: MediaPolicy;
}

type State = { kind: 'loading' } | { kind: 'ready'; model: ServedModel } | { kind: 'failed'; error: Error };

export class ModelState {
  private state: State = { kind: 'loading' };

  /** `chatTemplate`: --chat-template, used instead of every template the checkpoint has. */
  constructor(engine: Engine | Promise<Engine>, chatTemplate?: string, media: MediaPolicy = mediaPolicy()) {
    if (!(engine instanceof Promise)) {
      this.state = { kind: 'ready', model: serve(engine, chatTemplate, media) };
      return;
    }
    engine.then((e) => serve(e, chatTemplate, media)).then(
      (model) => {
        this.state = { kind: 'ready', model };
      },
      (error: unknown) => {
        this.state = { kind: 'failed', error: error instanceof Error ? error : new Error(String(error)) };
      },
    );
  }

  /** The model, or undefined while it is still loading. Throws if loading failed. */
  get current(): ServedModel | undefined {
    if (this.state.kind === 'failed') throw new ApiError(500, 'server_error', `model failed to load: ${this.state.error.message}`);
    return this.state.kind === 'ready' ? this.state.model : undefined;
  }

  /** The model for a route that needs it; 503 while loading, as the REST reference specifies. */
  require(): ServedModel {
    const model = this.current;
    if (!model) throw new ApiError(503, 'server_busy', 'Loading model');
    return model;
  }
}

function serve(engine: Engine, override: string | undefined, media: MediaPolicy): ServedModel {
  const { tokenizer } = engine;
  const main = override ?? tokenizer.chatTemplates.get('default');
  const toolUse = override === undefined ? tokenizer.chatTemplates.get('tool_use') : undefined;
  const chatTemplate = new ChatTemplate(main, tokenizer);
  prepareConstrainedDecoding(engine);
  return {
    engine,
    chatTemplate,
    ...(toolUse ? { toolUseTemplate: new ChatTemplate(toolUse, tokenizer) } : {}),
    chatFormat: detectChatFormat(toolUse ?? main),
    created: Math.floor(Date.now() / 1000),
    maxMessages: maxMessages(engine, chatTemplate),
    media,
  };
}

/** ceil(2 * context / the tokens one more user-assistant exchange adds to the prompt) / 2 per message. */
function maxMessages(engine: Engine, template: ChatTemplate): number | undefined {
  const exchanges = (n: number) =>
    Array.from({ length: 2 * n }, (_, i) => ({ role: i % 2 === 0 ? 'user' : 'assistant', content: '' }) as const).concat([{ role: 'user', content: '' }]);
  try {
    const tokens = (n: number) => engine.tokenizer.encode(template.render(exchanges(n)), false).length;
    const perMessage = (tokens(4) - tokens(1)) / 6;
    if (!(perMessage >= 1)) return undefined;
    return Math.ceil((2 * engine.info.contextSize) / perMessage);
  } catch {
    return undefined;
  }
}
