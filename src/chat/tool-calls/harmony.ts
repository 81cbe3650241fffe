// OpenAI Harmony (GPT-OSS). The whole reply is a sequence of messages, each a header and
// a body; the generation prompt ends with "<|start|>assistant", so the first header has
// no <|start|>:
//   <|channel|>analysis<|message|>…reasoning…<|end|>
//   <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>
//   <|start|>assistant<|channel|>final<|message|>…answer…<|return|>
// (the recipient may also sit before the channel: "<|start|>assistant to=functions.f<|channel|>commentary json").
// analysis is reasoning, final and commentary without a recipient are content, and a
// message to a recipient is a tool call (sent whole, at its end). <|call|> and <|return|>
// end generation, so the last body usually just stops. A call cut off by the token limit
// is sent with the arguments written so far; a header cut off is markup, no content (a
// call's when it names a recipient, as ./stream-filter.ts names a call cut off early).
import { objectArguments, partialSuffix } from './markers.js';
import { cutCallName, newCallId } from './stream-filter.js';
import type { ToolCall, ToolCallDelta, ToolDefinition } from './types.js';

const START = '<|start|>';
const MESSAGE = '<|message|>';
const CHANNEL = '<|channel|>';
const CONSTRAIN = '<|constrain|>';
const TERMINATORS = ['<|end|>', '<|call|>', '<|return|>'];

export const HARMONY_TOKENS = [START, MESSAGE, CHANNEL, CONSTRAIN, ...TERMINATORS];

export interface HarmonyDelta {
  reasoning: string;
  content: string;
  toolCalls: ToolCallDelta[];
}

type Kind = { kind: 'reasoning' } | { kind: 'content' } | { kind: 'call'; name: string };

/** What a header says its body is. */
function readHeader(header: string): Kind {
  const text = header.replace(START, '').replace(CONSTRAIN, ' ');
  const recipient = /\bto=([^\s<]+)/.exec(text)?.[1];
  const channel = new RegExp(`${escape(CHANNEL)}\\s*([\\w-]+)`).exec(text)?.[1];
  if (recipient && recipient !== 'user' && recipient !== 'all') return { kind: 'call', name: recipient.replace(/^functions\./, '') };
  return channel === 'analysis' ? { kind: 'reasoning' } : { kind: 'content' };
}

function escape(s: string): string {
  return s.replace(/[|[\]\\^$.*+?(){}]/g, '\\$&');
}

export class HarmonyOutput {
  private buffer = '';
  private body: Kind | undefined;
  private callText = '';
  private readonly calls: ToolCall[] = [];
  content = '';
  reasoning = '';
  /** The output ended inside a call, cut off by the token limit. */
  cutOff = false;

  /** Calls are reported only when the request declared tools. */
  private readonly toolsDeclared: boolean;

  constructor(
    private readonly tools: readonly ToolDefinition[] = [],
    private readonly maxCalls = Infinity,
  ) {
    this.toolsDeclared = tools.length > 0;
  }

  get toolCalls(): ToolCall[] {
    return this.calls;
  }

  push(text: string): HarmonyDelta {
    this.buffer += text;
    return this.drain(false);
  }

  /** `atLimit`: the generation stopped at its token limit. */
  finish(atLimit = false): HarmonyDelta {
    const out = this.drain(true);
    if (this.body) this.endMessage(out, atLimit);
    else if (atLimit && this.buffer.trim() !== '') {
      const header = readHeader(this.buffer);
      if (header.kind === 'call' && this.toolsDeclared) {
        this.addCall(out, cutCallName(this.tools, header.name), '');
        this.cutOff = true;
      }
    } else if (this.buffer.trim() !== '') {
      // A header that never reached <|message|>: what the model wrote is all there is.
      out.content += this.buffer;
      this.content += this.buffer;
    }
    this.buffer = '';
    return out;
  }

  private drain(final: boolean): HarmonyDelta {
    const out: HarmonyDelta = { reasoning: '', content: '', toolCalls: [] };
    for (;;) {
      if (!this.body) {
        const at = this.buffer.indexOf(MESSAGE);
        if (at < 0) return out;
        this.body = readHeader(this.buffer.slice(0, at));
        this.buffer = this.buffer.slice(at + MESSAGE.length);
        continue;
      }
      let end = -1;
      let terminator = '';
      for (const t of [...TERMINATORS, START]) {
        const i = this.buffer.indexOf(t);
        if (i >= 0 && (end < 0 || i < end)) [end, terminator] = [i, t];
      }
      if (end < 0) {
        const keep = final ? 0 : partialSuffix(this.buffer, [...TERMINATORS, START]);
        this.bodyText(this.buffer.slice(0, this.buffer.length - keep), out);
        this.buffer = this.buffer.slice(this.buffer.length - keep);
        return out;
      }
      this.bodyText(this.buffer.slice(0, end), out);
      // <|start|> opens the next header; the others are consumed.
      this.buffer = this.buffer.slice(terminator === START ? end : end + terminator.length);
      this.endMessage(out);
    }
  }

  private bodyText(text: string, out: HarmonyDelta): void {
    if (!text || !this.body) return;
    if (this.body.kind === 'call' && this.toolsDeclared) this.callText += text;
    else if (this.body.kind === 'reasoning') {
      out.reasoning += text;
      this.reasoning += text;
    } else {
      out.content += text;
      this.content += text;
    }
  }

  private endMessage(out: HarmonyDelta, atLimit = false): void {
    const body = this.body;
    this.body = undefined;
    if (body?.kind !== 'call' || !this.toolsDeclared) return;
    const text = this.callText;
    this.callText = '';
    const args = objectArguments(text);
    if (!args && atLimit) {
      this.addCall(out, body.name, text.trim());
      this.cutOff = true;
      return;
    }
    if (!args) {
      // Not a valid call: the client sees what the model wrote.
      out.content += text;
      this.content += text;
      return;
    }
    this.addCall(out, body.name, args);
  }

  private addCall(out: HarmonyDelta, name: string, args: string): void {
    if (this.calls.length >= this.maxCalls) return;
    const index = this.calls.length;
    const call: ToolCall = { id: newCallId(), type: 'function', function: { name, arguments: args } };
    this.calls.push(call);
    out.toolCalls.push({ index, id: call.id, type: 'function', function: { name, arguments: '' } });
    if (args) out.toolCalls.push({ index, function: { arguments: args } });
  }
}
