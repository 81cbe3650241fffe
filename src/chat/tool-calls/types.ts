// The contract between the tool-call stream filter and the per-format parsers. A format
// says where its markup starts and ends in the model's text, parses one markup region into
// calls, and optionally streams a region's calls while it is still being written.

export interface ToolFunction {
  name: string;
  description?: string;
  /** A JSON Schema object ({"type": "object", "properties": ...}). */
  parameters?: Record<string, unknown>;
  strict?: boolean;
}

export interface ToolDefinition {
  type: 'function';
  function: ToolFunction;
}

export interface ParsedToolCall {
  name: string;
  /** The arguments as JSON text, an object. */
  arguments: string;
}

/** What a streamer learned about the calls of one region, calls numbered within it. */
export type CallEvent =
  | { kind: 'start'; call: number; name: string }
  /** A piece of the call's arguments; the pieces concatenate to its final arguments. */
  | { kind: 'args'; call: number; text: string };

export interface CallStreamer {
  /** The region's text so far, from its start marker on; returns what is new. */
  update(region: string): CallEvent[];
}

export type StartMatch =
  | { kind: 'none' }
  /** Markup begins at `index`. */
  | { kind: 'found'; index: number }
  /** The text from `index` on may be the beginning of markup: hold it back. */
  | { kind: 'partial'; index: number };

export interface ScanContext {
  /** Only whitespace (or nothing) was written since the output began or the last call. */
  atBoundary: boolean;
  /** The text being scanned starts a line. */
  atLineStart: boolean;
  /** Nothing but whitespace has been read from the output yet. */
  atOutputStart: boolean;
  /** The generation is over: nothing partial remains possible. */
  final: boolean;
  tools: readonly ToolDefinition[];
}

export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/** One entry of a streamed delta.tool_calls: a call's start, or a piece of its arguments. */
export interface ToolCallDelta {
  index: number;
  id?: string;
  type?: 'function';
  function: { name?: string; arguments: string };
}

/** A region that is no call, only a wrapper tag to drop from content (e.g. "<response>"). */
export const WRAPPER_ONLY: ParsedToolCall[] = [];

export interface ToolCallFormat {
  /** Short name, as logged and as tests select it. */
  readonly name: string;
  /** Special tokens whose text must be kept when decoding (they carry the markup). */
  readonly preservedTokens: readonly string[];
  /** Where the first markup region in `text` begins. */
  findStart(text: string, ctx: ScanContext): StartMatch;
  /**
   * `region` begins at a start marker: its end (exclusive), or undefined while more text
   * is needed. With `final` it must answer, at most `region.length`.
   */
  findEnd(region: string, final: boolean, tools: readonly ToolDefinition[]): number | undefined;
  /** The calls of a complete region; undefined when it is malformed (it becomes content). */
  parseRegion(region: string, tools: readonly ToolDefinition[]): ParsedToolCall[] | undefined;
  /** Formats that stream names and arguments as they are generated. */
  createStreamer?(tools: readonly ToolDefinition[]): CallStreamer;
  /** Characters besides whitespace that may sit between two calls (Llama's ";"). */
  readonly separators?: string;
  /** The JSON wire shape, for formats whose forced tool_choice a grammar can enforce. */
  readonly jsonWire?: JsonWire;
  /** Tool-call ids in the shape the model family's template expects. */
  newId?(): string;
}

/** "<prefix>{"name": NAME, "<argumentsKey>": ARGS}<suffix>": the JSON-wrapper formats. */
export interface JsonWire {
  prefix: string;
  suffix: string;
  argumentsKey: 'arguments' | 'parameters';
}
