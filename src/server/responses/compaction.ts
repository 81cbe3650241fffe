// Conversation compaction for the Responses API (POST /v1/responses/compact and
// context_management): older turns are summarized by one generation and replaced by a
// compaction item, the newest turns are kept verbatim.
//
//  * Retained part: the latest user message and everything after it, plus the newest
//    whole turns before it while the retained part stays within keep_tokens.
//  * Splits fall only before a user message or right after a completed tool group, and
//    never while a function call is waiting for its output, so a call and its output
//    always stay on the same side.
//  * The compaction item's encrypted_content is a base64url capsule (plain JSON, not
//    encrypted: a local server has no secret worth keeping from its own client) holding
//    the summary and the retained items. Replaying it (see resolveItems) gives: the
//    system/developer messages before it, the summary as a user message, the retained
//    items, then whatever follows it. Everything else before the latest compaction item
//    is what the capsule replaced, so a client may send back either the compacted output
//    or its full history followed by that output.
//  * Failures leave nothing changed and answer 400 context_length_exceeded: a history
//    longer than the context, a summary prompt that cannot fit, a summary generation
//    that wrote no text (nothing would stand for the turns it replaces), a result not
//    shorter than the input.
import { randomBytes } from 'node:crypto';
import { ApiError, badRequest } from '../errors.js';
import { isInstruction, isObject, isUserMessage, normalizeInput, SUMMARY_MARK, type Item } from './items.js';

const CAPSULE_FORMAT = 'mlxcel.compaction';
const CAPSULE_VERSION = 1;

/** Defaults and bounds from the REST reference. */
export const DEFAULT_SUMMARY_TOKENS = 1024;
export const MAX_SUMMARY_TOKENS = 16384;
const MAX_DEFAULT_KEEP_TOKENS = 8192;

/** keep_tokens when a request sets none: 1/16 of the context window, at most 8192. */
export function defaultKeepTokens(contextSize: number): number {
  return Math.max(1, Math.min(MAX_DEFAULT_KEEP_TOKENS, Math.floor(contextSize / 16)));
}

/**
 * The summary bound of an automatic (context_management) compaction: the /compact
 * default, but never more than an eighth of the context, so that on small contexts the
 * summary prompt still has room beside it.
 */
export function automaticSummaryTokens(contextSize: number): number {
  return Math.max(1, Math.min(DEFAULT_SUMMARY_TOKENS, Math.floor(contextSize / 8)));
}

const SUMMARY_INSTRUCTION =
  'Summarize the conversation above so that it can be continued from your summary alone. ' +
  "Keep the user's goals and requirements, the decisions made, what tools returned, open questions, " +
  'and exact names, numbers and identifiers. Write only the summary.';

const SUMMARY_HEADING = 'Summary of the earlier conversation:';

export interface Capsule {
  summary: string;
  /** The retained items, replayed after the summary. */
  items: Item[];
}

export function encodeCapsule(capsule: Capsule): string {
  const json = JSON.stringify({ format: CAPSULE_FORMAT, version: CAPSULE_VERSION, summary: capsule.summary, items: capsule.items });
  return Buffer.from(json, 'utf8').toString('base64url');
}

export function decodeCapsule(text: string, path: string): Capsule {
  const invalid = () => badRequest(`${path}.encrypted_content is not a compaction capsule issued by this server`);
  if (!/^[A-Za-z0-9_-]*$/.test(text)) throw invalid();
  let value: unknown;
  try {
    value = JSON.parse(Buffer.from(text, 'base64url').toString('utf8'));
  } catch {
    throw invalid();
  }
  if (!isObject(value) || value.format !== CAPSULE_FORMAT || typeof value.summary !== 'string' || !Array.isArray(value.items)) {
    throw invalid();
  }
  if (value.version !== CAPSULE_VERSION) throw badRequest(`${path}: compaction capsule version ${String(value.version)} is not supported`);
  const items = normalizeInput(value.items, `${path} (capsule)`);
  if (items.some((item) => item.type === 'compaction')) throw invalid();
  return { summary: value.summary, items };
}

export function newCompactionItem(capsule: Capsule): Item {
  return { id: `cmp_${randomBytes(12).toString('hex')}`, type: 'compaction', encrypted_content: encodeCapsule(capsule) };
}

/** The summary as the message it replays as. */
function summaryMessage(summary: string): Item {
  return { type: 'message', role: 'user', content: `${SUMMARY_HEADING}\n${summary}`, [SUMMARY_MARK]: true };
}

/** Expands the latest compaction item (see the header); items without one pass through. */
export function resolveItems(items: Item[], path = 'input'): Item[] {
  let index = -1;
  for (let i = items.length - 1; i >= 0 && index < 0; i--) if (items[i]!.type === 'compaction') index = i;
  if (index < 0) return items;
  const capsule = decodeCapsule(items[index]!.encrypted_content as string, `${path}[${index}]`);
  return [...items.slice(0, index).filter(isInstruction), summaryMessage(capsule.summary), ...capsule.items, ...items.slice(index + 1)];
}

/**
 * Indices where a conversation (no system/developer messages) may be split: before a
 * user message, or right after the output that completes a tool group, and only when
 * no function call is still waiting for its output. Ascending; 0 is not a split.
 */
export function splitPoints(conversation: Item[]): number[] {
  const points: number[] = [];
  const pending = new Set<string>();
  for (let i = 0; i < conversation.length; i++) {
    const item = conversation[i]!;
    if (i > 0 && pending.size === 0) {
      const previous = conversation[i - 1]!;
      const afterToolGroup = previous.type === 'function_call_output' && item.type !== 'function_call_output';
      if (isUserMessage(item) || afterToolGroup) points.push(i);
    }
    if (item.type === 'function_call') pending.add(item.call_id as string);
    if (item.type === 'function_call_output') pending.delete(item.call_id as string);
  }
  return points;
}

/**
 * Where the retained part starts. `count` gives the tokens of a run of items, or throws
 * when the template refuses to render it (that split is then skipped).
 */
export async function chooseCut(conversation: Item[], keepTokens: number, count: (items: Item[]) => Promise<number>): Promise<number> {
  let lastUser = -1;
  for (let i = conversation.length - 1; i >= 0 && lastUser < 0; i--) if (isUserMessage(conversation[i]!)) lastUser = i;
  const points = splitPoints(conversation);
  // The latest user message is always retained: the first cut is the last split at or
  // before it (or the last split of all, in a history without user messages).
  const eligible = lastUser >= 0 ? points.filter((p) => p <= lastUser) : points;
  if (eligible.length === 0) return 0;
  let cut = eligible[eligible.length - 1]!;
  for (let k = eligible.length - 2; k >= 0; k--) {
    const candidate = eligible[k]!;
    let tokens: number;
    try {
      tokens = await count(conversation.slice(candidate));
    } catch (err) {
      if (err instanceof ApiError && err.status === 400) continue;
      throw err;
    }
    if (tokens > keepTokens) break;
    cut = candidate;
  }
  return cut;
}

export interface SummaryRun {
  text: string;
  promptTokens: number;
  completionTokens: number;
}

export interface CompactionDeps {
  contextSize: number;
  /** Rendered prompt tokens of resolved items, as /v1/responses/input_tokens counts them. */
  count(items: Item[]): Promise<number>;
  /** Prompt tokens of a summary generation over `items`. */
  summaryPromptTokens(items: Item[]): Promise<number>;
  /** Runs the summary generation (one, non-streaming). */
  summarize(items: Item[], maxTokens: number): Promise<SummaryRun>;
  /** Called once the checks have passed, right before the summary generation. */
  onStart?(inputTokens: number): void;
}

export interface CompactionOptions {
  keepTokens: number;
  maxOutputTokens: number;
}

export interface CompactionResult {
  /** Kept system/developer messages, the retained items, then the compaction item. */
  output: Item[];
  item: Item;
  inputTokensBefore: number;
  inputTokensAfter: number;
  summary: SummaryRun;
}

/** Compacts `items` (which may themselves hold a compaction item) or throws a 400. */
export async function compactItems(items: Item[], deps: CompactionDeps, options: CompactionOptions): Promise<CompactionResult> {
  const resolved = resolveItems(items);
  const before = await deps.count(resolved);
  if (before > deps.contextSize) {
    throw tooLong(`the history has ${before} tokens, more than the context window of ${deps.contextSize} tokens`, before, deps.contextSize);
  }
  const instructions = resolved.filter(isInstruction);
  const conversation = resolved.filter((item) => !isInstruction(item));
  const cut = await chooseCut(conversation, options.keepTokens, deps.count);
  if (cut === 0) throw tooLong('nothing precedes the retained turns, so compaction cannot shorten this history', before, deps.contextSize);

  const retained = conversation.slice(cut);
  const request: Item[] = [
    ...instructions,
    ...conversation.slice(0, cut),
    { type: 'message', role: 'user', content: SUMMARY_INSTRUCTION },
  ];
  const promptTokens = await deps.summaryPromptTokens(request);
  if (promptTokens + options.maxOutputTokens > deps.contextSize) {
    throw tooLong(
      `the summary prompt has ${promptTokens} tokens, which with max_output_tokens ${options.maxOutputTokens} ` +
        `does not fit the context window of ${deps.contextSize} tokens`,
      promptTokens,
      deps.contextSize,
    );
  }
  deps.onStart?.(before);
  const summary = await deps.summarize(request, options.maxOutputTokens);
  const text = summary.text.trim();
  if (!text) {
    throw tooLong(`the summary generation produced no text within max_output_tokens ${options.maxOutputTokens}`, before, deps.contextSize);
  }

  const item = newCompactionItem({ summary: text, items: retained });
  const output = [...instructions, ...retained, item];
  const after = await deps.count(resolveItems(output));
  if (after >= before) {
    throw tooLong(`the compacted history (${after} tokens) would not be shorter than the input (${before} tokens)`, before, deps.contextSize);
  }
  return { output, item, inputTokensBefore: before, inputTokensAfter: after, summary: { ...summary, text } };
}

function tooLong(message: string, tokens: number, contextSize: number): ApiError {
  return badRequest(`compaction failed: ${message}; nothing was changed`, 'context_length_exceeded', {
    n_prompt_tokens: tokens,
    n_ctx: contextSize,
  });
}
