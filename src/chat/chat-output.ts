// A chat reply as it streams: reasoning, content and tool calls, from the model's text.
// Each pushed piece (one token's text) gives one delta, possibly empty, so a caller can keep
// one chunk per token. At the end the whole text is parsed once more; that parse is
// authoritative, and the stream is reconciled with it (what was not sent yet is sent, and
// a disagreement is reported through `warn`). A generation stopped by its token limit
// inside a call ends with `cutOff`: the call's markup is neither content nor reasoning,
// and the call stays, with the arguments read so far (./tool-calls/stream-filter.ts).
import { promptOpensReasoning, ReasoningSplitter } from './reasoning.js';
import { HarmonyOutput } from './tool-calls/harmony.js';
import type { ChatFormat, ThinkTags } from './tool-calls/registry.js';
import { ToolCallFilter } from './tool-calls/stream-filter.js';
import type { ToolCall, ToolCallDelta, ToolCallFormat, ToolDefinition } from './tool-calls/types.js';

export interface ChatOutputConfig {
  /** The reasoning block, and whether the prompt already opened it. */
  reasoning?: { tags: ThinkTags; startsInside: boolean };
  harmony?: boolean;
  /**
   * Present when the reply's tool calls are parsed (the request declared tools); `forced`:
   * the reply must be calls (tool_choice "required" or a named function).
   */
  tools?: { format?: ToolCallFormat; declared: readonly ToolDefinition[]; maxCalls?: number; forced?: boolean };
  warn?: (message: string) => void;
}

export interface OutputDelta {
  reasoning: string;
  content: string;
  toolCalls: ToolCallDelta[];
}

export interface ChatReply {
  content: string;
  reasoning: string;
  toolCalls: ToolCall[];
  /** The output ended inside a tool call, cut off by the token limit. */
  cutOff: boolean;
}

/** The output configuration for a rendered prompt. */
export function chatOutputConfig(
  format: ChatFormat,
  prompt: string,
  tools: readonly ToolDefinition[] | undefined,
  options: { maxCalls?: number; forced?: boolean; warn?: (message: string) => void } = {},
): ChatOutputConfig {
  const { maxCalls, forced, warn } = options;
  return {
    ...(format.reasoning ? { reasoning: { tags: format.reasoning, startsInside: promptOpensReasoning(prompt, format.reasoning) } } : {}),
    harmony: format.harmony,
    ...(tools && tools.length > 0 ? { tools: { format: format.toolFormat, declared: tools, maxCalls, forced } } : {}),
    warn,
  };
}

/** One pass over a reply; `streaming` lets formats stream calls as they are written. */
class Pipeline {
  private readonly splitter?: ReasoningSplitter;
  private readonly filter?: ToolCallFilter;
  private readonly harmony?: HarmonyOutput;
  reasoning = '';

  constructor(config: ChatOutputConfig, streaming: boolean) {
    if (config.harmony) {
      this.harmony = new HarmonyOutput(config.tools?.declared, config.tools?.maxCalls);
      return;
    }
    if (config.reasoning) this.splitter = new ReasoningSplitter(config.reasoning.tags, config.reasoning.startsInside);
    if (config.tools?.format) {
      this.filter = new ToolCallFilter(config.tools.format, config.tools.declared, {
        maxCalls: config.tools.maxCalls,
        warn: config.warn,
        incremental: streaming,
        forced: config.tools.forced,
      });
    }
  }

  /** `atLimit` (with `final`): the generation stopped at its token limit. */
  push(text: string, final: boolean, atLimit = false): OutputDelta {
    if (this.harmony) {
      const d = final ? this.harmony.finish(atLimit) : this.harmony.push(text);
      return { reasoning: d.reasoning, content: d.content, toolCalls: d.toolCalls };
    }
    const split = this.splitter ? (final ? this.splitter.finish(atLimit) : this.splitter.push(text)) : { reasoning: '', content: text };
    this.reasoning += split.reasoning;
    if (!this.filter) return { reasoning: split.reasoning, content: split.content, toolCalls: [] };
    const filtered = this.filter.push(split.content);
    if (final) {
      const rest = this.filter.finish(atLimit);
      filtered.content += rest.content;
      filtered.calls.push(...rest.calls);
    }
    return { reasoning: split.reasoning, content: filtered.content, toolCalls: filtered.calls };
  }

  reply(rawContent: string): ChatReply {
    const h = this.harmony;
    if (h) return { content: h.content, reasoning: h.reasoning, toolCalls: h.toolCalls, cutOff: h.cutOff };
    return {
      reasoning: this.reasoning,
      content: this.filter ? this.filter.content : rawContent,
      toolCalls: this.filter?.calls ?? [],
      cutOff: this.filter?.cutOff ?? false,
    };
  }
}

/**
 * The whole reply at once: the non-streaming answer, and the authoritative parse.
 * `atLimit`: the generation stopped at its token limit.
 */
export function parseChatOutput(text: string, config: ChatOutputConfig, atLimit = false): ChatReply {
  const pipeline = new Pipeline(config, false);
  const a = pipeline.push(text, false);
  const b = pipeline.push('', true, atLimit);
  return pipeline.reply(a.content + b.content);
}

export class ChatOutput {
  private readonly pipeline: Pipeline;
  private text = '';
  private readonly sent: Omit<ChatReply, 'cutOff'> = { content: '', reasoning: '', toolCalls: [] };
  private readonly sentArgs: string[] = [];

  constructor(private readonly config: ChatOutputConfig) {
    this.pipeline = new Pipeline(config, true);
  }

  push(text: string): OutputDelta {
    this.text += text;
    return this.record(this.pipeline.push(text, false));
  }

  /**
   * Ends the stream: the last delta, and the reply as the final parse has it. `atLimit`:
   * the generation stopped at its token limit.
   */
  finish(atLimit = false): { delta: OutputDelta; reply: ChatReply } {
    const delta = this.record(this.pipeline.push('', true, atLimit));
    const reply = parseChatOutput(this.text, this.config, atLimit);
    const warn = this.config.warn ?? (() => {});
    for (const key of ['reasoning', 'content'] as const) {
      if (reply[key].startsWith(this.sent[key])) delta[key] += reply[key].slice(this.sent[key].length);
      else warn(`streamed ${key} disagrees with the final parse`);
    }
    const calls = reply.toolCalls.map((call, index): ToolCall => {
      const streamed = this.sent.toolCalls[index];
      if (!streamed) {
        delta.toolCalls.push({ index, id: call.id, type: 'function', function: { name: call.function.name, arguments: '' } });
        delta.toolCalls.push({ index, function: { arguments: call.function.arguments } });
        return call;
      }
      const sentArgs = this.sentArgs[index] ?? '';
      if (streamed.function.name !== call.function.name) warn(`streamed tool call ${index} is ${streamed.function.name}, the final parse says ${call.function.name}`);
      if (call.function.arguments.startsWith(sentArgs)) {
        const rest = call.function.arguments.slice(sentArgs.length);
        if (rest) delta.toolCalls.push({ index, function: { arguments: rest } });
      } else {
        warn(`streamed arguments of tool call ${index} disagree with the final parse`);
      }
      // A streamed call keeps the id the client already has.
      return { ...call, id: streamed.id };
    });
    if (this.sent.toolCalls.length > calls.length) warn(`${this.sent.toolCalls.length - calls.length} streamed tool call(s) are not in the final parse`);
    return { delta, reply: { ...reply, toolCalls: calls } };
  }

  private record(delta: OutputDelta): OutputDelta {
    this.sent.reasoning += delta.reasoning;
    this.sent.content += delta.content;
    for (const d of delta.toolCalls) {
      if (d.id !== undefined) this.sent.toolCalls[d.index] = { id: d.id, type: 'function', function: { name: d.function.name ?? '', arguments: '' } };
      this.sentArgs[d.index] = (this.sentArgs[d.index] ?? '') + d.function.arguments;
    }
    return delta;
  }
}
