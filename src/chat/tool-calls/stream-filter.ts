// The tool-call stream filter: splits the model's text into content and tool calls as it
// arrives. Markup never reaches content; a piece that might begin a marker is held back
// until the next piece decides it, and is released as content when it was not one. A
// region that turns out malformed is given back as content. Whitespace next to calls is
// layout, not content: it is held, and dropped when a call follows or ends the output.
//
// A generation stopped by its token limit inside markup is a call cut off: the markup is
// dropped, not given back as content, and the calls it already named stay, with the
// arguments read so far. A region cut before it named its call still shows a started call:
// named when only one tool is declared, else with the name "", arguments "". A marker cut
// before it was complete is dropped too; it is a started call when the reply had to be one
// (a forced tool_choice) and nothing but layout came before it.
//
// The same class is the end-of-generation parser: fed the whole text at once with
// `final`, it is what the streamed result is reconciled against.
import { randomInt } from 'node:crypto';
import type { CallEvent, CallStreamer, ParsedToolCall, ScanContext, ToolCall, ToolCallDelta, ToolCallFormat, ToolDefinition } from './types.js';

export interface FilterOutput {
  content: string;
  calls: ToolCallDelta[];
}

interface StreamedCall {
  id: string;
  name: string;
  /** The argument text sent so far. */
  sent: string;
}

const BASE62 = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';

/** OpenAI-style call id. */
export function newCallId(): string {
  let id = 'call_';
  for (let i = 0; i < 24; i++) id += BASE62[randomInt(BASE62.length)];
  return id;
}

/**
 * The name of a call cut off before its name was read: the one declared tool whose name
 * starts with what was `written` of it, else "" (unknown).
 */
export function cutCallName(tools: readonly ToolDefinition[], written = ''): string {
  const candidates = tools.filter((t) => t.function.name.startsWith(written));
  return candidates.length === 1 ? candidates[0]!.function.name : '';
}

export interface ToolCallFilterOptions {
  /** Calls beyond this many are dropped (parallel_tool_calls: false allows one). */
  maxCalls?: number;
  /** Disagreements between a streamed call and its region's parse. */
  warn?: (message: string) => void;
  /** Stream calls as they are written (formats that can); off for the one-shot parse. */
  incremental?: boolean;
  /** The reply must be calls (a forced tool_choice). */
  forced?: boolean;
}

export class ToolCallFilter {
  private buffer = '';
  private inMarkup = false;
  private streamer: CallStreamer | undefined;
  /** Index of the current region's first call. */
  private regionBase = 0;
  private atBoundary = true;
  private atOutputStart = true;
  private atLineStart = true;
  private readonly streamed: StreamedCall[] = [];
  /** Layout dropped before the current region: content again if the region is malformed. */
  private droppedLayout = '';
  /** Content emitted so far. */
  content = '';
  /** The output ended inside a call, cut off by the token limit. */
  cutOff = false;
  private readonly maxCalls: number;
  private readonly newId: () => string;

  constructor(
    private readonly format: ToolCallFormat,
    private readonly tools: readonly ToolDefinition[],
    private readonly options: ToolCallFilterOptions = {},
  ) {
    this.maxCalls = options.maxCalls ?? Infinity;
    this.newId = format.newId ?? newCallId;
  }

  /** The calls so far, arguments as sent. */
  get calls(): ToolCall[] {
    return this.streamed.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.sent } }));
  }

  push(text: string): FilterOutput {
    this.buffer += text;
    return this.drain(false);
  }

  /**
   * End of generation: whatever is pending is decided now. `atLimit`: the generation
   * stopped at its token limit, so unfinished markup at the end is a cut-off call.
   */
  finish(atLimit = false): FilterOutput {
    const out = this.drain(true, atLimit);
    // Trailing layout after calls is dropped; plain answers keep theirs.
    if (this.buffer !== '') {
      if (this.streamed.length === 0) out.content += this.emit(this.buffer);
      this.buffer = '';
    }
    return out;
  }

  private isLayout(c: string): boolean {
    return /\s/.test(c) || (this.atBoundary && this.streamed.length > 0 && (this.format.separators ?? '').includes(c));
  }

  /** `text` with its trailing layout cut off; the cut stays pending. */
  private layoutStart(text: string): number {
    let i = text.length;
    while (i > 0 && this.isLayout(text[i - 1]!)) i--;
    return i;
  }

  private emit(text: string): string {
    if (text === '') return '';
    this.content += text;
    if (/\S/.test(text)) this.atBoundary = false;
    this.atOutputStart = false;
    this.atLineStart = text.endsWith('\n');
    return text;
  }

  private context(final: boolean): ScanContext {
    return { atBoundary: this.atBoundary, atLineStart: this.atLineStart, atOutputStart: this.atOutputStart, final, tools: this.tools };
  }

  private drain(final: boolean, atLimit = false): FilterOutput {
    const out: FilterOutput = { content: '', calls: [] };
    while (this.buffer !== '') {
      if (!this.inMarkup) {
        // Between calls, separators (Llama's ";") are layout the next call may follow.
        let lead = 0;
        if (this.atBoundary && this.streamed.length > 0) while (lead < this.buffer.length && this.isLayout(this.buffer[lead]!)) lead++;
        // At the token limit a marker cut short is still reported as partial.
        const found = this.format.findStart(this.buffer.slice(lead), this.context(final && !atLimit));
        const match = found.kind === 'none' ? found : { ...found, index: found.index + lead };
        if (match.kind === 'none') {
          // Trailing layout stays pending: content after it releases it, a call drops it.
          const cut = this.layoutStart(this.buffer);
          out.content += this.emit(this.buffer.slice(0, cut));
          this.buffer = this.buffer.slice(cut);
          break;
        }
        // Text before markup is content, minus the layout right before the markup.
        const before = this.buffer.slice(0, match.index);
        const keep = this.layoutStart(before);
        out.content += this.emit(before.slice(0, keep));
        if (match.kind === 'partial') {
          this.buffer = this.buffer.slice(keep);
          if (atLimit) this.cutMarker(out);
          break;
        }
        this.droppedLayout = before.slice(keep);
        this.buffer = this.buffer.slice(match.index);
        this.inMarkup = true;
        this.atOutputStart = false;
        if (this.options.incremental !== false) this.streamer = this.format.createStreamer?.(this.tools);
        continue;
      }
      const found = this.format.findEnd(this.buffer, final, this.tools);
      // A region always consumes something, or the loop would not advance.
      const end = found === undefined ? undefined : Math.max(1, found);
      if (this.streamer) this.streamEvents(this.streamer.update(end === undefined ? this.buffer : this.buffer.slice(0, end)), out);
      if (end === undefined) break;
      const region = this.buffer.slice(0, end);
      this.buffer = this.buffer.slice(end);
      this.inMarkup = false;
      this.closeRegion(region, out, atLimit && this.buffer === '');
    }
    return out;
  }

  private streamEvents(events: CallEvent[], out: FilterOutput): void {
    for (const event of events) {
      const index = this.regionBase + event.call;
      if (index >= this.maxCalls) continue;
      if (event.kind === 'start') {
        if (this.streamed[index]) continue;
        const call = { id: this.newId(), name: event.name, sent: '' };
        this.streamed[index] = call;
        out.calls.push({ index, id: call.id, type: 'function', function: { name: call.name, arguments: '' } });
      } else {
        const call = this.streamed[index];
        if (!call || event.text === '') continue;
        call.sent += event.text;
        out.calls.push({ index, function: { arguments: event.text } });
      }
    }
  }

  /** `cutOff`: the region runs to the end of an output stopped by the token limit. */
  private closeRegion(region: string, out: FilterOutput, cutOff: boolean): void {
    const parsed = this.format.parseRegion(region, this.tools);
    const streamedHere = this.streamed.length - this.regionBase;
    this.streamer = undefined;
    if (parsed === undefined && cutOff) {
      // The one-shot parse reads the calls the stream would have named.
      if (this.options.incremental === false && this.format.createStreamer) this.streamEvents(this.format.createStreamer(this.tools).update(region), out);
      if (this.streamed.length === this.regionBase) this.startCutCall(out);
      this.cutOff = true;
      return;
    }
    if (parsed === undefined) {
      if (streamedHere > 0) this.options.warn?.(`tool call markup streamed as a call did not parse; returned as content: ${JSON.stringify(region.slice(0, 200))}`);
      // Malformed markup is content: the client sees what the model wrote.
      out.content += this.emit(this.droppedLayout + region);
      this.streamed.length = this.regionBase;
      return;
    }
    this.reconcile(parsed, out);
    this.regionBase += parsed.length;
    this.atBoundary = true;
    this.atLineStart = true;
  }

  /** The output ends in a marker cut short by the token limit (the pending text from it on). */
  private cutMarker(out: FilterOutput): void {
    if (this.options.forced && this.atBoundary && this.buffer.trim() !== '') {
      this.startCutCall(out);
      this.cutOff = true;
    }
    this.buffer = '';
  }

  /** A call whose name was not read before the token limit. */
  private startCutCall(out: FilterOutput): void {
    const index = this.streamed.length;
    if (index >= this.maxCalls) return;
    const call = { id: this.newId(), name: cutCallName(this.tools), sent: '' };
    this.streamed[index] = call;
    out.calls.push({ index, id: call.id, type: 'function', function: { name: call.name, arguments: '' } });
  }

  /** The region's parse is authoritative: finish streamed calls, send unstreamed ones. */
  private reconcile(parsed: readonly ParsedToolCall[], out: FilterOutput): void {
    parsed.forEach((call, n) => {
      const index = this.regionBase + n;
      if (index >= this.maxCalls) return;
      const streamed = this.streamed[index];
      if (!streamed) {
        const id = this.newId();
        this.streamed[index] = { id, name: call.name, sent: call.arguments };
        out.calls.push({ index, id, type: 'function', function: { name: call.name, arguments: '' } });
        out.calls.push({ index, function: { arguments: call.arguments } });
        return;
      }
      if (streamed.name !== call.name) this.options.warn?.(`streamed tool call ${index} named ${streamed.name}, parsed as ${call.name}`);
      if (call.arguments.startsWith(streamed.sent)) {
        const rest = call.arguments.slice(streamed.sent.length);
        if (rest) out.calls.push({ index, function: { arguments: rest } });
        streamed.sent = call.arguments;
      } else {
        this.options.warn?.(`streamed arguments of tool call ${index} (${streamed.sent}) disagree with the parse (${call.arguments})`);
      }
    });
    const extra = Math.min(this.streamed.length, this.maxCalls) - (this.regionBase + parsed.length);
    if (extra > 0) this.options.warn?.(`${extra} streamed tool call(s) absent from the parse`);
  }
}
